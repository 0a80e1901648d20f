"""``/api/v1/documents`` over real HTTP on a Hearth test server, on SQLite and PostgreSQL with each blob store:
multipart round trip, ``file_id`` / ``file_url`` bodies, the size cap while the body streams, type lies,
owners, and bad bodies — every refusal leaving no row and no blob behind."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from hearth.auth.signing import signed_headers
from hearth.store.db import create_engine
from hearth.store.tables import document_blob_chunks, documents
from tests.documents.upload_support import origin, small_pdf
from tests.support import ADMIN, AUTH, SIGNING_KEY, gateway_registry, signing_registry

URL = "/api/v1/documents"
OTHER = {"Authorization": "Bearer other-key-456"}
MAX = 50_000


@pytest.fixture(params=["local", "database"])
def server(request: pytest.FixtureRequest, fake: Any, hearth_server: Any, database_url: str, tmp_path: Path) -> Any:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    registry["callers"].append({"name": "other", "key": "other-key-456"})
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "annual.pdf").write_bytes(small_pdf("from the file root"))
    srv = hearth_server(registry, database_url=database_url, embedded_worker=False, document_store=request.param,
                        document_dir=tmp_path / "documents", document_max_bytes=MAX, file_root=tmp_path / "files",
                        file_url_allow=["127.0.0.1/32"])
    srv.database_url = database_url
    srv.document_dir = tmp_path / "documents"
    return srv


async def stored(server: Any) -> tuple[int, int]:
    """(document rows, blob objects) as the database and the directory hold them."""
    engine = create_engine(server.database_url)
    try:
        async with engine.connect() as conn:
            docs = (await conn.execute(select(func.count()).select_from(documents))).scalar_one()
            chunked = (await conn.execute(select(func.count(func.distinct(document_blob_chunks.c.key))))).scalar_one()
    finally:
        await engine.dispose()
    on_disk = [p for p in server.document_dir.rglob("*") if p.is_file()] if server.document_dir.exists() else []
    return int(docs), int(chunked) + len(on_disk)


async def test_a_multipart_upload_round_trips_through_the_http_app(server: Any, http: Any) -> None:
    pdf = small_pdf()
    created = await http.post(server.base_url + URL, headers=AUTH,
                              files={"file": ("Annual Report 2025.pdf", pdf, "application/pdf")})
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["success"] is True and body["error"] is None
    doc = body["data"]
    assert doc["id"].startswith("doc_") and doc["caller"] == "tester"
    assert (doc["content_type"], doc["size"], doc["sha256"], doc["filename"], doc["page_count"]) == (
        "application/pdf", len(pdf), hashlib.sha256(pdf).hexdigest(), "Annual Report 2025.pdf", None)
    assert "blob_key" not in doc and "storage" not in doc
    read = await http.get(f"{server.base_url}{URL}/{doc['id']}", headers=AUTH)
    assert read.status_code == 200 and read.json()["data"] == doc
    content = await http.get(f"{server.base_url}{URL}/{doc['id']}/content", headers=AUTH)
    assert content.status_code == 200 and content.content == pdf
    assert content.headers["content-type"] == "application/pdf"
    assert content.headers["x-content-type-options"] == "nosniff"
    assert content.headers["etag"] == f'"{doc["sha256"]}"'
    assert "filename*=UTF-8''Annual%20Report%202025.pdf" in content.headers["content-disposition"]
    again = await http.post(server.base_url + URL, headers=AUTH, files={"file": ("copy.pdf", pdf)})
    assert again.status_code == 201 and again.json()["data"]["id"] != doc["id"]
    assert await stored(server) == (2, 1)  # two documents, one blob


async def test_a_text_upload_is_served_back_as_utf8_text(server: Any, http: Any) -> None:
    text = "营业收入 1,234 百万元\n".encode()
    created = await http.post(server.base_url + URL, headers=AUTH, files={"file": ("notes.txt", text)})
    assert created.status_code == 201 and created.json()["data"]["content_type"] == "text/plain"
    content = await http.get(f"{server.base_url}{URL}/{created.json()['data']['id']}/content", headers=AUTH)
    assert content.headers["content-type"] == "text/plain; charset=utf-8" and content.content == text


async def test_text_sent_as_a_pdf_is_refused_with_415_and_nothing_stored(server: Any, http: Any) -> None:
    r = await http.post(server.base_url + URL, headers=AUTH,
                        files={"file": ("report.pdf", b"I am not a PDF", "application/pdf")})
    assert r.status_code == 415, r.text
    assert r.json()["error"]["code"] == "document_type_unsupported"
    assert r.json()["error"]["details"]["reason"] == "declared_type_mismatch"
    assert await stored(server) == (0, 0)


async def test_a_document_above_the_limit_is_413_with_no_row_and_no_blob(server: Any, http: Any) -> None:
    r = await http.post(server.base_url + URL, headers=AUTH, files={"file": ("big.txt", b"x" * (MAX + 1))})
    assert r.status_code == 413 and r.json()["error"]["code"] == "document_too_large", r.text
    assert await stored(server) == (0, 0)
    ok = await http.post(server.base_url + URL, headers=AUTH, files={"file": ("limit.txt", b"x" * MAX)})
    assert ok.status_code == 201


async def raw_exchange(port: int, head: bytes, chunks: list[bytes]) -> bytes:
    """Send a request head and some body bytes, never finish the body, and read what the server answers."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
        return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10) + await asyncio.wait_for(reader.read(2000), 10)
    finally:
        writer.close()


UPLOAD_HEAD = (b"POST /api/v1/documents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-key-123\r\n"
               b"Content-Type: multipart/form-data; boundary=b\r\n")


async def test_a_chunked_upload_is_refused_while_it_streams(server: Any) -> None:
    """No Content-Length: the body is counted as it arrives and refused once past the cap — the answer comes
    although the body never ends."""
    part = b'--b\r\nContent-Disposition: form-data; name="file"; filename="endless.txt"\r\n\r\n'
    piece = b"y" * 8192
    chunks = [b"%x\r\n%s\r\n" % (len(part), part)] + [b"%x\r\n%s\r\n" % (len(piece), piece)] * 8  # 64 KiB > 50 KB
    answer = await raw_exchange(server.port, UPLOAD_HEAD + b"Transfer-Encoding: chunked\r\n\r\n", chunks)
    assert answer.startswith(b"HTTP/1.1 413") and b'"document_too_large"' in answer, answer[:300]
    assert await stored(server) == (0, 0)


async def test_a_declared_length_above_the_limit_is_refused_before_the_body_is_read(server: Any) -> None:
    answer = await raw_exchange(server.port, UPLOAD_HEAD + b"Content-Length: %d\r\n\r\n" % (MAX * 10), [])
    assert answer.startswith(b"HTTP/1.1 413") and b'"document_too_large"' in answer, answer[:300]


async def test_another_callers_document_is_404_and_the_admin_sees_it(server: Any, http: Any) -> None:
    created = await http.post(server.base_url + URL, headers=AUTH, files={"file": ("a.txt", b"tester's")})
    doc_id = created.json()["data"]["id"]
    for path in (f"{URL}/{doc_id}", f"{URL}/{doc_id}/content"):
        r = await http.get(server.base_url + path, headers=OTHER)
        assert r.status_code == 404 and r.json()["error"]["code"] == "document_not_found"
        assert (await http.get(server.base_url + path, headers=ADMIN)).status_code == 200
    assert (await http.get(f"{server.base_url}{URL}/doc_nope", headers=AUTH)).status_code == 404


async def test_documents_need_a_caller(server: Any, http: Any) -> None:
    r = await http.post(server.base_url + URL, files={"file": ("a.txt", b"anonymous")})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    wrong_key = await http.get(f"{server.base_url}{URL}/doc_x", headers={"Authorization": "Bearer nope"})
    assert wrong_key.status_code == 401
    assert await stored(server) == (0, 0)


async def test_file_id_and_file_url_bodies_go_through_the_guarded_readers(server: Any, http: Any) -> None:
    by_id = await http.post(server.base_url + URL, headers=AUTH, json={"file_id": "annual.pdf"})
    assert by_id.status_code == 201 and by_id.json()["data"]["filename"] == "annual.pdf", by_id.text
    outside = await http.post(server.base_url + URL, headers=AUTH, json={"file_id": "../documents"})
    assert outside.status_code == 400 and outside.json()["error"]["code"] == "file_path_refused"
    pdf = small_pdf("served over HTTP")
    async with origin({"/q3.pdf": (pdf, "application/octet-stream")}) as base:
        by_url = await http.post(server.base_url + URL, headers=AUTH, json={"file_url": f"{base}/q3.pdf"})
        assert by_url.status_code == 201 and by_url.json()["data"]["content_type"] == "application/pdf", by_url.text
        content = await http.get(f"{server.base_url}{URL}/{by_url.json()['data']['id']}/content", headers=AUTH)
        assert content.content == pdf
    metadata = await http.post(server.base_url + URL, headers=AUTH, json={"file_url": "http://169.254.169.254/x"})
    assert metadata.status_code == 400 and metadata.json()["error"]["code"] == "file_url_refused"
    assert (await stored(server))[0] == 2


@pytest.mark.parametrize(("headers", "content", "reason"), [
    ({"Content-Type": "application/json"}, b'{"file_id": "a.pdf", "file_url": "http://x/"}', "one_source"),
    ({"Content-Type": "application/json"}, b"{}", "one_source"),
    ({"Content-Type": "text/plain"}, b"hello", "content_type"),
    ({"Content-Type": "multipart/form-data"}, b"--b--\r\n", "content_type"),
    ({"Content-Type": "multipart/form-data; boundary=b"}, b"--b\r\nContent-Disposition: form-data; name=\"other\""
     b"\r\n\r\nvalue\r\n--b--\r\n", "file_missing"),
    ({"Content-Type": "multipart/form-data; boundary=b"}, b"--b\r\nContent-Disposition: form-data; name=\"file\""
     b"\r\n\r\nunfinished", "truncated"),
    ({"Content-Type": "multipart/form-data; boundary=b"}, b"--b\r\nContent-Disposition: form-data; name=\"file\""
     b"\r\n\r\none\r\n--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\ntwo\r\n--b--\r\n", "duplicate_file"),
])
async def test_a_bad_body_is_a_400_naming_the_reason(server: Any, http: Any, headers: dict[str, str], content: bytes,
                                                     reason: str) -> None:
    r = await http.post(server.base_url + URL, headers={**AUTH, **headers}, content=content)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"]["details"]["reason"] == reason
    assert await stored(server) == (0, 0)


async def test_a_signed_upload_signs_the_multipart_body_as_sent(fake: Any, hearth_server: Any, http: Any,
                                                                tmp_path: Path) -> None:
    server = hearth_server(signing_registry(fake), embedded_worker=False, document_dir=tmp_path / "documents")
    body = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="signed.txt"\r\n'
            b"Content-Type: text/plain\r\n\r\nsigned content\r\n--b--\r\n")
    base = {**AUTH, "Content-Type": "multipart/form-data; boundary=b"}
    unsigned = await http.post(server.base_url + URL, headers=base, content=body)
    assert unsigned.status_code == 401 and unsigned.json()["error"]["code"] == "signature_required"
    tampered = await http.post(server.base_url + URL, content=body.replace(b"signed content", b"forged content"),
                               headers={**base, **signed_headers(SIGNING_KEY, "POST", URL, body)})
    assert tampered.status_code == 401 and tampered.json()["error"]["code"] == "signature_invalid"
    headers = {**base, **signed_headers(SIGNING_KEY, "POST", URL, body)}
    ok = await http.post(server.base_url + URL, headers=headers, content=body)
    assert ok.status_code == 201 and ok.json()["data"]["size"] == len(b"signed content"), ok.text
    replay = await http.post(server.base_url + URL, headers=headers, content=body)
    assert replay.status_code == 401 and replay.json()["error"]["code"] == "nonce_replayed"
    assert [p.name for p in (tmp_path / "documents").rglob("*") if p.is_file()] == [ok.json()["data"]["sha256"]]
