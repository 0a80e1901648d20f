"""MCP gateway: ``mcp_servers`` (upstream servers, their encrypted credential and policy) and ``mcp_calls``
(the audit of every tool call: caller, server, tool, argument digest, outcome, latency).

Revision ID: 0031
Revises: 0030
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_servers",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("credential_enc", sa.Text, nullable=True),
        sa.Column("credential_hint", sa.String(64), nullable=True),
        sa.Column("credential_header", sa.String(128), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("timeout_s", sa.Float, nullable=False),
        sa.Column("caller_rpm", sa.Integer, nullable=False),
        sa.Column("caller_concurrency", sa.Integer, nullable=False),
        sa.Column("rules", sa.JSON, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_table(
        "mcp_calls",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("server", sa.String(128), nullable=True),
        sa.Column("tool", sa.String(256), nullable=False),
        sa.Column("args_sha256", sa.String(64), nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("error_code", sa.String(64), nullable=True),
        sa.Column("latency_ms", sa.Float, nullable=False),
    )
    op.create_index("ix_mcp_calls_caller", "mcp_calls", ["caller", "created_at"])
    op.create_index("ix_mcp_calls_server", "mcp_calls", ["server", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_mcp_calls_server", table_name="mcp_calls")
    op.drop_index("ix_mcp_calls_caller", table_name="mcp_calls")
    op.drop_table("mcp_calls")
    op.drop_table("mcp_servers")
