"""The blob store: where a document's bytes live, behind one small interface.

Objects are **content addressed**: the key is derived from the bytes' SHA-256 (``sha256/ab/cd/<hex>``),
so the same bytes stored twice are one object, a key never names anything a caller chose, and a
reader can check that what it got is what was stored. A ``put`` is all or nothing: an object is
either absent or complete, whatever crashes when (each driver says how it guarantees that).

Drivers: :class:`hearth.documents.local_blobs.LocalBlobStore` (a directory; one host, or a shared file
system) and :class:`hearth.documents.database_blobs.DatabaseBlobStore` (chunks in the main database; any
number of hosts, no extra service). An S3 driver would implement the same :class:`BlobStore` with
the same keys. :func:`hearth.documents.blob_factory.create_blob_store` picks one from the settings.

Deleting is for garbage collection only: equal bytes share one object, so an object may be deleted
only when no document row names its key.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Protocol

KEY_PREFIX = "sha256/"
_KEY = re.compile(r"sha256/([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f]{64})")


@dataclass(frozen=True, slots=True)
class BlobRef:
    """A stored object: its key, the SHA-256 (lowercase hex) and size of its bytes, and the content type
    they were stored as (the store keeps bytes only; the type travels with the document row)."""

    key: str
    sha256: str
    size: int
    content_type: str


class BlobNotFound(LookupError):
    """No object has this key (never stored, or deleted)."""


class BlobCorrupted(RuntimeError):
    """The object's bytes no longer hash to its key (a damaged file or row); never handed out."""


class BlobStore(Protocol):
    """What every driver does. Keys are those of :func:`blob_key`; a malformed key is a :class:`ValueError`."""

    name: str  # "local" | "database" | ...: recorded with each document, so its bytes can be found again

    async def put(self, data: bytes, *, content_type: str) -> BlobRef:
        """Store ``data`` (or find it already stored) and return its reference; all or nothing."""
        ...

    async def get(self, key: str) -> bytes:
        """The object's bytes, checked against the key; :class:`BlobNotFound`, :class:`BlobCorrupted`."""
        ...

    async def exists(self, key: str) -> bool:
        """Whether a complete object has this key."""
        ...

    async def delete(self, key: str) -> None:
        """Remove the object if present (see the module docstring: only when nothing names it)."""
        ...


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_key(sha256: str) -> str:
    """The key of the object whose bytes have this SHA-256: ``sha256/ab/cd/<64 hex>`` (two levels of
    fan-out keep directories small for the local driver and cost nothing elsewhere)."""
    if not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ValueError("not a lowercase hex SHA-256")
    return f"{KEY_PREFIX}{sha256[:2]}/{sha256[2:4]}/{sha256}"


def key_digest(key: str) -> str:
    """The SHA-256 a well-formed key names, or :class:`ValueError` (anything else: a path, ``..``,
    upper case, a prefix that does not match the digest)."""
    match = _KEY.fullmatch(key) if isinstance(key, str) else None
    if match is None or match[3][:2] != match[1] or match[3][2:4] != match[2]:
        raise ValueError("not a blob key")
    return match[3]
