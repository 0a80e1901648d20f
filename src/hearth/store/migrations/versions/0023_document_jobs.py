"""Document pipeline: ``document_pages`` (a PDF's text per page, by the SHA-256 of its bytes),
``document_jobs`` (a document's pipeline job: its workflow run or a cache hit) and ``document_results``
(completed results by cache key).

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "document_pages",
        sa.Column("sha256", sa.String(64), primary_key=True),
        sa.Column("page", sa.Integer, primary_key=True),
        sa.Column("text", sa.Text, nullable=False),
        sa.Column("needs_ocr", sa.Boolean, nullable=False),
        sa.Column("chars", sa.Integer, nullable=False),
    )
    op.create_table(
        "document_jobs",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("document_id", sa.String(40), nullable=False),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("run_id", sa.String(40), nullable=True),
        sa.Column("cache_key", sa.String(64), nullable=False),
        sa.Column("versions", sa.JSON, nullable=False),
        sa.Column("cache_hit", sa.Boolean, nullable=False),
        sa.Column("result", sa.JSON, nullable=True),
        sa.Column("reviewed", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("finished_at", sa.Float, nullable=True),
    )
    op.create_index("ix_document_jobs_document", "document_jobs", ["document_id", "created_at"])
    op.create_table(
        "document_results",
        sa.Column("cache_key", sa.String(64), primary_key=True),
        sa.Column("result", sa.JSON, nullable=False),
        sa.Column("job_id", sa.String(40), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("document_results")
    op.drop_index("ix_document_jobs_document", table_name="document_jobs")
    op.drop_table("document_jobs")
    op.drop_table("document_pages")
