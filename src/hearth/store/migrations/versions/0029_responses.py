"""The Responses API: ``responses`` (stored Response objects and their conversations, per caller, with expiry).

Revision ID: 0029
Revises: 0028
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("previous_response_id", sa.String(64), nullable=True),
        sa.Column("response", sa.JSON, nullable=False),
        sa.Column("conversation", sa.JSON, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
    )
    op.create_index("ix_responses_expires", "responses", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_responses_expires", table_name="responses")
    op.drop_table("responses")
