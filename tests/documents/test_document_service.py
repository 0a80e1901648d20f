"""DocumentService on each database with each blob store: checked before anything is written, blob before
row, one blob for equal bytes, owners only, ``file_id`` and ``file_url`` through the guarded readers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.sources import SourceLimits
from hearth.documents.blobs import BlobStore
from hearth.documents.database_blobs import DatabaseBlobStore
from hearth.documents.local_blobs import LocalBlobStore
from hearth.documents.service import DocumentLimits, DocumentService, display_name
from hearth.documents.sniff import PDF, TEXT
from hearth.errors import HearthError
from hearth.store.tables import documents
from hearth.testing.fake_clock import FakeClock
from tests.documents.blob_stores import stored_objects
from tests.documents.upload_support import origin, small_pdf

MAX = 20_000


@pytest.fixture(params=["local", "database"])
async def blobs(request: pytest.FixtureRequest, engine: AsyncEngine, tmp_path: Path) -> AsyncIterator[BlobStore]:
    yield LocalBlobStore(tmp_path / "blobs") if request.param == "local" else DatabaseBlobStore(engine)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    (root / "reports").mkdir(parents=True)
    (root / "reports" / "annual.pdf").write_bytes(small_pdf())
    (root / "big.pdf").write_bytes(b"%PDF-1.4\n" + b"0" * MAX)
    (tmp_path / "secret.pdf").write_bytes(small_pdf("outside the root"))
    return root


@pytest.fixture
def service(engine: AsyncEngine, blobs: BlobStore, files: Path) -> DocumentService:
    return DocumentService(engine, blobs, limits=DocumentLimits(max_bytes=MAX),
                           sources=SourceLimits(file_root=files, url_allow=("127.0.0.1/32",)),
                           clock=FakeClock(1_800_000_000.0))


async def rows(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(documents))).scalar_one())


async def refused(call: object) -> HearthError:
    with pytest.raises(HearthError) as caught:
        await call  # type: ignore[misc]
    return caught.value


async def test_an_upload_is_stored_then_recorded_and_reads_back(service: DocumentService, engine: AsyncEngine) -> None:
    pdf = small_pdf()
    doc = await service.upload(pdf, filename="../../etc/Annual report.pdf", caller="acme")
    assert doc.id.startswith("doc_") and doc.caller == "acme" and doc.content_type == PDF
    assert (doc.size, doc.filename, doc.page_count, doc.created_at) == (len(pdf), "Annual report.pdf", None,
                                                                        1_800_000_000.0)
    assert await service.blobs.exists(doc.blob_key) and doc.storage == service.blobs.name
    assert await service.get(doc.id, "acme") == doc
    assert await service.read_bytes(doc.id) == pdf
    assert await rows(engine) == 1


async def test_the_same_bytes_uploaded_twice_are_two_documents_and_one_blob(service: DocumentService) -> None:
    first = await service.upload(b"quarterly notes\n", filename="a.txt", caller="acme")
    second = await service.upload(b"quarterly notes\n", filename="b.txt", caller="globex")
    assert first.id != second.id and first.blob_key == second.blob_key and first.sha256 == second.sha256
    assert list(await stored_objects(service.blobs)) == [first.blob_key]


async def test_a_document_above_the_size_limit_writes_neither_blob_nor_row(service: DocumentService,
                                                                          engine: AsyncEngine) -> None:
    error = await refused(service.upload(b"x" * (MAX + 1), filename="big.txt", caller="acme"))
    assert (error.code, error.status, error.details["max_bytes"]) == ("document_too_large", 413, MAX)
    assert await rows(engine) == 0 and await stored_objects(service.blobs) == {}
    assert (await service.upload(b"x" * MAX, filename="at-limit.txt", caller="acme")).size == MAX


@pytest.mark.parametrize(("data", "declared", "reason"), [
    (b"Not a PDF at all, only text.", "application/pdf", "declared_type_mismatch"),
    (b"PK\x03\x04 a zip named .pdf", None, "unrecognised"),
    (b"\x00\x01\x02 binary", "application/octet-stream", "unrecognised"),
])
async def test_a_refused_type_writes_neither_blob_nor_row(service: DocumentService, engine: AsyncEngine, data: bytes,
                                                          declared: str | None, reason: str) -> None:
    error = await refused(service.upload(data, filename="report.pdf", caller="acme", declared_type=declared))
    assert (error.code, error.status, error.details["reason"]) == ("document_type_unsupported", 415, reason)
    assert await rows(engine) == 0 and await stored_objects(service.blobs) == {}


async def test_the_file_name_never_decides_the_type(service: DocumentService) -> None:
    doc = await service.upload(small_pdf(), filename="notes.txt", caller="acme")
    assert doc.content_type == PDF
    text = await service.upload(b"plain words", filename="scan.pdf", caller="acme")
    assert text.content_type == TEXT


async def test_an_empty_document_is_a_bad_request(service: DocumentService, engine: AsyncEngine) -> None:
    error = await refused(service.upload(b"", filename="empty.pdf", caller="acme"))
    assert (error.code, error.details["reason"]) == ("invalid_request", "empty")
    assert await rows(engine) == 0


async def test_another_callers_document_is_not_found_and_an_operator_sees_every_one(service: DocumentService) -> None:
    doc = await service.upload(b"acme's notes", filename=None, caller="acme")
    error = await refused(service.get(doc.id, "globex"))
    assert (error.code, error.status) == ("document_not_found", 404)
    assert (await refused(service.get("doc_missing", "acme"))).code == "document_not_found"
    assert (await refused(service.get("doc_" + "x" * 500, "acme"))).code == "document_not_found"
    assert (await service.get(doc.id, None)).caller == "acme"


async def test_a_blob_left_without_a_row_is_reused_by_the_next_upload_of_its_bytes(service: DocumentService) -> None:
    """What a crash between storing the blob and inserting the row leaves behind is harmless garbage."""
    orphan = await service.blobs.put(b"uploaded, then the process died", content_type=TEXT)
    doc = await service.upload(b"uploaded, then the process died", filename="retry.txt", caller="acme")
    assert doc.blob_key == orphan.key and list(await stored_objects(service.blobs)) == [orphan.key]


async def test_bytes_lost_from_the_store_are_an_error_not_a_silent_empty_answer(service: DocumentService) -> None:
    doc = await service.upload(b"soon gone", filename="x.txt", caller="acme")
    await service.blobs.delete(doc.blob_key)
    error = await refused(service.read_bytes(doc.id))
    assert (error.code, error.status, error.details["reason"]) == ("document_content_missing", 500, "missing")


async def test_a_file_under_the_root_becomes_a_document_named_by_its_base_name(service: DocumentService,
                                                                               files: Path) -> None:
    doc = await service.from_file_id("reports/annual.pdf", caller="acme")
    assert (doc.content_type, doc.filename) == (PDF, "annual.pdf")
    assert await service.read_bytes(doc.id) == (files / "reports" / "annual.pdf").read_bytes()


@pytest.mark.parametrize(("file_id", "code"), [
    ("../secret.pdf", "file_path_refused"), ("/etc/passwd", "file_path_refused"), ("nope.pdf", "file_not_found"),
    ("big.pdf", "document_too_large"),
])
async def test_file_ids_keep_the_readers_guards(service: DocumentService, engine: AsyncEngine, file_id: str,
                                                code: str) -> None:
    error = await refused(service.from_file_id(file_id, caller="acme"))
    assert (error.code, error.param) == (code, "file_id")
    assert await rows(engine) == 0


async def test_a_url_is_fetched_through_the_guard_and_judged_by_its_bytes(service: DocumentService,
                                                                          engine: AsyncEngine) -> None:
    pdf = small_pdf()
    served = {"/files/10-K%202025.pdf": (pdf, "application/octet-stream"),
              "/lie.pdf": (b"an HTML error page, really", "application/pdf"),
              "/huge": (b"%PDF-" + b"0" * MAX, "application/pdf")}
    async with origin({"/files/10-K 2025.pdf": served["/files/10-K%202025.pdf"], "/lie.pdf": served["/lie.pdf"],
                       "/huge": served["/huge"]}) as base:
        doc = await service.from_url(f"{base}/files/10-K%202025.pdf", caller="acme")
        assert (doc.content_type, doc.filename, doc.size) == (PDF, "10-K 2025.pdf", len(pdf))
        lie = await refused(service.from_url(f"{base}/lie.pdf", caller="acme"))
        assert (lie.code, lie.details["reason"]) == ("document_type_unsupported", "declared_type_mismatch")
        huge = await refused(service.from_url(f"{base}/huge", caller="acme"))
        assert (huge.code, huge.param) == ("document_too_large", "file_url")
    private = DocumentService(engine, service.blobs, sources=SourceLimits())  # no allowlist: loopback is refused
    blocked = await refused(private.from_url(f"{base}/files/x.pdf", caller="acme"))
    assert (blocked.code, blocked.details["reason"]) == ("file_url_refused", "address_not_public")
    assert await rows(engine) == 1


@pytest.mark.parametrize(("given", "shown"), [
    ("report.pdf", "report.pdf"), ("C:\\Users\\me\\report.pdf", "report.pdf"), ("a/b/../c.pdf", "c.pdf"),
    ("bad\x00\r\nname.pdf", "badname.pdf"), ("", None), ("dir/", None), ("x" * 300, "x" * 255),
])
def test_file_names_are_kept_for_display_only(given: str, shown: str | None) -> None:
    assert display_name(given) == shown
