"""Capability inputs end to end: inline text, files under a root, and URLs fetched from real local
HTTP servers (127.0.0.1 and 127.0.0.2 only) through the SSRF guard.

Host names in these tests (``files.internal``, ``internal.example``) exist only in stub resolvers:
a request that reaches a server by such a name proves the fetcher connected to the vetted address
instead of resolving the name again.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hearth.capabilities.address_guard import AddressGuard
from hearth.capabilities.sources import SourceLimits, SourceText, read_input
from hearth.errors import HearthError

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
DOC = "hello from the origin\n"
LOCAL = ("127.0.0.1/32",)


@dataclass
class Origin:
    """A local HTTP server and the requests it received (path, Host header)."""

    host: str
    port: int
    hits: list[tuple[str, str]] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://{self.host}:{self.port}{path}"


def _app(origin: Origin, release: asyncio.Event) -> web.Application:
    routes = web.RouteTableDef()

    @web.middleware
    async def record(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
                     ) -> web.StreamResponse:
        origin.hits.append((request.path_qs, request.headers.get("Host", "")))
        return await handler(request)

    @routes.get("/doc.txt")
    async def doc(_: web.Request) -> web.Response:
        return web.Response(text=DOC, content_type="text/plain")

    @routes.get("/echo-host")
    async def echo_host(request: web.Request) -> web.Response:
        return web.Response(text=request.headers["Host"], content_type="text/plain")

    @routes.get("/mixed-case-type")
    async def mixed_case_type(_: web.Request) -> web.Response:
        return web.Response(body=b'{"a": 1}', headers={"Content-Type": "Application/JSON; Charset=UTF-8"})

    @routes.get("/latin1")
    async def latin1(_: web.Request) -> web.Response:
        return web.Response(body="café".encode("latin-1"), headers={"Content-Type": "text/plain; charset=iso-8859-1"})

    @routes.get("/bad-utf8")
    async def bad_utf8(_: web.Request) -> web.Response:
        return web.Response(body=b"ok \xff\xfe\xfa", headers={"Content-Type": "text/plain"})

    @routes.get("/unknown-charset")
    async def unknown_charset(_: web.Request) -> web.Response:
        return web.Response(body=b"ok", headers={"Content-Type": "text/plain; charset=x-no-such"})

    @routes.get("/image.png")
    async def image(_: web.Request) -> web.Response:
        return web.Response(body=PNG, content_type="image/png")

    @routes.get("/big-declared")
    async def big_declared(_: web.Request) -> web.Response:
        return web.Response(body=b"x" * 2000, content_type="text/plain")

    @routes.get("/big-chunked")
    async def big_chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for _ in range(30):
            await resp.write(b"y" * 100)
        await resp.write_eof()
        return resp

    @routes.get("/slow")
    async def slow(_: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="late", content_type="text/plain")

    @routes.get("/slow-body")
    async def slow_body(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b"the start ")
        await release.wait()
        return resp

    @routes.get("/error")
    async def error(_: web.Request) -> web.Response:
        return web.Response(status=500, text="boom")

    @routes.get("/redirect")
    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": request.query["to"]})

    @routes.get("/no-location")
    async def no_location(_: web.Request) -> web.Response:
        return web.Response(status=302)

    @routes.get("/hop/{n}")
    async def hop(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        location = "/doc.txt" if n == 0 else f"{n - 1}"  # relative to /hop/
        return web.Response(status=307 if n % 2 else 301, headers={"Location": location})

    app = web.Application(middlewares=[record])
    app.add_routes(routes)
    return app


Start = Callable[..., Awaitable[Origin]]


@pytest.fixture
async def start_origin() -> AsyncIterator[Start]:
    """Starts servers on demand; at teardown releases every handler still waiting, then stops them."""
    release = asyncio.Event()
    runners: list[web.AppRunner] = []

    async def start(host: str = "127.0.0.1", ssl_context: ssl.SSLContext | None = None) -> Origin:
        origin = Origin(host, 0)
        runner = web.AppRunner(_app(origin, release), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, host, 0, ssl_context=ssl_context)
        await site.start()
        origin.port = runner.addresses[-1][1]
        return origin

    yield start
    release.set()
    for runner in runners:
        await runner.cleanup()


@pytest.fixture
async def origin(start_origin: Start) -> Origin:
    return await start_origin()


def stub_guard(dns: dict[str, list[str]], allow: tuple[str, ...] = LOCAL) -> tuple[AddressGuard, list[str]]:
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        if host not in dns:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return dns[host]

    return AddressGuard(allow, resolve), asked


async def fetch(url: str, *, allow: tuple[str, ...] = LOCAL, guard: AddressGuard | None = None,
                session: aiohttp.ClientSession | None = None, **limits: Any) -> SourceText:
    return await read_input({"file_url": url}, SourceLimits(url_allow=allow, **limits), session=session, guard=guard)


async def fetch_error(url: str, **kwargs: Any) -> HearthError:
    with pytest.raises(HearthError) as caught:
        await fetch(url, **kwargs)
    assert caught.value.param == "file_url"
    return caught.value


# ---- file_url ---------------------------------------------------------------------------------------

async def test_a_text_file_from_an_allowlisted_local_server_is_read(origin: Origin) -> None:
    got = await fetch(origin.url("/doc.txt"))
    assert got == SourceText(DOC, "file_url", len(DOC), "text/plain")


async def test_the_same_url_without_the_allowlist_is_refused_before_connecting(origin: Origin) -> None:
    error = await fetch_error(origin.url("/doc.txt"), allow=())
    assert (error.code, error.details["reason"]) == ("file_url_refused", "address_not_public")
    assert origin.hits == []


async def test_the_connection_goes_to_the_vetted_address_with_the_original_host_header(origin: Origin) -> None:
    guard, asked = stub_guard({"files.internal": ["127.0.0.1"]})
    got = await fetch(f"http://files.internal:{origin.port}/echo-host", guard=guard)
    assert got.text == f"files.internal:{origin.port}"
    assert asked == ["files.internal"]  # resolved once, by the guard; the client never resolved it


async def test_a_redirect_to_an_address_outside_the_allowlist_is_refused_and_never_reached(start_origin: Start) -> None:
    first, second = await start_origin("127.0.0.1"), await start_origin("127.0.0.2")
    error = await fetch_error(first.url(f"/redirect?to={second.url('/doc.txt')}"))
    assert (error.code, error.details["reason"]) == ("file_url_refused", "address_not_public")
    assert [path for path, _ in first.hits] == [f"/redirect?to={second.url('/doc.txt')}"]
    assert second.hits == []


async def test_a_redirect_to_a_name_resolving_outside_the_allowlist_is_refused_and_never_reached(
        start_origin: Start) -> None:
    first, second = await start_origin("127.0.0.1"), await start_origin("127.0.0.2")
    guard, asked = stub_guard({"internal.example": ["127.0.0.2"]})
    error = await fetch_error(first.url(f"/redirect?to=http://internal.example:{second.port}/doc.txt"), guard=guard)
    assert (error.code, error.details["reason"]) == ("file_url_refused", "address_not_public")
    assert asked == ["internal.example"] and second.hits == []


@pytest.mark.parametrize("location", ["file:///etc/passwd", "http://[::1]/doc.txt", "gopher://127.0.0.1/"])
async def test_a_redirect_to_a_refused_url_is_refused(origin: Origin, location: str) -> None:
    error = await fetch_error(origin.url(f"/redirect?to={location}"))
    assert error.code == "file_url_refused"


async def test_redirects_are_followed_relative_to_the_current_url_up_to_the_limit(origin: Origin) -> None:
    assert (await fetch(origin.url("/hop/2"), max_redirects=3)).text == DOC  # three redirects
    assert [path for path, _ in origin.hits] == ["/hop/2", "/hop/1", "/hop/0", "/doc.txt"]


async def test_one_redirect_more_than_allowed_fails_without_following_it(origin: Origin) -> None:
    error = await fetch_error(origin.url("/hop/2"), max_redirects=2)
    assert (error.code, error.details["reason"]) == ("file_url_fetch_failed", "too_many_redirects")
    assert [path for path, _ in origin.hits] == ["/hop/2", "/hop/1", "/hop/0"]


async def test_no_redirect_is_followed_when_the_limit_is_zero(origin: Origin) -> None:
    error = await fetch_error(origin.url("/hop/0"), max_redirects=0)
    assert error.details["reason"] == "too_many_redirects"


async def test_a_redirect_without_location_fails(origin: Origin) -> None:
    error = await fetch_error(origin.url("/no-location"))
    assert (error.code, error.details["reason"]) == ("file_url_fetch_failed", "redirect_without_location")


async def test_a_declared_content_length_above_the_limit_is_too_large(origin: Origin) -> None:
    error = await fetch_error(origin.url("/big-declared"), max_bytes=1000)
    assert (error.code, error.details["reason"]) == ("file_too_large", "content_length")


async def test_a_chunked_body_is_cut_off_once_it_passes_the_limit(origin: Origin) -> None:
    error = await fetch_error(origin.url("/big-chunked"), max_bytes=1000)
    assert (error.code, error.details["reason"]) == ("file_too_large", "body")


async def test_a_body_exactly_at_the_limit_is_read(origin: Origin) -> None:
    got = await fetch(origin.url("/big-chunked"), max_bytes=3000)
    assert (got.bytes, got.text) == (3000, "y" * 3000)


async def test_a_content_type_outside_the_allowed_types_is_unsupported(origin: Origin) -> None:
    error = await fetch_error(origin.url("/image.png"))
    assert (error.code, error.details["content_type"]) == ("file_type_unsupported", "image/png")


async def test_content_types_match_without_case_or_parameters(origin: Origin) -> None:
    got = await fetch(origin.url("/mixed-case-type"), allowed_types=("application/json; charset=utf-8",))
    assert (got.text, got.content_type) == ('{"a": 1}', "application/json")
    assert (await fetch_error(origin.url("/doc.txt"), allowed_types=("application/json",))).code == (
        "file_type_unsupported")


async def test_the_body_is_decoded_by_its_declared_charset(origin: Origin) -> None:
    assert (await fetch(origin.url("/latin1"))).text == "café"


@pytest.mark.parametrize("path", ["/bad-utf8", "/unknown-charset"])
async def test_a_body_that_does_not_decode_is_unsupported(origin: Origin, path: str) -> None:
    error = await fetch_error(origin.url(path))
    assert (error.code, error.details["reason"]) == ("file_type_unsupported", "encoding")


async def test_a_server_that_does_not_answer_in_time_is_a_timeout(origin: Origin) -> None:
    started = time.monotonic()
    error = await fetch_error(origin.url("/slow"), timeout_s=0.3)
    assert error.code == "file_url_timeout"
    assert time.monotonic() - started < 1.5


async def test_a_body_that_stalls_is_a_timeout_too(origin: Origin) -> None:
    assert (await fetch_error(origin.url("/slow-body"), timeout_s=0.3)).code == "file_url_timeout"


async def test_the_time_limit_covers_resolving_the_host_name_too() -> None:
    async def hanging_resolver(host: str, port: int) -> list[str]:
        await asyncio.sleep(0.5)  # past the 0.3 s limit: the call must have given up by then
        return ["127.0.0.1"]

    guard = AddressGuard(LOCAL, hanging_resolver)
    assert (await fetch_error("http://files.internal/doc.txt", guard=guard, timeout_s=0.3)).code == "file_url_timeout"


@pytest.mark.parametrize(("path", "status"), [("/missing", 404), ("/error", 500)])
async def test_an_error_status_is_a_fetch_failure_with_the_status(origin: Origin, path: str, status: int) -> None:
    error = await fetch_error(origin.url(path))
    assert (error.code, error.details["status"]) == ("file_url_fetch_failed", status)


async def test_a_refused_connection_is_a_fetch_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket is closed
    error = await fetch_error(f"http://127.0.0.1:{port}/doc.txt")
    assert (error.code, error.details["reason"]) == ("file_url_fetch_failed", "connection")


async def test_a_callers_session_is_used_and_left_open(origin: Origin) -> None:
    async with aiohttp.ClientSession() as session:
        assert (await fetch(origin.url("/doc.txt"), session=session)).text == DOC
        assert not session.closed


def _certificate(tmp_path: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def test_https_is_pinned_to_the_vetted_address_with_the_host_name_for_sni_and_the_certificate(
        start_origin: Start, tmp_path: Path) -> None:
    cert, key = _certificate(tmp_path, "files.internal")
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    server_names: list[str | None] = []
    server_ctx.sni_callback = lambda _sock, name, _ctx: server_names.append(name)
    origin = await start_origin(ssl_context=server_ctx)
    guard, _ = stub_guard({"files.internal": ["127.0.0.1"]})
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl.create_default_context(cafile=cert))) as s:
        got = await fetch(f"https://files.internal:{origin.port}/echo-host", guard=guard, session=s)
        assert got.text == f"files.internal:{origin.port}"
        assert server_names == ["files.internal"]
        # The certificate names files.internal only: checked against the address it would fail.
        error = await fetch_error(f"https://127.0.0.1:{origin.port}/echo-host", session=s)
        assert (error.code, error.details["reason"]) == ("file_url_fetch_failed", "connection")


# ---- file_id ----------------------------------------------------------------------------------------

@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    (root / "sub" / "dir").mkdir(parents=True)
    (root / "notes.txt").write_text("plain notes\n", encoding="utf-8")
    (root / "sub" / "dir" / "data.csv").write_text("a,b\n1,2\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("outside the root", encoding="utf-8")
    return root


async def read_file(file_id: str, root: Path | None, **limits: Any) -> SourceText:
    return await read_input({"file_id": file_id}, SourceLimits(file_root=root, **limits))


async def file_error(file_id: str, root: Path | None, **limits: Any) -> HearthError:
    with pytest.raises(HearthError) as caught:
        await read_file(file_id, root, **limits)
    assert caught.value.param == "file_id"
    return caught.value


async def test_a_file_inside_the_root_is_read_with_the_type_of_its_extension(root: Path) -> None:
    assert await read_file("notes.txt", root) == SourceText("plain notes\n", "file_id", 12, "text/plain")
    got = await read_file("sub/dir/data.csv", root)
    assert (got.text, got.content_type) == ("a,b\n1,2\n", "text/csv")


async def test_utf8_with_a_bom_and_gb18030_are_read_as_text(root: Path) -> None:
    (root / "bom.md").write_bytes(b"\xef\xbb\xbf# title")
    (root / "chinese.txt").write_bytes("中文摘要".encode("gb18030"))
    assert (await read_file("bom.md", root)).text == "# title"
    assert (await read_file("chinese.txt", root)).text == "中文摘要"


async def test_a_symlink_that_stays_inside_the_root_is_followed(root: Path) -> None:
    (root / "alias.txt").symlink_to(root / "notes.txt")
    assert (await read_file("alias.txt", root)).text == "plain notes\n"


@pytest.mark.parametrize("file_id", ["../secret.txt", "/etc/passwd", "a/../../secret.txt", "sub/../notes.txt",
                                     "sub\\..\\..\\secret.txt", "notes.txt\x00.png", "link.txt", "linkdir/secret.txt"])
async def test_a_file_id_that_could_leave_the_root_is_refused(root: Path, file_id: str) -> None:
    (root / "link.txt").symlink_to(root.parent / "secret.txt")
    (root / "linkdir").symlink_to(root.parent)
    assert (await file_error(file_id, root)).code == "file_path_refused"


async def test_an_absolute_path_to_a_file_inside_the_root_is_refused_too(root: Path) -> None:
    assert (await file_error(str(root / "notes.txt"), root)).code == "file_path_refused"


async def test_file_ids_are_refused_when_no_root_is_configured() -> None:
    assert (await file_error("notes.txt", None)).details["reason"] == "disabled"


@pytest.mark.parametrize("file_id", ["missing.txt", "sub", "pipe.txt", "dangling.txt"])
async def test_a_file_id_that_names_no_regular_file_is_not_found(root: Path, file_id: str) -> None:
    os.mkfifo(root / "pipe.txt")  # opening a FIFO would block: it must not be opened at all
    (root / "dangling.txt").symlink_to(root / "gone.txt")
    assert (await file_error(file_id, root)).code == "file_not_found"


async def test_a_file_above_the_size_limit_is_too_large_and_one_at_it_is_read(root: Path) -> None:
    (root / "ten.txt").write_bytes(b"0123456789")
    (root / "eleven.txt").write_bytes(b"0123456789A")
    assert (await read_file("ten.txt", root, max_bytes=10)).bytes == 10
    assert (await file_error("eleven.txt", root, max_bytes=10)).code == "file_too_large"


@pytest.mark.parametrize(("name", "content", "reason"), [
    ("image.txt", PNG, "binary"), ("nul.md", b"text\x00more", "binary"), ("garbage.txt", b"\xff\xff\xff", "encoding"),
    ("image.png", b"looks like text", "extension"), ("noext", b"text", "extension"),
])
async def test_a_file_that_is_not_text_of_a_known_type_is_unsupported(root: Path, name: str, content: bytes,
                                                                        reason: str) -> None:
    (root / name).write_bytes(content)
    error = await file_error(name, root)
    assert (error.code, error.details["reason"]) == ("file_type_unsupported", reason)


async def test_a_file_type_the_operator_did_not_allow_is_unsupported(root: Path) -> None:
    (root / "data.json").write_text("{}", encoding="utf-8")
    assert (await file_error("data.json", root, allowed_types=("text/plain",))).code == "file_type_unsupported"


# ---- priority, missing input, types -----------------------------------------------------------------

async def test_inline_text_wins_over_everything_else(root: Path) -> None:
    payload = {"text": "inline", "ocr_text": "scanned", "file_id": "notes.txt", "file_url": "http://127.0.0.1:1/"}
    got = await read_input(payload, SourceLimits(file_root=root))
    assert got == SourceText("inline", "text", 6, None)


async def test_ocr_text_comes_before_file_id_which_comes_before_file_url(root: Path) -> None:
    limits = SourceLimits(file_root=root)
    assert (await read_input({"ocr_text": "scanned", "file_id": "notes.txt"}, limits)).source == "ocr_text"
    got = await read_input({"file_id": "notes.txt", "file_url": "http://127.0.0.1:1/"}, limits)
    assert (got.source, got.text) == ("file_id", "plain notes\n")


async def test_blank_and_null_fields_count_as_absent(root: Path) -> None:
    got = await read_input({"text": "  \n", "ocr_text": None, "file_id": "notes.txt"}, SourceLimits(file_root=root))
    assert got.source == "file_id"


@pytest.mark.parametrize("payload", [{}, {"text": ""}, {"text": None, "file_id": "", "file_url": " "},
                                     {"prompt": "not an input field"}])
async def test_no_usable_input_is_input_missing(payload: dict[str, Any]) -> None:
    with pytest.raises(HearthError) as caught:
        await read_input(payload, SourceLimits())
    assert caught.value.code == "input_missing"


@pytest.mark.parametrize(("payload", "param"), [
    ({"text": 5}, "text"), ({"ocr_text": b"bytes"}, "ocr_text"), ({"file_id": {"a": 1}}, "file_id"),
    ({"file_url": True}, "file_url"), ({"text": "fine", "file_url": ["http://x/"]}, "file_url"),
])
async def test_a_field_of_the_wrong_type_is_an_invalid_request_naming_it(payload: dict[str, Any], param: str) -> None:
    with pytest.raises(HearthError) as caught:
        await read_input(payload, SourceLimits())
    assert (caught.value.code, caught.value.param) == ("invalid_request", param)


async def test_inline_text_above_the_size_limit_in_utf8_is_an_invalid_request() -> None:
    limits = SourceLimits(max_bytes=4)
    assert (await read_input({"text": "abcd"}, limits)).bytes == 4
    with pytest.raises(HearthError) as caught:
        await read_input({"ocr_text": "abcé"}, limits)  # 4 characters, 5 bytes
    assert (caught.value.code, caught.value.param) == ("invalid_request", "ocr_text")
    assert caught.value.details == {"reason": "text_too_large", "bytes": 5, "max_bytes": 4}


async def test_inline_text_that_is_not_valid_unicode_is_an_invalid_request() -> None:
    with pytest.raises(HearthError) as caught:
        await read_input({"text": "broken \ud800"}, SourceLimits())
    assert caught.value.code == "invalid_request"


@pytest.mark.parametrize("limits", [{"max_bytes": 0}, {"timeout_s": 0}, {"max_redirects": -1}])
def test_limits_that_allow_nothing_are_a_configuration_error(limits: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="positive"):
        SourceLimits(**limits)
