"""OpenAI Files and Batch API: ``openai_files`` (uploaded and produced JSONL, bytes in the blob store),
``batches`` (one row per batch, its status and counters) and ``batch_items`` (one row per answered input line,
keyed by (batch, line): the durable record that makes a resumed batch skip what was answered).

Revision ID: 0030
Revises: 0029
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "openai_files",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("purpose", sa.String(32), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("storage", sa.String(16), nullable=False),
        sa.Column("blob_key", sa.String(96), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_openai_files_caller_created", "openai_files", ["caller", "created_at", "id"])
    op.create_table(
        "batches",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("tenant", sa.String(256), nullable=True),
        sa.Column("endpoint", sa.String(32), nullable=False),
        sa.Column("input_file_id", sa.String(40), nullable=False),
        sa.Column("completion_window", sa.String(8), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("output_file_id", sa.String(40), nullable=True),
        sa.Column("error_file_id", sa.String(40), nullable=True),
        sa.Column("errors", sa.JSON, nullable=True),
        sa.Column("batch_metadata", sa.JSON, nullable=True),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("completed", sa.Integer, nullable=False),
        sa.Column("failed", sa.Integer, nullable=False),
        sa.Column("task_id", sa.String(40), nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("expires_at", sa.Float, nullable=False),
        sa.Column("in_progress_at", sa.Float, nullable=True),
        sa.Column("finalizing_at", sa.Float, nullable=True),
        sa.Column("completed_at", sa.Float, nullable=True),
        sa.Column("failed_at", sa.Float, nullable=True),
        sa.Column("expired_at", sa.Float, nullable=True),
        sa.Column("cancelling_at", sa.Float, nullable=True),
        sa.Column("cancelled_at", sa.Float, nullable=True),
    )
    op.create_index("ix_batches_caller_created", "batches", ["caller", "created_at", "id"])
    op.create_table(
        "batch_items",
        sa.Column("batch_id", sa.String(40), primary_key=True),
        sa.Column("line", sa.Integer, primary_key=True),
        sa.Column("ok", sa.Boolean, nullable=False),
        sa.Column("output", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("batch_items")
    op.drop_index("ix_batches_caller_created", table_name="batches")
    op.drop_table("batches")
    op.drop_index("ix_openai_files_caller_created", table_name="openai_files")
    op.drop_table("openai_files")
