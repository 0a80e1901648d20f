"""Alerts: one row per (kind, subject) per dedup window, owed to the alert webhook (docs/operations.md, Alerts).

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("subject", sa.String(256), nullable=False),
        sa.Column("severity", sa.String(8), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("dedup_key", sa.String(300), nullable=False),
        sa.Column("window_start", sa.Float, nullable=False),
        sa.Column("window_end", sa.Float, nullable=False),
        sa.Column("suppressed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("previous_suppressed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_seen_at", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("next_at", sa.Float, nullable=False),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("delivered_at", sa.Float, nullable=True),
    )
    op.create_index("ix_alerts_dedup", "alerts", ["dedup_key", "window_start"])
    op.create_index("ix_alerts_due", "alerts", ["state", "next_at"])
    op.create_index("ix_alerts_kind", "alerts", ["kind", "id"])


def downgrade() -> None:
    op.drop_table("alerts")
