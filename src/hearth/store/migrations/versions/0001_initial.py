"""Initial schema: registry, callers, request logs.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

from alembic import op

from hearth.store.tables import metadata

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TABLES = ["meta", "providers", "quota_groups", "endpoints", "models", "model_pool_members",
           "prices", "callers", "request_logs"]


def upgrade() -> None:
    bind = op.get_bind()
    for name in _TABLES:
        metadata.tables[name].create(bind, checkfirst=True)


def downgrade() -> None:
    bind = op.get_bind()
    for name in reversed(_TABLES):
        metadata.tables[name].drop(bind, checkfirst=True)
