"""The human review queue: review items claimed with a lease, decided once, or expired (never approved by a timer).

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "review_items",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("caller", sa.String(128), nullable=True),
        sa.Column("subject_kind", sa.String(32), nullable=False),
        sa.Column("subject_id", sa.String(128), nullable=True),
        sa.Column("title", sa.String(256), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("form", sa.JSON, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("assignee", sa.String(128), nullable=True),
        sa.Column("claim_until", sa.Float, nullable=True),
        sa.Column("decision", sa.JSON, nullable=True),
        sa.Column("decided_by", sa.String(128), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("history", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("decided_at", sa.Float, nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
    )
    op.create_index("ix_review_items_queue", "review_items", ["state", "queue", "created_at"])
    op.create_index("ix_review_items_expiry", "review_items", ["expires_at"])


def downgrade() -> None:
    op.drop_table("review_items")
