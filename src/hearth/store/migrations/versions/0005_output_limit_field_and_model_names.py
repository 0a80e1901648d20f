"""Endpoints name the field their upstream reads for the output limit (``max_tokens_field``); models may
show the upstream's own model name in answers (``expose_upstream_model``).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("endpoints") as batch:
        batch.add_column(sa.Column("max_tokens_field", sa.String(32), nullable=False, server_default="max_tokens"))
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("expose_upstream_model", sa.Boolean, nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("expose_upstream_model")
    with op.batch_alter_table("endpoints") as batch:
        batch.drop_column("max_tokens_field")
