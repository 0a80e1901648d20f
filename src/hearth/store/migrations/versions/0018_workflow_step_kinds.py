"""Every workflow step kind runs: a step's per-kind detail and loop round, a run's output and parent, and the
signals (external events) sent to runs.

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("workflow_runs") as batch:
        batch.add_column(sa.Column("output", sa.JSON, nullable=True))
        batch.add_column(sa.Column("parent", sa.JSON, nullable=True))
    with op.batch_alter_table("workflow_steps") as batch:
        batch.add_column(sa.Column("detail", sa.JSON, nullable=True))
        batch.add_column(sa.Column("round", sa.Integer, nullable=False, server_default="0"))
    op.create_table(
        "workflow_signals",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("run_id", sa.String(40), nullable=False),
        sa.Column("event", sa.String(128), nullable=False),
        sa.Column("payload", sa.JSON, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("consumed_by", sa.String(160), nullable=True),
        sa.Column("consumed_at", sa.Float, nullable=True),
    )
    op.create_index("ix_workflow_signals_run", "workflow_signals", ["run_id", "event"])


def downgrade() -> None:
    op.drop_table("workflow_signals")
    with op.batch_alter_table("workflow_steps") as batch:
        batch.drop_column("round")
        batch.drop_column("detail")
    with op.batch_alter_table("workflow_runs") as batch:
        batch.drop_column("parent")
        batch.drop_column("output")
