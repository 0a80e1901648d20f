"""Accepting documents and handing their bytes out again: :class:`DocumentService`.

An upload is checked before anything is written — size (``document_too_large``, 413), emptiness (400),
type from the bytes (``document_type_unsupported``, 415, :mod:`hearth.documents.sniff`) — then its bytes
go to the blob store, and only then is its row inserted. So:

* a row always names a stored blob (a row without its bytes never exists);
* a failure between the two leaves a blob no row names. That is the one garbage this order allows, and
  it is harmless: the blob is content addressed, so the retried upload (or anyone's upload of the same
  bytes) finds and reuses it instead of storing a second copy. Blobs are never deleted on a failed
  upload, because another document may name the same bytes by then.

``file_id`` and ``file_url`` inputs are read by the capability layer's guarded readers
(:func:`hearth.capabilities.sources.read_file_bytes`, :func:`~hearth.capabilities.sources.fetch_url_bytes`:
path confinement, the SSRF guard with pinned addresses, redirects, time and size limits), with the
document size limit, and then judged like an upload.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Awaitable
from dataclasses import dataclass

import aiohttp
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.capabilities.sources import SourceBytes, SourceLimits, fetch_url_bytes, read_file_bytes
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.documents.blobs import BlobStore
from hearth.documents.document_store import Document, DocumentStore
from hearth.documents.sniff import DOCUMENT_TYPES, checked_type
from hearth.documents.stored_bytes import read_stored
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.observability.logging import get_logger

log = get_logger("hearth.documents")

MAX_FILENAME_CHARS = 255
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """What the operator allows (``document_max_bytes``, ``document_max_pages``; the types are those
    :mod:`hearth.documents.sniff` recognises, or fewer)."""

    max_bytes: int = 50 * 1024 * 1024
    max_pages: int = 2000
    allowed_types: tuple[str, ...] = DOCUMENT_TYPES

    def __post_init__(self) -> None:
        if self.max_bytes <= 0 or self.max_pages <= 0:
            raise ValueError("max_bytes and max_pages must be positive")
        if not set(self.allowed_types) <= set(DOCUMENT_TYPES):
            raise ValueError(f"allowed_types must be among {DOCUMENT_TYPES}")


class DocumentService:
    """Documents of callers: upload (bytes, ``file_id``, ``file_url``), read back. ``sources`` gives the
    file root, URL allowlist and timeout of ``file_id``/``file_url`` (its size limit is replaced by the
    document limit); ``session`` and ``guard`` are used for URLs (None: a private session per fetch, a
    guard from ``sources.url_allow``)."""

    def __init__(self, engine: AsyncEngine, blobs: BlobStore, *, limits: DocumentLimits | None = None,
                 sources: SourceLimits | None = None, session: aiohttp.ClientSession | None = None,
                 guard: AddressGuard | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.limits = limits or DocumentLimits()
        self.blobs = blobs
        self.store = DocumentStore(engine)
        self.sources = dataclasses.replace(sources or SourceLimits(), max_bytes=self.limits.max_bytes,
                                           allowed_types=self.limits.allowed_types)
        self.session = session
        self.guard = guard
        self.clock = clock

    async def upload(self, data: bytes, *, filename: str | None, caller: str,
                     declared_type: str | None = None) -> Document:
        """Check ``data``, store it, record it for ``caller``. ``filename`` is kept for display only;
        ``declared_type`` (what the client or server claimed) must agree with the bytes when it names a
        known type."""
        if len(data) > self.limits.max_bytes:
            raise too_large(self.limits.max_bytes, size=len(data))
        if not data:
            raise HearthError("invalid_request", "The document is empty.", param="file", details={"reason": "empty"})
        media = checked_type(data, declared=declared_type, allowed=self.limits.allowed_types)
        ref = await self.blobs.put(data, content_type=media)
        doc = Document(id="doc_" + new_id(), caller=caller, filename=display_name(filename), content_type=media,
                       size=ref.size, sha256=ref.sha256, storage=self.blobs.name, blob_key=ref.key, page_count=None,
                       created_at=self.clock.now())
        await self.store.insert(doc)
        log.info("document_stored", document_id=doc.id, caller=caller, content_type=media, size=doc.size,
                 storage=doc.storage)
        return doc

    async def from_file_id(self, file_id: str, *, caller: str) -> Document:
        """The file ``file_id`` names under the operator's ``file_root``, as a document."""
        return await self._accept(read_file_bytes(file_id, self.sources), caller=caller)

    async def from_url(self, url: str, *, caller: str) -> Document:
        """The body of ``url`` (through the SSRF guard), as a document."""
        return await self._accept(fetch_url_bytes(url, self.sources, session=self.session, guard=self.guard),
                                  caller=caller)

    async def get(self, document_id: str, caller: str | None) -> Document:
        """The document, if ``caller`` owns it (None: an operator, any document); else ``document_not_found``
        — also for another caller's document, whose existence is not revealed."""
        doc = await self.store.get(document_id) if len(document_id) <= 40 else None
        if doc is None or (caller is not None and doc.caller != caller):
            raise HearthError("document_not_found", param="document_id")
        return doc

    async def read_bytes(self, document_id: str) -> bytes:
        """The document's bytes, checked against its SHA-256 (no ownership check: call :meth:`get` first
        for a caller). Bytes that are gone or damaged are ``document_content_missing``, logged as an error:
        a row always names stored bytes, so this means the store lost them (or is another store)."""
        doc = await self.store.get(document_id)
        if doc is None:
            raise HearthError("document_not_found", param="document_id")
        return await read_stored(self.blobs, storage=doc.storage, key=doc.blob_key, row={"document_id": doc.id})

    async def _accept(self, reading: Awaitable[SourceBytes], *, caller: str) -> Document:
        try:
            source = await reading
        except HearthError as exc:
            if exc.code == "file_too_large":
                raise too_large(self.limits.max_bytes, param=exc.param) from None
            raise
        return await self.upload(source.data, filename=source.name, caller=caller, declared_type=source.content_type)


def too_large(max_bytes: int, *, size: int | None = None, param: str | None = "file") -> HearthError:
    details: dict[str, object] = {"max_bytes": max_bytes}
    if size is not None:
        details["size"] = size
    return HearthError("document_too_large", f"The document is larger than {max_bytes} bytes.", param=param,
                       details=details)


def display_name(filename: str | None) -> str | None:
    """A caller's file name as something safe to show: its last path segment, without control
    characters, at most :data:`MAX_FILENAME_CHARS` characters; None if nothing is left."""
    if not filename:
        return None
    name = _UNPRINTABLE.sub("", filename.replace("\\", "/").rsplit("/", 1)[-1]).strip()
    return name[:MAX_FILENAME_CHARS] or None
