"""The console at scale (issue 13): request-log rollups per minute, hour and day; indexes for the request-log
filters and the task list's default order.

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

_TABLES = ("request_rollups_minute", "request_rollups_hour", "request_rollups_day")
_LOG_FILTERS = ("status", "endpoint", "error_code", "route")  # index names: ix_request_logs_<short>_created
_SHORT = {"error_code": "error"}
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
    for column in _LOG_FILTERS:
        op.create_index(f"ix_request_logs_{_SHORT.get(column, column)}_created", "request_logs",
                        [column, "created_at"])
    op.create_index("ix_tasks_created", "tasks", ["created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_tasks_created", table_name="tasks")
    for column in _LOG_FILTERS:
        op.drop_index(f"ix_request_logs_{_SHORT.get(column, column)}_created", table_name="request_logs")
    for name in reversed(_TABLES):
        op.drop_table(name)
