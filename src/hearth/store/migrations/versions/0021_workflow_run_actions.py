"""Operator actions on workflow runs: the audit table, the run's fencing epoch, and each step's override.

A rerun moves a step's existing ``round`` on (as a loop iteration does), so it needs no column of its own.

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflow_runs") as batch:
        batch.add_column(sa.Column("epoch", sa.Integer, nullable=False, server_default="0"))
    with op.batch_alter_table("workflow_steps") as batch:
        batch.add_column(sa.Column("override", sa.String(16), nullable=True))
    op.create_table(
        "workflow_run_actions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("step_id", sa.String(128), nullable=True),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("operator", sa.String(128), nullable=False),
        sa.Column("reason", sa.String(2000), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("before", sa.JSON, nullable=False),
        sa.Column("after", sa.JSON, nullable=False),
    )
    op.create_index("ix_workflow_run_actions_run", "workflow_run_actions", ["run_id", "id"])


def downgrade() -> None:
    op.drop_table("workflow_run_actions")
    with op.batch_alter_table("workflow_steps") as batch:
        batch.drop_column("override")
    with op.batch_alter_table("workflow_runs") as batch:
        batch.drop_column("epoch")
