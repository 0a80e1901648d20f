"""Workflow runs and their steps' checkpoints.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "workflow_runs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("workflow", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("input", sa.JSON, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("error", sa.JSON, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True),
    )
    op.create_index("ix_workflow_runs_state", "workflow_runs", ["state", "updated_at"])
    op.create_table(
        "workflow_steps",
        sa.Column("run_id", sa.String(40), primary_key=True),
        sa.Column("step_id", sa.String(128), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("task_id", sa.String(40), nullable=True),
        sa.Column("review_id", sa.String(40), nullable=True),
        sa.Column("output", sa.JSON, nullable=True),
        sa.Column("error", sa.JSON, nullable=True),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("workflow_steps")
    op.drop_table("workflow_runs")
