"""Heartbeats become HOT updates: the running tasks' index no longer holds ``lease_until`` (a heartbeat changes
only that column, so with no index on it PostgreSQL keeps the new version in the page without new index entries),
and on PostgreSQL the tasks table leaves 15 % of each page free for such versions (fillfactor 85; SQLite has none).
The index is on ``id``: a join on the task id that the planner runs through it stays an index lookup (keyed on
``queue`` it was one deduplicated key, and the planner scanned all of it — dead entries too — once per row).

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_RUNNING: dict[str, Any] = {"sqlite_where": sa.text("state = 'running'"),
                            "postgresql_where": sa.text("state = 'running'")}


def upgrade() -> None:
    op.drop_index("ix_tasks_running_lease", table_name="tasks")
    op.create_index("ix_tasks_running", "tasks", ["id"], **_RUNNING)
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE tasks SET (fillfactor = 85)")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("ALTER TABLE tasks RESET (fillfactor)")
    op.drop_index("ix_tasks_running", table_name="tasks")
    op.create_index("ix_tasks_running_lease", "tasks", ["lease_until"], **_RUNNING)
