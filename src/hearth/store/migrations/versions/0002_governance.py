"""Governance: caller policies, scenes, budgets and their ledger; request-log governance fields.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TZ = sa.DateTime(timezone=True)


def upgrade() -> None:
    with op.batch_alter_table("callers") as batch:
        batch.add_column(sa.Column("allowed_models", sa.JSON, nullable=True))
        batch.add_column(sa.Column("allowed_scenes", sa.JSON, nullable=True))
        batch.add_column(sa.Column("default_scene", sa.String(128), nullable=True))
        batch.add_column(sa.Column("signing_key_enc", sa.Text, nullable=True))
        batch.add_column(sa.Column("require_signature", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("limits", sa.JSON, nullable=True))
        batch.add_column(sa.Column("revoked_at", _TZ, nullable=True))
        batch.add_column(sa.Column("updated_at", _TZ, nullable=True))
    with op.batch_alter_table("callers") as batch:
        batch.alter_column("require_signature", server_default=None)
    op.create_table(
        "scenes",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("default_model", sa.String(128), nullable=False),
        sa.Column("allowed_models", sa.JSON, nullable=False),
        sa.Column("max_tokens_cap", sa.Integer, nullable=True),
        sa.Column("fallback_models", sa.JSON, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
    )
    op.create_table(
        "budgets",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("subject", sa.String(256), nullable=False),
        sa.Column("period", sa.String(16), nullable=False),
        sa.Column("unit", sa.String(16), nullable=False),
        sa.Column("limit_amount", sa.BigInteger, nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False),
        sa.Column("updated_at", _TZ, nullable=False),
    )
    op.create_table(
        "budget_ledger",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("call_id", sa.String(64), nullable=False),
        sa.Column("budget", sa.String(128), nullable=False),
        sa.Column("counter_key", sa.String(512), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("amount", sa.BigInteger, nullable=False),
        sa.Column("refund", sa.BigInteger, nullable=False),
        sa.Column("overrun", sa.BigInteger, nullable=False),
        sa.Column("created_at", _TZ, nullable=False),
        sa.UniqueConstraint("call_id", "counter_key", "kind", name="uq_budget_ledger_call_counter_kind"),
    )
    op.create_index("ix_budget_ledger_counter", "budget_ledger", ["counter_key"])
    with op.batch_alter_table("request_logs") as batch:
        batch.add_column(sa.Column("tenant", sa.String(256), nullable=True))
        batch.add_column(sa.Column("client_ip", sa.String(64), nullable=True))
        batch.add_column(sa.Column("scene", sa.String(128), nullable=True))
        batch.add_column(sa.Column("fallback_used", sa.Boolean, nullable=False, server_default=sa.false()))
        batch.add_column(sa.Column("attempted_models", sa.JSON, nullable=True))
        batch.add_column(sa.Column("effective_max_tokens", sa.Integer, nullable=True))
        batch.add_column(sa.Column("estimated_cost", sa.Float, nullable=True))
    with op.batch_alter_table("request_logs") as batch:
        batch.alter_column("fallback_used", server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("request_logs") as batch:
        for col in ("estimated_cost", "effective_max_tokens", "attempted_models", "fallback_used", "scene",
                    "client_ip", "tenant"):
            batch.drop_column(col)
    op.drop_table("budget_ledger")
    op.drop_table("budgets")
    op.drop_table("scenes")
    with op.batch_alter_table("callers") as batch:
        for col in ("updated_at", "revoked_at", "limits", "require_signature", "signing_key_enc", "default_scene",
                    "allowed_scenes", "allowed_models"):
            batch.drop_column(col)
