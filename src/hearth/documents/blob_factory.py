"""Which blob store this process uses: ``document_store`` in the settings (docs/documents.md)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.documents.blobs import BlobStore
from hearth.documents.database_blobs import DatabaseBlobStore
from hearth.documents.local_blobs import LocalBlobStore
from hearth.settings import Settings


def create_blob_store(settings: Settings, engine: AsyncEngine) -> BlobStore:
    """``local``: files under ``document_dir``; ``database``: chunks in ``engine``'s database. Every process
    of one deployment must use the same store (a document row names its store, and a process that reads
    another store's document answers ``document_content_missing``)."""
    if settings.document_store == "database":
        return DatabaseBlobStore(engine)
    return LocalBlobStore(settings.document_dir)
