"""The model-call hop's HTTP/1.1 client, against real servers speaking raw bytes on loopback."""

from __future__ import annotations

import asyncio
import gzip
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from hearth.providers.http1_client import HIGH_WATER, ConnectFailed, ConnectionClosed, Http1Pool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class RawServer:
    """A loopback server whose answers are bytes written by the test; it counts connections and keeps requests."""

    def __init__(self) -> None:
        self.connections = 0
        self.requests: list[bytes] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self, answer: Handler, ssl_context: ssl.SSLContext | None = None) -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            try:
                await answer(reader, writer)
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                writer.close()

        self._server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ssl_context)
        self.port = self._server.sockets[0].getsockname()[1]

    async def read_request(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request

    def url(self, path: str = "/v1/chat/completions", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()


@pytest.fixture
async def raw() -> AsyncIterator[RawServer]:
    server = RawServer()
    yield server
    await server.close()


@pytest.fixture
async def pool() -> AsyncIterator[Http1Pool]:
    p = Http1Pool()
    yield p
    await p.aclose()


def _ok(body: bytes, *extra: bytes) -> bytes:
    head = b"".join(e + b"\r\n" for e in extra)
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), head, body)


async def _keep_answering(server: RawServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        request = await server.read_request(reader)
        writer.write(_ok(b'{"n": %d}' % len(server.requests), b"X-Echo-Length: %d" % len(request)))
        await writer.drain()


async def test_a_post_is_answered_and_its_connection_reused(raw, pool):
    await raw.start(lambda r, w: _keep_answering(raw, r, w))
    bodies = []
    for _ in range(3):
        resp = await pool.post(raw.url(), b'{"a": 1}', {"Authorization": "Bearer k"}, connect_timeout_s=2)
        await resp.wait_headers()
        assert resp.status == 200 and resp.headers["x-echo-length"]  # headers are case-insensitive
        bodies.append(await resp.read())
    assert bodies == [b'{"n": 1}', b'{"n": 2}', b'{"n": 3}']
    assert raw.connections == 1
    head, _, body = raw.requests[0].partition(b"\r\n\r\n")
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n" % raw.port)
    assert b"Authorization: Bearer k" in head and b"Content-Length: 8" in head and body == b'{"a": 1}'


async def test_an_idle_connection_older_than_the_keepalive_is_not_reused(raw):
    await raw.start(lambda r, w: _keep_answering(raw, r, w))
    pool = Http1Pool(keepalive_s=0)
    try:
        for _ in range(2):
            resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)
            await resp.read()
    finally:
        await pool.aclose()
    assert raw.connections == 2


async def test_a_connection_the_server_closed_is_not_reused(raw, pool):
    async def one_answer_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(_ok(b"{}"))
        await writer.drain()

    await raw.start(one_answer_then_close)
    for _ in range(2):
        resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)
        assert await resp.read() == b"{}"
        for _ in range(100):  # until the close reached the client (a loop turn or two, no timer)
            if not pool._idle.get((False, "127.0.0.1", raw.port)):
                break
            await asyncio.sleep(0)
    assert raw.connections == 2


async def test_chunked_and_read_until_close_bodies(raw, pool):
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        await raw.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        await writer.drain()

    await raw.start(answer)
    resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)
    assert await resp.read() == b"hello world"
    resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)  # the same connection, kept alive
    assert await resp.read() == b"until the end"
    assert raw.connections == 1


async def test_a_gzip_body_is_decoded_and_the_request_says_it_accepts_it(raw, pool):
    packed = gzip.compress(b'{"choices": []}')

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(_ok(packed, b"Content-Encoding: gzip"))
        await writer.drain()

    await raw.start(answer)
    resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)
    assert await resp.read() == b'{"choices": []}'
    assert b"Accept-Encoding: gzip, deflate" in raw.requests[0]


async def test_a_streamed_body_arrives_piece_by_piece(raw, pool):
    go_on = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
        await writer.drain()
        await go_on.wait()
        writer.write(b"7\r\nsecond\n\r\n0\r\n\r\n")
        await writer.drain()

    await raw.start(answer)
    resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)
    await resp.wait_headers()
    assert await resp.readany() == b"first\n"
    assert resp.read_nowait() == b"" and not resp.at_eof()
    go_on.set()
    assert await resp.readany() == b"second\n"
    assert await resp.readany() == b"" and resp.at_eof()


async def test_a_body_larger_than_the_high_water_mark_pauses_reading_and_arrives_whole(raw, pool):
    big = bytes(range(256)) * (3 * HIGH_WATER // 256)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(_ok(big))
        await writer.drain()

    await raw.start(answer)
    resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)
    await resp.wait_headers()
    got = bytearray()
    while chunk := await resp.readany():
        got += chunk
    assert got == big


async def test_a_connection_cut_mid_body_is_an_error_not_a_short_answer(raw, pool):
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
        await writer.drain()

    await raw.start(answer)
    resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)
    with pytest.raises(ConnectionClosed):
        await resp.read()


async def test_an_answer_that_is_not_http_is_an_error(raw, pool):
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(5)  # keeps the connection open: the client must not wait for its end

    await raw.start(answer)
    resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)
    with pytest.raises(ConnectionClosed, match=r"not an HTTP/1\.1 answer"):
        await resp.wait_headers()


async def test_a_caller_timer_fails_a_pending_read(raw, pool):
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await raw.read_request(reader)
        await asyncio.sleep(5)  # never answers in the test's time

    await raw.start(answer)
    resp = await pool.post(raw.url(), b"{}", {}, connect_timeout_s=2)
    asyncio.get_running_loop().call_soon(resp.fail, TimeoutError())
    with pytest.raises(TimeoutError):
        await resp.wait_headers()
    resp.close()


async def test_a_refused_connection_is_connect_failed_and_not_a_timeout(pool):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectFailed) as failed:
        await pool.post(f"http://127.0.0.1:{port}/v1", b"{}", {}, connect_timeout_s=2)
    assert failed.value.timeout is False


async def test_a_host_that_never_accepts_is_a_connect_timeout(never_accepting, pool):
    with pytest.raises(ConnectFailed) as failed:
        await pool.post(f"http://127.0.0.1:{never_accepting}/v1", b"{}", {}, connect_timeout_s=0.2)
    assert failed.value.timeout is True


async def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(raw, pool):
    await raw.start(lambda r, w: _keep_answering(raw, r, w))
    with pytest.raises(ValueError, match="line break"):
        await pool.post(raw.url(), b"{}", {"X-Evil": "a\r\nInjected: yes"}, connect_timeout_s=2)
    assert raw.requests == []


async def test_a_forwarded_user_agent_replaces_hearths_own(raw, pool):
    await raw.start(lambda r, w: _keep_answering(raw, r, w))
    for headers in ({}, {"user-agent": "billing-service/2.1"}):
        resp = await pool.post(raw.url(), b"{}", headers, connect_timeout_s=2)
        await resp.read()
    first, second = (r.lower() for r in raw.requests)
    assert first.count(b"user-agent:") == 1 and b"user-agent: hearth" in first
    assert second.count(b"user-agent:") == 1 and b"user-agent: billing-service/2.1" in second


def test_a_url_that_is_not_http_is_refused():
    pool = Http1Pool()
    with pytest.raises(ValueError, match="not an http"):
        asyncio.run(pool.post("ftp://127.0.0.1/x", b"", {}, connect_timeout_s=1))


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (made by openssl here; nothing downloaded)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    return cert, key


async def test_https_checks_the_certificate(raw, tls_files):
    cert, key = tls_files
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    await raw.start(lambda r, w: _keep_answering(raw, r, w), ssl_context=server_ctx)

    untrusting = Http1Pool()  # the default CA store does not know the self-signed certificate
    with pytest.raises(ConnectFailed):
        await untrusting.post(raw.url(scheme="https"), b"{}", {}, connect_timeout_s=5)
    await untrusting.aclose()

    trusting = Http1Pool(ssl_context=ssl.create_default_context(cafile=str(cert)))
    try:
        resp = await trusting.post(raw.url(scheme="https"), b"{}", {}, connect_timeout_s=5)
        assert await resp.read() == b'{"n": 1}'
    finally:
        await trusting.aclose()


def test_on_uvloop_as_hearth_serve_runs_it():
    """``hearth serve`` runs on uvloop, whose transports are not asyncio's classes."""
    async def scenario() -> list[bytes]:
        server = RawServer()
        await server.start(lambda r, w: _keep_answering(server, r, w))
        pool = Http1Pool()
        try:
            bodies = []
            for _ in range(2):
                resp = await pool.post(server.url(), b"{}", {}, connect_timeout_s=2)
                bodies.append(await resp.read())
            assert server.connections == 1
            return bodies
        finally:
            await pool.aclose()
            await server.close()

    assert uvloop.run(scenario()) == [b'{"n": 1}', b'{"n": 2}']
