"""Prompts (codes, immutable versions with one active per code, an audit trail of status changes) and roles;
request logs say which capability and prompt version a row belongs to.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")
_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "prompts",
        sa.Column("code", sa.String(128), primary_key=True),
        sa.Column("display_name", sa.String(256), nullable=False),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )
    op.create_table(
        "prompt_versions",
        sa.Column("code", sa.String(128), sa.ForeignKey("prompts.code"), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("default_locale", sa.String(35), nullable=False),
        sa.Column("contents", sa.JSON, nullable=False),
        sa.Column("variables", sa.JSON, nullable=False),
        sa.Column("model", sa.String(128), nullable=True),
        sa.Column("scene", sa.String(128), nullable=True),
        sa.Column("output_schema", sa.JSON, nullable=True),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("quality_gate", sa.JSON, nullable=True),
        sa.Column("canary_share", sa.Float, nullable=False, server_default="0"),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("created_by", sa.String(128), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )
    op.create_index("uq_prompt_versions_one_active", "prompt_versions", ["code"], unique=True,
                    sqlite_where=sa.text("status = 'active'"), postgresql_where=sa.text("status = 'active'"))
    op.create_table(
        "prompt_events",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("code", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("operator", sa.String(128), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("previous_active", sa.Integer, nullable=True),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_index("ix_prompt_events_code", "prompt_events", ["code", "id"])
    op.create_table(
        "roles",
        sa.Column("code", sa.String(128), primary_key=True),
        sa.Column("display_name", sa.String(256), nullable=False),
        sa.Column("default_locale", sa.String(35), nullable=False),
        sa.Column("persona", sa.JSON, nullable=False),
        sa.Column("prompt_code", sa.String(128), nullable=True),
        sa.Column("model", sa.String(128), nullable=True),
        sa.Column("scene", sa.String(128), nullable=True),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("updated_at", _TS, nullable=False),
    )

    with op.batch_alter_table("request_logs") as batch:
        batch.add_column(sa.Column("capability", sa.String(32), nullable=True))
        batch.add_column(sa.Column("prompt_code", sa.String(128), nullable=True))
        batch.add_column(sa.Column("prompt_version", sa.Integer, nullable=True))
        batch.add_column(sa.Column("guardrails", sa.JSON, nullable=True))
        batch.add_column(sa.Column("degraded", sa.Boolean, nullable=True))
        batch.add_column(sa.Column("cache_hit", sa.Boolean, nullable=True))
    op.create_index("ix_request_logs_prompt", "request_logs", ["prompt_code", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_request_logs_prompt", table_name="request_logs")
    with op.batch_alter_table("request_logs") as batch:
        for name in ("cache_hit", "degraded", "guardrails", "prompt_version", "prompt_code", "capability"):
            batch.drop_column(name)
    op.drop_table("roles")
    op.drop_index("ix_prompt_events_code", table_name="prompt_events")
    op.drop_table("prompt_events")
    op.drop_index("uq_prompt_versions_one_active", table_name="prompt_versions")
    op.drop_table("prompt_versions")
    op.drop_table("prompts")
