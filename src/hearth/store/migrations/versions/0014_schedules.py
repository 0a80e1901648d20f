"""Schedules: cron in a time zone, with misfire and overlap policies; one row per occurrence, keyed by
(schedule id, planned instant), so any number of processes can schedule with no leader.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("cron", sa.String(256), nullable=False),
        sa.Column("time_zone", sa.String(64), nullable=False),
        sa.Column("target", sa.JSON, nullable=False),
        sa.Column("start_at", sa.Float, nullable=True),
        sa.Column("end_at", sa.Float, nullable=True),
        sa.Column("jitter_s", sa.Float, nullable=False),
        sa.Column("misfire_policy", sa.String(16), nullable=False),
        sa.Column("catchup_window_s", sa.Float, nullable=False),
        sa.Column("overlap_policy", sa.String(16), nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("planned_through", sa.Float, nullable=False),
        sa.Column("next_at", sa.Float, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("caller", "name", name="uq_schedules_caller_name"),
    )
    op.create_index("ix_schedules_due", "schedules", ["next_at"])
    op.create_table(
        "schedule_occurrences",
        sa.Column("schedule_id", sa.String(40), primary_key=True),
        sa.Column("planned_at", sa.Float, primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32), nullable=True),
        sa.Column("task_id", sa.String(40), nullable=True),
        sa.Column("review_id", sa.String(40), nullable=True),
        sa.Column("decided_at", sa.Float, nullable=False),
    )
    op.create_index("ix_schedule_occurrences_buffered", "schedule_occurrences", ["state", "schedule_id"])


def downgrade() -> None:
    op.drop_table("schedule_occurrences")
    op.drop_table("schedules")
