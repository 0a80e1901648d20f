"""The ``database`` blob store: an object's bytes as ordered chunks in the main database.

For several hosts without a shared file system or an object store: every API and worker process that
reaches the database reads the same bytes, with no extra service to run. An object is rows
``(key, seq, data)`` of :data:`CHUNK_BYTES` each (the last one shorter; an empty object is one empty
chunk), ``bytea`` on PostgreSQL and ``BLOB`` on SQLite, all inserted in **one transaction**: an object
is all its chunks or absent, whatever crashes when.

Two processes storing the same bytes at once both succeed: the second one's insert collides with the
first one's primary key, and finding the object complete then is the same outcome as having written it.
"""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.documents.blobs import BlobCorrupted, BlobNotFound, BlobRef, blob_key, key_digest, sha256_hex
from hearth.store.db import write_transaction
from hearth.store.tables import document_blob_chunks as _t

CHUNK_BYTES = 1024 * 1024  # well under every driver's parameter limit; a 50 MiB PDF is 50 rows


class DatabaseBlobStore:
    """Objects as chunk rows in table ``document_blob_chunks`` of ``engine``'s database."""

    name = "database"

    def __init__(self, engine: AsyncEngine, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        if chunk_bytes <= 0:
            raise ValueError("chunk_bytes must be positive")
        self.engine = engine
        self.chunk_bytes = chunk_bytes

    async def put(self, data: bytes, *, content_type: str) -> BlobRef:
        digest = sha256_hex(data)
        ref = BlobRef(blob_key(digest), digest, len(data), content_type)
        step = self.chunk_bytes
        rows = [{"key": ref.key, "seq": i, "data": data[at:at + step]}
                for i, at in enumerate(range(0, len(data), step))] or [{"key": ref.key, "seq": 0, "data": b""}]
        try:
            async with write_transaction(self.engine) as conn:
                if await _present(conn, ref.key):
                    return ref
                await conn.execute(_t.insert(), rows)
        except IntegrityError:  # a parallel put of the same bytes committed first
            if not await self.exists(ref.key):
                raise
        return ref

    async def get(self, key: str) -> bytes:
        digest = key_digest(key)
        async with self.engine.connect() as conn:
            result = await conn.execute(select(_t.c.seq, _t.c.data).where(_t.c.key == key).order_by(_t.c.seq))
            rows = result.all()
        if not rows:
            raise BlobNotFound(key)
        if [r[0] for r in rows] != list(range(len(rows))):
            raise BlobCorrupted(key)
        data = b"".join(bytes(r[1]) for r in rows)
        if sha256_hex(data) != digest:
            raise BlobCorrupted(key)
        return data

    async def exists(self, key: str) -> bool:
        key_digest(key)
        async with self.engine.connect() as conn:
            return await _present(conn, key)

    async def delete(self, key: str) -> None:
        key_digest(key)
        async with write_transaction(self.engine) as conn:
            await conn.execute(delete(_t).where(_t.c.key == key))


async def _present(conn: AsyncConnection, key: str) -> bool:
    """Chunk 0 exists only once the whole object was committed with it."""
    found = await conn.execute(select(_t.c.seq).where(_t.c.key == key, _t.c.seq == 0))
    return found.first() is not None
