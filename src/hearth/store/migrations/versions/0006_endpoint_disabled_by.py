"""Endpoints record who disabled them and when (``disabled_by``, ``disabled_at``).

``disabled_by`` is ``config`` (the registry file said ``enabled: false``), ``gateway`` (an upstream
rejected the endpoint's credentials) or ``admin`` (the admin API). A runtime disable (gateway, admin)
is kept through ``hearth apply`` and restarts until an operator enables the endpoint or the file brings
a new key. Rows disabled before this revision are classified by their recorded reason, so a credential
failure recorded by an older version is kept as well.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("endpoints") as batch:
        batch.add_column(sa.Column("disabled_by", sa.String(16), nullable=True))
        batch.add_column(sa.Column("disabled_at", sa.DateTime(timezone=True), nullable=True))
    endpoints = sa.table("endpoints", sa.column("enabled", sa.Boolean), sa.column("disabled_reason", sa.Text),
                         sa.column("disabled_by", sa.String))
    op.execute(endpoints.update().where(endpoints.c.enabled == sa.false()).values(disabled_by=sa.case(
        (endpoints.c.disabled_reason == "disabled in config", "config"),
        (endpoints.c.disabled_reason.like("upstream answered %"), "gateway"),
        else_="admin")))


def downgrade() -> None:
    with op.batch_alter_table("endpoints") as batch:
        batch.drop_column("disabled_at")
        batch.drop_column("disabled_by")
