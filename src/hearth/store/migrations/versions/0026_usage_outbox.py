"""Usage events: ``usage_outbox`` (one row per AIUsageRecorded event and configured sink, delivered by the relay).

Revision ID: 0026
Revises: 0025
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "usage_outbox",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("event_id", sa.String(36), nullable=False),
        sa.Column("sink", sa.String(16), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_at", sa.Float, nullable=False),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("delivered_at", sa.Float, nullable=True),
        sa.UniqueConstraint("event_id", "sink", name="uq_usage_outbox_event_sink"),
    )
    op.create_index("ix_usage_outbox_due", "usage_outbox", ["sink", "state", "next_at"])
    op.create_index("ix_usage_outbox_delivered", "usage_outbox", ["state", "delivered_at"])


def downgrade() -> None:
    op.drop_index("ix_usage_outbox_delivered", table_name="usage_outbox")
    op.drop_index("ix_usage_outbox_due", table_name="usage_outbox")
    op.drop_table("usage_outbox")
