"""The task engine: tasks (the queue itself), attempts, events, dead letters and callback deliveries;
request logs say which task a model call belonged to.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def _where(condition: str) -> dict[str, Any]:
    return {"sqlite_where": sa.text(condition), "postgresql_where": sa.text(condition)}


def upgrade() -> None:
    op.create_table(
        "tasks",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("task_type", sa.String(64), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("tenant", sa.String(256), nullable=True),
        sa.Column("end_user", sa.String(256), nullable=True),
        sa.Column("fair_key", sa.String(300), nullable=False),
        sa.Column("fair_seq", sa.BigInteger, nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("result", sa.JSON, nullable=True),
        sa.Column("error", sa.JSON, nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("failure_stage", sa.String(64), nullable=True),
        sa.Column("current_step", sa.String(128), nullable=True),
        sa.Column("progress", sa.Integer, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("max_attempts", sa.Integer, nullable=False),
        sa.Column("repeat_safe", sa.Boolean, nullable=False),
        sa.Column("run_after", sa.Float, nullable=False),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("worker", sa.String(128), nullable=True),
        sa.Column("cancel_requested", sa.Boolean, nullable=False),
        sa.Column("idempotency_key", sa.String(128), nullable=True),
        sa.Column("replay_of", sa.String(40), nullable=True),
        sa.Column("callback_url", sa.Text, nullable=True),
        sa.Column("request_id", sa.String(64), nullable=True),
        sa.Column("versions", sa.JSON, nullable=True),
        sa.Column("hold_reason", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("started_at", sa.Float, nullable=True),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.UniqueConstraint("caller", "idempotency_key", name="uq_tasks_caller_idempotency"),
    )
    op.create_table(
        "task_attempts",
        sa.Column("task_id", sa.String(40), primary_key=True),
        sa.Column("attempt", sa.Integer, primary_key=True),
        sa.Column("worker", sa.String(128), nullable=True),
        sa.Column("started_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("error_message", sa.Text, nullable=True),
    )
    op.create_table(
        "task_events",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.String(40), nullable=False),
        sa.Column("at", sa.Float, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("progress", sa.Integer, nullable=True),
        sa.Column("step", sa.String(128), nullable=True),
        sa.Column("detail", sa.JSON, nullable=True),
    )
    op.create_table(
        "dead_letters",
        sa.Column("task_id", sa.String(40), primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("severity", sa.String(2), nullable=False),
        sa.Column("task_type", sa.String(64), nullable=False),
        sa.Column("queue", sa.String(64), nullable=False),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("failure_stage", sa.String(64), nullable=True),
        sa.Column("message", sa.Text, nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("opened_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("history", sa.JSON, nullable=False),
    )
    op.create_table(
        "callback_deliveries",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.String(40), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("task_state", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_at", sa.Float, nullable=False),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("delivered_at", sa.Float, nullable=True),
    )
    op.create_index("ix_tasks_claim", "tasks", ["queue", sa.text("priority DESC"), "fair_seq", "created_at", "id"],
                    **_where("state = 'queued'"))
    op.create_index("ix_tasks_pending_fair", "tasks", ["queue", "fair_key", "fair_seq"],
                    **_where("state IN ('queued', 'waiting')"))
    op.create_index("ix_tasks_running_lease", "tasks", ["lease_until"], **_where("state = 'running'"))
    op.create_index("ix_tasks_waiting_run_after", "tasks", ["run_after"], **_where("state = 'waiting'"))
    op.create_index("ix_tasks_updated", "tasks", ["updated_at", "id"])
    op.create_index("ix_tasks_caller_created", "tasks", ["caller", "created_at", "id"])
    op.create_index("ix_task_events_task", "task_events", ["task_id", "id"])
    op.create_index("ix_dead_letters_status", "dead_letters", ["status", "opened_at"])
    op.create_index("ix_callback_deliveries_due", "callback_deliveries", ["state", "next_at"])
    op.create_index("ix_callback_deliveries_task", "callback_deliveries", ["task_id"])
    op.add_column("request_logs", sa.Column("task_id", sa.String(40), nullable=True))
    op.create_index("ix_request_logs_task", "request_logs", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_request_logs_task", "request_logs")
    with op.batch_alter_table("request_logs") as batch:
        batch.drop_column("task_id")
    for table in ("callback_deliveries", "dead_letters", "task_events", "task_attempts", "tasks"):
        op.drop_table(table)
