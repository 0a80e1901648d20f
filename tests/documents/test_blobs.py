"""The blob store contract on every driver (a directory, chunks in SQLite, chunks in PostgreSQL): content
addressed keys, one object for equal bytes, all or nothing, bytes checked on the way out, and keys that
can never name anything outside the store."""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from hearth.documents import local_blobs
from hearth.documents.blobs import BlobCorrupted, BlobNotFound, BlobStore, blob_key, key_digest
from hearth.documents.database_blobs import DatabaseBlobStore
from hearth.documents.local_blobs import TEMP_PREFIX, LocalBlobStore
from hearth.store.tables import document_blob_chunks
from tests.documents.blob_stores import DRIVERS, open_store, stored_objects

DATA = bytes(range(256)) * 14  # 3,584 bytes: four chunks of the database driver's 1,000 in these tests


@pytest.fixture(params=DRIVERS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[BlobStore]:
    async with open_store(request, request.param, tmp_path) as opened:
        yield opened


async def test_put_returns_the_content_addressed_reference_and_get_returns_the_bytes(store: BlobStore) -> None:
    ref = await store.put(DATA, content_type="application/octet-stream")
    digest = hashlib.sha256(DATA).hexdigest()
    assert (ref.key, ref.sha256, ref.size) == (f"sha256/{digest[:2]}/{digest[2:4]}/{digest}", digest, len(DATA))
    assert ref.content_type == "application/octet-stream"
    assert await store.exists(ref.key)
    assert await store.get(ref.key) == DATA
    assert await stored_objects(store) == ({ref.key: 1} if isinstance(store, LocalBlobStore) else {ref.key: 4})


async def test_the_same_bytes_stored_twice_are_one_object(store: BlobStore) -> None:
    first = await store.put(DATA, content_type="text/plain")
    second = await store.put(DATA, content_type="application/pdf")
    other = await store.put(b"other bytes", content_type="text/plain")
    assert first.key == second.key != other.key
    assert sorted(await stored_objects(store)) == sorted({first.key, other.key})


async def test_parallel_puts_of_the_same_bytes_all_succeed_as_one_object(store: BlobStore) -> None:
    refs = await asyncio.gather(*(store.put(DATA, content_type="text/plain") for _ in range(6)))
    assert {r.key for r in refs} == {refs[0].key}
    assert list(await stored_objects(store)) == [refs[0].key]
    assert await store.get(refs[0].key) == DATA


@pytest.mark.parametrize("size", [0, 1, 999, 1000, 1001, 2000])
async def test_objects_of_every_size_around_a_chunk_boundary_round_trip(store: BlobStore, size: int) -> None:
    data = os.urandom(size)
    ref = await store.put(data, content_type="application/octet-stream")
    assert await store.get(ref.key) == data and ref.size == size


async def test_a_key_never_stored_or_deleted_is_not_found(store: BlobStore) -> None:
    ref = await store.put(DATA, content_type="text/plain")
    missing = blob_key(hashlib.sha256(b"never stored").hexdigest())
    assert not await store.exists(missing)
    with pytest.raises(BlobNotFound):
        await store.get(missing)
    await store.delete(ref.key)
    await store.delete(ref.key)  # deleting what is gone is no error
    assert not await store.exists(ref.key)
    with pytest.raises(BlobNotFound):
        await store.get(ref.key)
    assert await stored_objects(store) == {}


@pytest.mark.parametrize("key", [
    "../../etc/passwd", "/etc/passwd", "sha256/../../../etc/passwd", "sha256/ab/cd/" + "0" * 64,
    "sha256/AB/CD/" + "AB" + "0" * 62, "sha256/ab/cd/ab" + "0" * 61, "sha256/ab/cd/ab" + "0" * 62 + "/x",
    "sha256/ab/cd/ab" + "0" * 62 + "\x00", "", "sha256//" + "0" * 64,
])
async def test_a_malformed_key_is_refused_before_anything_is_touched(store: BlobStore, key: str) -> None:
    for call in (store.get(key), store.exists(key), store.delete(key)):
        with pytest.raises(ValueError):
            await call


def test_a_key_is_its_digest_under_two_levels_of_fan_out() -> None:
    digest = hashlib.sha256(b"x").hexdigest()
    assert key_digest(blob_key(digest)) == digest
    with pytest.raises(ValueError):
        blob_key(digest.upper())


async def test_damaged_bytes_are_never_handed_out(store: BlobStore) -> None:
    ref = await store.put(DATA, content_type="text/plain")
    if isinstance(store, LocalBlobStore):
        store.path_of(ref.key).write_bytes(DATA[::-1])
    else:
        assert isinstance(store, DatabaseBlobStore)
        async with store.engine.begin() as conn:
            t = document_blob_chunks
            await conn.execute(update(t).where(t.c.key == ref.key, t.c.seq == 2).values(data=b"x" * 1000))
    with pytest.raises(BlobCorrupted):
        await store.get(ref.key)


# ---- the local driver ---------------------------------------------------------------------------------

async def test_a_damaged_local_file_is_replaced_by_the_next_put_of_its_bytes(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path)
    ref = await store.put(DATA, content_type="text/plain")
    store.path_of(ref.key).write_bytes(DATA[::-1])
    await store.put(DATA, content_type="text/plain")
    assert await store.get(ref.key) == DATA


async def test_a_local_put_leaves_no_temporary_file(tmp_path: Path) -> None:
    store = LocalBlobStore(tmp_path / "blobs")
    ref = await store.put(DATA, content_type="text/plain")
    files = [p for p in store.root.rglob("*") if p.is_file()]
    assert files == [store.root / ref.key]


async def test_a_failed_rename_leaves_no_object_and_no_temporary_file(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    store = LocalBlobStore(tmp_path / "blobs")

    def refuse(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(local_blobs.os, "replace", refuse)
    with pytest.raises(OSError):
        await store.put(DATA, content_type="text/plain")
    monkeypatch.undo()
    key = blob_key(hashlib.sha256(DATA).hexdigest())
    assert not await store.exists(key)
    assert [p for p in store.root.rglob("*") if p.is_file()] == []


CRASH_BEFORE_RENAME = textwrap.dedent("""
    import asyncio, os, sys
    from pathlib import Path
    from hearth.documents.local_blobs import LocalBlobStore

    os.replace = lambda src, dst: os._exit(9)  # the process dies between the temporary write and the rename
    asyncio.run(LocalBlobStore(Path(sys.argv[1])).put(sys.argv[2].encode(), content_type="text/plain"))
""")


async def test_a_writer_killed_between_write_and_rename_leaves_no_visible_object(tmp_path: Path) -> None:
    root = tmp_path / "blobs"
    data = b"the whole report, written but never published"
    child = await asyncio.create_subprocess_exec(sys.executable, "-c", CRASH_BEFORE_RENAME, str(root), data.decode(),
                                                 stderr=asyncio.subprocess.PIPE)
    _, stderr = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 9, stderr
    store = LocalBlobStore(root)
    key = blob_key(hashlib.sha256(data).hexdigest())
    leftovers = [p for p in root.rglob("*") if p.is_file()]
    assert len(leftovers) == 1 and leftovers[0].name.startswith(TEMP_PREFIX)
    assert leftovers[0].read_bytes() == data  # written in full: only the rename makes an object visible
    assert not await store.exists(key)
    with pytest.raises(BlobNotFound):
        await store.get(key)
    assert store.sweep_temporary(older_than_s=3600) == 0  # a young temporary file may still be a live writer's
    assert store.sweep_temporary(older_than_s=0) == 1
    assert [p for p in root.rglob("*") if p.is_file()] == []
    await store.put(data, content_type="text/plain")
    assert await store.get(key) == data


async def test_a_key_resolving_outside_the_root_through_a_symlink_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "blobs", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "sha256").symlink_to(outside, target_is_directory=True)
    store = LocalBlobStore(root)
    with pytest.raises(ValueError):
        await store.put(DATA, content_type="text/plain")
    assert list(outside.rglob("*")) == []


# ---- the database driver ------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["database-sqlite", "database-postgres"])
async def test_a_database_put_that_fails_midway_writes_no_chunk(request: pytest.FixtureRequest, tmp_path: Path,
                                                                kind: str) -> None:
    """One transaction: a stray chunk 2 (no chunk 0: no object) makes the insert of chunk 2 collide after
    chunks 0 and 1 were inserted; the whole put rolls back, leaving only the stray row."""
    async with open_store(request, kind, tmp_path) as store:
        assert isinstance(store, DatabaseBlobStore)
        key = blob_key(hashlib.sha256(DATA).hexdigest())
        async with store.engine.begin() as conn:
            await conn.execute(document_blob_chunks.insert().values(key=key, seq=2, data=b"stray"))
        with pytest.raises(IntegrityError):
            await store.put(DATA, content_type="text/plain")
        assert not await store.exists(key)
        assert await stored_objects(store) == {key: 1}
