"""Request-log rollups: ``request_rollups_minute`` and ``request_rollups_hour`` (issue 13: the console at scale).

Revision ID: 0027
Revises: 0026
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

_TABLES = ("request_rollups_minute", "request_rollups_hour")
_LATENCY_BUCKETS = 16


def upgrade() -> None:
    for name in _TABLES:
        op.create_table(
            name,
            sa.Column("bucket", sa.BigInteger, primary_key=True),
            sa.Column("caller", sa.String(128), primary_key=True),
            sa.Column("model", sa.String(128), primary_key=True),
            sa.Column("endpoint", sa.String(128), primary_key=True),
            sa.Column("status_class", sa.Integer, primary_key=True),
            sa.Column("calls", sa.BigInteger, nullable=False),
            sa.Column("errors", sa.BigInteger, nullable=False),
            sa.Column("prompt_tokens", sa.BigInteger, nullable=False),
            sa.Column("completion_tokens", sa.BigInteger, nullable=False),
            sa.Column("cost", sa.Float, nullable=False),
            sa.Column("latency_ms_sum", sa.Float, nullable=False),
            *(sa.Column(f"lat_{i}", sa.BigInteger, nullable=False) for i in range(_LATENCY_BUCKETS)),
        )


def downgrade() -> None:
    for name in reversed(_TABLES):
        op.drop_table(name)
