"""Initial schema: registry, callers, request logs.

Written out explicitly (not derived from ``tables.py``) so that later changes to the table
definitions arrive through their own migrations and this one stays what it was.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table("meta", sa.Column("key", sa.String(64), primary_key=True),
                    sa.Column("value", sa.Text, nullable=False))
    op.create_table(
        "providers",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("base_url", sa.Text, nullable=True),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
    )
    op.create_table(
        "quota_groups",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("max_concurrency", sa.Integer, nullable=False),
        sa.Column("rpm", sa.Integer, nullable=False),
        sa.Column("tpm", sa.Integer, nullable=False),
        sa.Column("daily_tokens", sa.BigInteger, nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
    )
    op.create_table(
        "endpoints",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("provider", sa.String(128), sa.ForeignKey("providers.name"), nullable=False),
        sa.Column("quota_group", sa.String(128), sa.ForeignKey("quota_groups.name"), nullable=True),
        sa.Column("base_url", sa.Text, nullable=True),
        sa.Column("upstream_model", sa.String(256), nullable=False),
        sa.Column("api_key_enc", sa.Text, nullable=True),
        sa.Column("api_key_hint", sa.String(32), nullable=True),
        sa.Column("key_version", sa.Integer, nullable=False),
        sa.Column("max_concurrency", sa.Integer, nullable=False),
        sa.Column("rpm", sa.Integer, nullable=False),
        sa.Column("tpm", sa.Integer, nullable=False),
        sa.Column("weight", sa.Float, nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("timeout_s", sa.Float, nullable=False),
        sa.Column("capabilities", sa.JSON, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("disabled_reason", sa.Text, nullable=True),
        sa.Column("updated_at", _TZ, nullable=False),
    )
    op.create_table(
        "models",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
    )
    op.create_table(
        "model_pool_members",
        sa.Column("model", sa.String(128), sa.ForeignKey("models.name", ondelete="CASCADE"), primary_key=True),
        sa.Column("endpoint", sa.String(128), sa.ForeignKey("endpoints.name", ondelete="CASCADE"),
                  primary_key=True),
    )
    op.create_table(
        "prices",
        sa.Column("model", sa.String(256), primary_key=True),
        sa.Column("input_per_1m", sa.Float, nullable=False),
        sa.Column("output_per_1m", sa.Float, nullable=False),
        sa.Column("currency", sa.String(8), nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
    )
    op.create_table(
        "callers",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("key_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("key_prefix", sa.String(16), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("created_at", _TZ, nullable=False),
    )
    op.create_table(
        "request_logs",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("created_at", _TZ, nullable=False),
        sa.Column("caller", sa.String(128), nullable=True),
        sa.Column("route", sa.String(32), nullable=False),
        sa.Column("model", sa.String(128), nullable=True),
        sa.Column("endpoint", sa.String(128), nullable=True),
        sa.Column("upstream_model", sa.String(256), nullable=True),
        sa.Column("stream", sa.Boolean, nullable=False),
        sa.Column("status", sa.Integer, nullable=False),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("prompt_tokens", sa.Integer, nullable=False),
        sa.Column("completion_tokens", sa.Integer, nullable=False),
        sa.Column("usage_estimated", sa.Boolean, nullable=False),
        sa.Column("cost", sa.Float, nullable=False),
        sa.Column("latency_ms", sa.Float, nullable=False),
        sa.Column("ttft_ms", sa.Float, nullable=True),
        sa.Column("end_user", sa.String(256), nullable=True),
    )
    op.create_index("ix_request_logs_created_at", "request_logs", ["created_at"])
    op.create_index("ix_request_logs_caller_created", "request_logs", ["caller", "created_at"])
    op.create_index("ix_request_logs_model_created", "request_logs", ["model", "created_at"])
    op.create_index("ix_request_logs_request_id", "request_logs", ["request_id"])


def downgrade() -> None:
    for name in ("request_logs", "callers", "prices", "model_pool_members", "models", "endpoints",
                 "quota_groups", "providers", "meta"):
        op.drop_table(name)
