"""Reading the bytes a row names back from the blob store, with one answer for every way they can be gone.

A row (a document, an OpenAI file) is written only after its bytes were stored, so bytes that cannot be read are
the store's loss — or another store's row (every process of a deployment must use the same store): both are a
500 ``document_content_missing`` with ``details.reason`` (``other_store``, ``missing``, ``corrupted``), logged as
an error naming the row.
"""

from __future__ import annotations

from hearth.documents.blobs import BlobCorrupted, BlobNotFound, BlobStore
from hearth.errors import HearthError
from hearth.observability.logging import get_logger

log = get_logger("hearth.documents")


async def read_stored(blobs: BlobStore, *, storage: str, key: str, row: dict[str, str]) -> bytes:
    """The bytes under ``key`` in ``blobs``, checked against their SHA-256; ``storage`` is the store the row says
    holds them, ``row`` names the row in the logs (e.g. ``{"document_id": ...}``)."""
    if storage != blobs.name:
        log.error("document_store_mismatch", stored_in=storage, this_store=blobs.name, **row)
        raise HearthError("document_content_missing", details={"reason": "other_store"})
    try:
        return await blobs.get(key)
    except (BlobNotFound, BlobCorrupted) as exc:
        reason = "missing" if isinstance(exc, BlobNotFound) else "corrupted"
        log.error("document_content_missing", key=key, reason=reason, **row)
        raise HearthError("document_content_missing", details={"reason": reason}) from None
