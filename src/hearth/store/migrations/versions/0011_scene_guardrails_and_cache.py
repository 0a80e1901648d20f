"""Scenes carry the capability API's guardrails (PII redaction, injection, moderation) and cache TTL.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("scenes", sa.Column("guardrails", sa.JSON, nullable=True))
    op.add_column("scenes", sa.Column("cache_ttl_s", sa.Float, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("scenes") as batch:
        batch.drop_column("cache_ttl_s")
        batch.drop_column("guardrails")
