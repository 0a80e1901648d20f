"""Budgets choose how a call's prompt is reserved: ``bound`` (UTF-8 size, never overrun) or ``approx``.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("budgets") as batch:
        batch.add_column(sa.Column("estimate", sa.String(16), nullable=False, server_default="bound"))


def downgrade() -> None:
    with op.batch_alter_table("budgets") as batch:
        batch.drop_column("estimate")
