"""Documents: the ``documents`` table (who owns an upload, its sniffed type, size, sha256 and object key) and
``document_blob_chunks`` (the ``database`` blob store: an object's bytes in ordered chunks).

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "documents",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("caller", sa.String(128), nullable=False),
        sa.Column("filename", sa.String(255), nullable=True),
        sa.Column("content_type", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("storage", sa.String(16), nullable=False),
        sa.Column("blob_key", sa.String(96), nullable=False),
        sa.Column("page_count", sa.Integer, nullable=True),
        sa.Column("created_at", sa.Float, nullable=False),
    )
    op.create_index("ix_documents_caller", "documents", ["caller", "created_at"])
    op.create_index("ix_documents_sha256", "documents", ["sha256"])
    op.create_table(
        "document_blob_chunks",
        sa.Column("key", sa.String(96), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("data", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("document_blob_chunks")
    op.drop_index("ix_documents_sha256", table_name="documents")
    op.drop_index("ix_documents_caller", table_name="documents")
    op.drop_table("documents")
