"""Endpoints may set their own stream timeouts (``first_token_timeout_s``, ``stream_idle_timeout_s``; NULL
means the default); providers list the client headers forwarded upstream (``forward_headers``) and may
relay the upstream's ``x-ratelimit-*`` headers to callers (``relay_ratelimit_headers``).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMNs, on SQLite too: a batch operation there may rebuild the table, and rebuilding
    # ``providers`` (which endpoints reference) fails under PRAGMA foreign_keys=ON once it has rows.
    op.add_column("endpoints", sa.Column("first_token_timeout_s", sa.Float, nullable=True))
    op.add_column("endpoints", sa.Column("stream_idle_timeout_s", sa.Float, nullable=True))
    op.add_column("providers", sa.Column("forward_headers", sa.JSON, nullable=False, server_default="[]"))
    op.add_column("providers", sa.Column("relay_ratelimit_headers", sa.Boolean, nullable=False,
                                         server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("providers") as batch:
        batch.drop_column("relay_ratelimit_headers")
        batch.drop_column("forward_headers")
    with op.batch_alter_table("endpoints") as batch:
        batch.drop_column("stream_idle_timeout_s")
        batch.drop_column("first_token_timeout_s")
