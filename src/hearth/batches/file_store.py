"""OpenAI Files (``/v1/files``): the ``openai_files`` table and the bytes in the blob store.

A file is owned by the caller that uploaded it (or for whom a batch produced it); another caller gets
``file_not_found``, exactly as for a file that does not exist. The bytes are stored first (content addressed:
:mod:`hearth.documents.blobs`), the row second, so a row always names stored bytes. Deleting removes the row;
the bytes stay, because equal bytes are one object that another file (or document) may name.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.batches.keyset import owned_page
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.documents.blobs import BlobStore
from hearth.documents.service import display_name
from hearth.documents.stored_bytes import read_stored
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.observability.logging import get_logger
from hearth.store.db import write_transaction
from hearth.store.tables import openai_files as _t

log = get_logger("hearth.batches")

UPLOAD_PURPOSES = ("batch",)  # what a caller may upload; batch output files are "batch_output"
OUTPUT_PURPOSE = "batch_output"
MAX_LIST = 10_000


@dataclass(frozen=True, slots=True)
class StoredFile:
    id: str
    caller: str
    purpose: str
    filename: str
    bytes: int
    sha256: str
    storage: str
    blob_key: str
    created_at: float

    def view(self) -> dict[str, Any]:
        """OpenAI's File object."""
        return {"id": self.id, "object": "file", "bytes": self.bytes, "created_at": int(self.created_at),
                "filename": self.filename, "purpose": self.purpose, "status": "processed", "status_details": None,
                "expires_at": None}


@dataclass(frozen=True, slots=True)
class FilePage:
    files: list[StoredFile]
    has_more: bool

    def view(self) -> dict[str, Any]:
        data = [f.view() for f in self.files]
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": self.has_more}


class FileStore:
    """Files of callers: store, list, read, delete. ``max_bytes`` bounds an upload (413 ``file_too_large``)."""

    def __init__(self, engine: AsyncEngine, blobs: BlobStore, *, max_bytes: int, clock: Clock = SYSTEM_CLOCK) -> None:
        self.engine = engine
        self.blobs = blobs
        self.max_bytes = max_bytes
        self.clock = clock

    async def upload(self, data: bytes, *, filename: str | None, purpose: str, caller: str) -> StoredFile:
        if purpose not in UPLOAD_PURPOSES:
            raise HearthError("invalid_request", f"`purpose` must be one of {', '.join(UPLOAD_PURPOSES)} (this "
                              "gateway keeps files for batches only).", param="purpose")
        if len(data) > self.max_bytes:
            raise too_large(self.max_bytes)
        if not data:
            raise HearthError("invalid_request", "The file is empty.", param="file")
        return await self.store(data, filename=display_name(filename) or "upload.jsonl", purpose=purpose,
                                caller=caller)

    async def store(self, data: bytes, *, filename: str, purpose: str, caller: str) -> StoredFile:
        """Put the bytes in the blob store, then record the row in a transaction of its own."""
        stored = await self.put(data, filename=filename, purpose=purpose, caller=caller)
        async with write_transaction(self.engine) as conn:
            await self.insert(conn, stored)
        return stored

    async def put(self, data: bytes, *, filename: str, purpose: str, caller: str) -> StoredFile:
        """Put the bytes in the blob store; the returned file exists once :meth:`insert` ran (in a transaction
        that may write more: a finished batch records its files and its status together). Not inside a write
        transaction: the database blob store writes in one of its own."""
        ref = await self.blobs.put(data, content_type="application/jsonl")
        return StoredFile(id="file-" + new_id(), caller=caller, purpose=purpose, filename=filename, bytes=ref.size,
                          sha256=ref.sha256, storage=self.blobs.name, blob_key=ref.key, created_at=self.clock.now())

    async def insert(self, conn: AsyncConnection, stored: StoredFile) -> None:
        await conn.execute(_t.insert().values(**asdict(stored)))
        log.info("file_stored", file_id=stored.id, caller=stored.caller, purpose=stored.purpose, size=stored.bytes)

    async def get(self, file_id: str, caller: str) -> StoredFile:
        """The file if ``caller`` owns it; else ``file_not_found`` (another caller's file is not revealed)."""
        row = None
        if len(file_id) <= 40:
            async with self.engine.connect() as conn:
                row = (await conn.execute(select(_t).where(_t.c.id == file_id))).mappings().first()
        if row is None or row["caller"] != caller:
            raise HearthError("file_not_found", f"No such File object: {file_id}", param="file_id")
        return StoredFile(**row)

    async def content(self, file_id: str, caller: str) -> bytes:
        return await self.read(await self.get(file_id, caller))

    async def read(self, stored: StoredFile) -> bytes:
        """The file's bytes, checked against their SHA-256; gone or damaged bytes are a 500
        ``document_content_missing`` (a row always names stored bytes: the store lost them)."""
        return await read_stored(self.blobs, storage=stored.storage, key=stored.blob_key, row={"file_id": stored.id})

    async def delete(self, file_id: str, caller: str) -> None:
        stored = await self.get(file_id, caller)
        async with write_transaction(self.engine) as conn:
            await conn.execute(delete(_t).where(_t.c.id == stored.id))
        log.info("file_deleted", file_id=stored.id, caller=caller)

    async def page(self, caller: str, *, purpose: str | None, after: str | None, limit: int,
                   newest_first: bool = True) -> FilePage:
        """Keyset paging by (created_at, id): ``after`` is the last id of the previous page."""
        found = await owned_page(self.engine, _t, caller, after=after, limit=limit, newest_first=newest_first,
                                 where=[_t.c.purpose == purpose] if purpose is not None else [])
        if found is None:
            raise HearthError("file_not_found", f"No such File object: {after}", param="after")
        rows, more = found
        return FilePage([StoredFile(**r) for r in rows], has_more=more)


def too_large(max_bytes: int) -> HearthError:
    return HearthError("file_too_large", f"The file is larger than {max_bytes} bytes.", param="file",
                       details={"max_bytes": max_bytes})
