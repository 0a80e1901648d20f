"""Blob stores for the document tests: each driver on a real backing (a directory; SQLite; PostgreSQL),
and a look at what each one physically holds (files, chunk rows) — not through the store's own answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from sqlalchemy import func, select

from hearth.documents.blobs import BlobStore
from hearth.documents.database_blobs import DatabaseBlobStore
from hearth.documents.local_blobs import LocalBlobStore
from hearth.store.db import create_engine
from hearth.store.tables import document_blob_chunks

DRIVERS = ["local", "database-sqlite", "database-postgres"]


@asynccontextmanager
async def open_store(request: pytest.FixtureRequest, kind: str, tmp_path: Path, *,
                     chunk_bytes: int = 1000) -> AsyncIterator[BlobStore]:
    """``kind`` of :data:`DRIVERS`; the database ones on a fresh migrated database, in small chunks so a
    few kilobytes already make several."""
    if kind == "local":
        yield LocalBlobStore(tmp_path / "blobs")
        return
    if kind == "database-sqlite":
        request.getfixturevalue("migrated_templates").sqlite_copy(tmp_path / "blobs.db")
        url = f"sqlite+aiosqlite:///{tmp_path}/blobs.db"
    else:
        url = request.getfixturevalue("postgres_url")
    engine = create_engine(url)
    try:
        yield DatabaseBlobStore(engine, chunk_bytes=chunk_bytes)
    finally:
        await engine.dispose()


async def stored_objects(store: BlobStore) -> dict[str, int]:
    """Key → number of physical pieces (files, chunk rows) the store holds, read behind its back."""
    if isinstance(store, LocalBlobStore):
        files = [p for p in store.root.rglob("*") if p.is_file()] if store.root.exists() else []
        return {str(p.relative_to(store.root)): 1 for p in files}
    assert isinstance(store, DatabaseBlobStore)
    t = document_blob_chunks
    async with store.engine.connect() as conn:
        rows = (await conn.execute(select(t.c.key, func.count()).group_by(t.c.key))).all()
    return {key: count for key, count in rows}
