"""Budget ledger rows say how many calls they cover: a group commit writes one reservation row per
budget counter for all the calls that share it, not one per call.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("budget_ledger", sa.Column("calls", sa.Integer(), nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("budget_ledger") as batch:
        batch.drop_column("calls")
