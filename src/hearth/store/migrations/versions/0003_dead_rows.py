"""Dead rows: what a batch writer's table refused (bad data), kept instead of losing the whole batch.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "dead_rows",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("writer", sa.String(32), nullable=False),
        sa.Column("row_key", sa.String(128), nullable=True),
        sa.Column("error", sa.Text, nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_dead_rows_created_at", "dead_rows", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_dead_rows_created_at", table_name="dead_rows")
    op.drop_table("dead_rows")
