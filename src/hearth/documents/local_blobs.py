"""The ``local`` blob store: one file per object under a root directory, published atomically.

A ``put`` writes the bytes to a temporary file in the object's own directory (``.tmp-*``, a name no key
can have), flushes it to disk, renames it onto the key's path with :func:`os.replace` (atomic on POSIX
within one file system) and flushes the directory. A reader therefore sees no file or the whole file;
a crash before the rename leaves only a temporary file, invisible to ``get``/``exists`` and removed by
:meth:`LocalBlobStore.sweep_temporary` once it is older than any write can take.

Paths come only from keys (:func:`hearth.documents.blobs.key_digest`: hex digits and fixed slashes), and
every path is checked to resolve inside the root, so nothing outside it is ever read, written or
removed. For several hosts the root must be a shared file system with atomic rename (NFSv4 is; an
object store mounted as a file system usually is not) — or use the ``database`` store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from pathlib import Path

from hearth.documents.blobs import BlobCorrupted, BlobNotFound, BlobRef, blob_key, key_digest, sha256_hex

TEMP_PREFIX = ".tmp-"


class LocalBlobStore:
    """Objects as files under ``root`` (created on first write)."""

    name = "local"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path_of(self, key: str) -> Path:
        """The file of ``key``; :class:`ValueError` for a malformed key or one resolving outside the root."""
        key_digest(key)
        root = Path(os.path.realpath(self.root))
        path = Path(os.path.realpath(root / key))
        if not path.is_relative_to(root) or path == root:
            raise ValueError("blob key resolves outside the store's root")
        return path

    async def put(self, data: bytes, *, content_type: str) -> BlobRef:
        digest = sha256_hex(data)
        key = blob_key(digest)
        await asyncio.to_thread(self._publish, self.path_of(key), data)
        return BlobRef(key, digest, len(data), content_type)

    async def get(self, key: str) -> bytes:
        path = self.path_of(key)
        try:
            data = await asyncio.to_thread(path.read_bytes)
        except (FileNotFoundError, NotADirectoryError):
            raise BlobNotFound(key) from None
        if sha256_hex(data) != key_digest(key):
            raise BlobCorrupted(key)
        return data

    async def exists(self, key: str) -> bool:
        return await asyncio.to_thread(self.path_of(key).is_file)

    async def delete(self, key: str) -> None:
        path = self.path_of(key)
        await asyncio.to_thread(path.unlink, missing_ok=True)

    def sweep_temporary(self, older_than_s: float = 3600.0) -> int:
        """Blocking. Remove temporary files left by writers that died before publishing, if older than
        ``older_than_s`` (a live writer's file is younger). Returns how many were removed."""
        removed = 0
        cutoff = time.time() - older_than_s
        if not self.root.is_dir():
            return 0
        for path in self.root.glob(f"sha256/*/*/{TEMP_PREFIX}*"):
            with contextlib.suppress(FileNotFoundError):
                if path.is_file() and not path.is_symlink() and path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed += 1
        return removed

    def _publish(self, path: Path, data: bytes) -> None:
        """Blocking. An object already there with these very bytes is kept as it is (the dedup case);
        anything else at the path (a damaged file) is replaced by a complete one."""
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            if path.stat().st_size == len(data) and path.read_bytes() == data:
                return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
            raise
        _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (the directory entry), where the platform allows it."""
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
