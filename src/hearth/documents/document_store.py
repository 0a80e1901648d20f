"""The ``documents`` table: one row per accepted document (owner, display name, sniffed type, size,
SHA-256, which blob store holds it under which key, page count once parsed).

A row is written only after its blob is stored (:mod:`hearth.documents.service`), so a row always names
bytes that exist; several rows may name one blob (equal bytes).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import write_transaction
from hearth.store.tables import documents as _t


@dataclass(frozen=True, slots=True)
class Document:
    id: str
    caller: str
    filename: str | None
    content_type: str
    size: int
    sha256: str
    storage: str
    blob_key: str
    page_count: int | None
    created_at: float

    def view(self) -> dict[str, Any]:
        """What callers see: everything but where the bytes are kept (storage, key)."""
        return {"id": self.id, "caller": self.caller, "filename": self.filename, "content_type": self.content_type,
                "size": self.size, "sha256": self.sha256, "page_count": self.page_count,
                "created_at": self.created_at}


class DocumentStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def insert(self, doc: Document) -> None:
        async with write_transaction(self.engine) as conn:
            await conn.execute(_t.insert().values(**asdict(doc)))

    async def get(self, document_id: str) -> Document | None:
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(_t).where(_t.c.id == document_id))).mappings().first()
        return Document(**row) if row is not None else None

    async def set_page_count(self, document_id: str, pages: int) -> bool:
        """Record the page count the parser found; False if the document does not exist."""
        async with write_transaction(self.engine) as conn:
            result = await conn.execute(update(_t).where(_t.c.id == document_id).values(page_count=pages))
        return result.rowcount == 1

    async def referenced(self, blob_key: str) -> bool:
        """Whether any document names this blob (a blob may be deleted only if none does)."""
        async with self.engine.connect() as conn:
            found = await conn.execute(select(_t.c.id).where(_t.c.blob_key == blob_key).limit(1))
            return found.first() is not None
