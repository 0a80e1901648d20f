"""The console's list of workflow runs, newest first and keyset-paged, with or without a state filter: indexes on
``workflow_runs`` (``created_at``, ``id``) and (``state``, ``created_at``, ``id``), so a page is an index range
read however many runs there are (``created_at`` never changes, so a page boundary never moves).

Revision ID: 0028
Revises: 0027
"""

from __future__ import annotations

from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_workflow_runs_created", "workflow_runs", ["created_at", "id"])
    op.create_index("ix_workflow_runs_state_created", "workflow_runs", ["state", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_workflow_runs_state_created", "workflow_runs")
    op.drop_index("ix_workflow_runs_created", "workflow_runs")
