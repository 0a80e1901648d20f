"""A small HTTP/1.1 client for the model-call hop: keep-alive connections, one POST at a time on each.

Every model call crosses this hop once, so its cost is paid on every request the gateway serves.
aiohttp's client costs about a quarter of the event loop's time per non-stream call (cookie jar,
proxy and trace hooks, per-request timer objects, payload registry — none of which an upstream call
uses); this client does only what the upstream hop needs:

* a pool of idle keep-alive connections per (scheme, host, port), unbounded (admission, not the pool,
  bounds concurrency); a connection idle longer than ``keepalive_s`` is closed instead of reused;
* TLS through the standard library (default CA store, hostname checked); DNS answers cached for
  ``dns_ttl_s``;
* responses parsed by httptools (as uvicorn parses requests): ``Content-Length``, chunked and
  read-until-close bodies, ``gzip``/``deflate`` content encodings decoded;
* a response's body is buffered by the connection as it arrives (reading pauses above
  :data:`HIGH_WATER` bytes unread) and the connection returns to the pool as soon as the message is
  complete, before the caller reads it.

It raises :class:`ConnectFailed` when no connection could be made (nothing was sent: safe to send
elsewhere) and :class:`ConnectionClosed` when the connection broke or the answer was not HTTP. Timers
are the caller's: :meth:`Http1Response.fail` wakes a pending read with the exception given.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
import zlib
from collections.abc import Mapping
from typing import cast
from urllib.parse import urlsplit

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

HIGH_WATER = 1 << 20  # bytes buffered and unread before the connection stops reading
_USER_AGENT = b"hearth"
_ACCEPT_ENCODING = b"gzip, deflate"


class Http1Error(Exception):
    """The upstream hop failed without an HTTP answer."""


class ConnectFailed(Http1Error):
    """No connection could be made (refused, unresolvable, TLS failure, connect timeout): nothing was sent."""

    def __init__(self, message: str, *, timeout: bool = False) -> None:
        super().__init__(message)
        self.timeout = timeout


class ConnectionClosed(Http1Error):
    """The connection broke (or spoke something other than HTTP/1.1) before the answer was complete."""


class _Target:
    """A parsed URL: where to connect and what to put on the request line."""

    __slots__ = ("host", "key", "port", "request_prefix", "tls")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.key = (self.tls, self.host, self.port)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port != (443 if self.tls else 80):
            host = f"{host}:{self.port}"
        self.request_prefix = f" {target} HTTP/1.1\r\nHost: {host}\r\n".encode("latin-1")


class Http1Response:
    """One answer: status and headers once :meth:`wait_headers` returns, then the body as it arrives."""

    __slots__ = ("_buffered", "_chunks", "_conn", "_decoder", "_eof", "_exc", "_headers_done", "_waiter",
                 "headers", "status")

    def __init__(self, conn: _Connection) -> None:
        self._conn: _Connection | None = conn
        self.status = 0
        self.headers: CIMultiDictProxy[str] = _EMPTY
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._decoder: zlib._Decompress | None = None
        self._headers_done = False
        self._eof = False
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None

    # ---- fed by the connection -----------------------------------------------------------------
    def _got_headers(self, status: int, raw: list[tuple[bytes, bytes]]) -> None:
        self.status = status
        headers: CIMultiDict[str] = CIMultiDict((n.decode("latin-1"), v.decode("latin-1")) for n, v in raw)
        encoding = headers.get("Content-Encoding", "").strip().lower()
        if encoding in ("gzip", "x-gzip"):
            self._decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._decoder = zlib.decompressobj(zlib.MAX_WBITS)
        self.headers = CIMultiDictProxy(headers)
        self._headers_done = True
        self._wake()

    def _got_body(self, data: bytes) -> None:
        if self._decoder is not None:
            try:
                data = self._decoder.decompress(data)
            except zlib.error as exc:
                self._got_error(ConnectionClosed(f"undecodable body: {exc}"))
                return
        if data:
            self._chunks.append(data)
            self._buffered += len(data)
            self._wake()

    def _got_end(self) -> None:
        if self._decoder is not None:
            tail = self._decoder.flush()
            if tail:
                self._chunks.append(tail)
        self._eof = True
        self._conn = None
        self._wake()

    def _got_error(self, exc: BaseException) -> None:
        if self._exc is None and not self._eof:
            self._exc = exc
            self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def _wait(self) -> None:
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None

    # ---- read by the caller ----------------------------------------------------------------------
    def fail(self, exc: BaseException) -> None:
        """Wake a pending (and fail every later) read with ``exc``: how a caller's timer ends a wait."""
        self._got_error(exc)

    async def wait_headers(self) -> None:
        while not self._headers_done:
            if self._exc is not None:
                raise self._exc
            await self._wait()

    def read_nowait(self) -> bytes:
        """Everything buffered (``b""`` if nothing is)."""
        if not self._chunks:
            if self._exc is not None:
                raise self._exc
            return b""
        data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._chunks = []
        if self._buffered > HIGH_WATER and self._conn is not None:
            self._conn.resume()
        self._buffered = 0
        return data

    def at_eof(self) -> bool:
        """The whole body has arrived and been read."""
        return self._eof and not self._chunks

    async def readany(self) -> bytes:
        """The next bytes of the body (everything buffered, or the next arrival); ``b""`` at its end."""
        while not self._chunks and not self._eof:
            if self._exc is not None:
                raise self._exc
            await self._wait()
        return self.read_nowait()

    async def read(self) -> bytes:
        """The whole (rest of the) body."""
        while not self._eof:
            if self._exc is not None:
                raise self._exc
            await self._wait()
        return self.read_nowait()

    def close(self) -> None:
        """Done with this answer: a connection still receiving it is closed (it cannot be reused)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.abort()


_EMPTY: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())


class _Connection(asyncio.Protocol):
    """One keep-alive connection: writes a request, parses its answer into the current response."""

    def __init__(self, pool: Http1Pool, key: tuple[bool, str, int]) -> None:
        self._pool = pool
        self.key = key
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self._response: Http1Response | None = None
        self._raw_headers: list[tuple[bytes, bytes]] = []
        self._paused = False
        self.closed = False
        self.idle_since = 0.0

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not asyncio's classes

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionClosed(f"not an HTTP/1.1 answer: {exc}"))
            self.abort()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool._forget(self)
        response = self._response
        if response is not None:
            if response._headers_done and self._ends_with_close(response):
                self._response = None
                response._got_end()
            else:
                self._fail(ConnectionClosed("the upstream closed the connection" +
                                            (f": {type(exc).__name__}" if exc is not None else "")))

    @staticmethod
    def _ends_with_close(response: Http1Response) -> bool:
        h = response.headers
        return "Content-Length" not in h and "chunked" not in h.get("Transfer-Encoding", "").lower()

    # httptools callbacks
    def on_message_begin(self) -> None:
        self._raw_headers = []

    def on_header(self, name: bytes, value: bytes) -> None:
        self._raw_headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        if status < 200 or self._response is None:
            return  # an informational answer (100 Continue, …): the real one follows
        self._response._got_headers(status, self._raw_headers)

    def on_body(self, body: bytes) -> None:
        response = self._response
        if response is not None and response._headers_done:
            response._got_body(body)
            if response._buffered > HIGH_WATER and not self._paused and self.transport is not None:
                self._paused = True
                self.transport.pause_reading()

    def on_message_complete(self) -> None:
        response = self._response
        if response is None or not response._headers_done:
            return
        self._response = None
        response._got_end()
        if self._parser.should_keep_alive() and not self.closed:
            self._pool._put(self)
        else:
            self.abort()

    # used by the pool and the response
    def send(self, method: bytes, target: _Target, headers: Mapping[str, str], body: bytes) -> Http1Response:
        assert self.transport is not None
        response = self._response = Http1Response(self)
        lines = [method, target.request_prefix, b"Content-Length: ", str(len(body)).encode(), b"\r\n"]
        agent = False
        for name, value in headers.items():
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise ValueError(f"header {name!r} has a line break")
            if len(name) == 10 and name.lower() == "user-agent":
                agent = True
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        if not agent:
            lines += (b"User-Agent: ", _USER_AGENT, b"\r\n")
        lines += (b"Accept-Encoding: ", _ACCEPT_ENCODING, b"\r\n\r\n", body)
        self.transport.write(b"".join(lines))
        return response

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, exc: BaseException) -> None:
        response, self._response = self._response, None
        if response is not None:
            response._conn = None
            response._got_error(exc)


class Http1Pool:
    """Idle keep-alive connections by (TLS, host, port), and the way to send a request over one."""

    def __init__(self, *, keepalive_s: float = 30.0, dns_ttl_s: float = 300.0,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[tuple[bool, str, int], list[_Connection]] = {}
        self._targets: dict[str, _Target] = {}
        self._dns: dict[tuple[str, int], tuple[float, list[tuple[str, int]]]] = {}
        self._keepalive_s = keepalive_s
        self._dns_ttl_s = dns_ttl_s
        self._ssl = ssl_context
        self._open: set[_Connection] = set()

    async def post(self, url: str, body: bytes, headers: Mapping[str, str], *,
                   connect_timeout_s: float) -> Http1Response:
        """Send ``POST url`` on an idle connection (or a new one, made within ``connect_timeout_s``).

        Returns as soon as the request is written; :meth:`Http1Response.wait_headers` waits for the answer."""
        target = self._targets.get(url)
        if target is None:
            target = _Target(url)
            if len(self._targets) >= 1024:
                self._targets.clear()
            self._targets[url] = target
        conn = self._take(target.key) or await self._connect(target, connect_timeout_s)
        return conn.send(b"POST", target, headers, body)

    def _take(self, key: tuple[bool, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        if not idle:
            return None
        oldest_ok = time.monotonic() - self._keepalive_s
        while idle:
            conn = idle.pop()
            if not conn.closed and conn.idle_since >= oldest_ok:
                return conn
            conn.abort()
        return None

    def _put(self, conn: _Connection) -> None:
        conn.idle_since = time.monotonic()
        self._idle.setdefault(conn.key, []).append(conn)

    def _forget(self, conn: _Connection) -> None:
        self._open.discard(conn)
        idle = self._idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)

    async def _connect(self, target: _Target, timeout_s: float) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_s):
                last: BaseException | None = None
                for host, port in await self._resolve(target.host, target.port):
                    try:
                        _, conn = await loop.create_connection(
                            lambda: _Connection(self, target.key), host, port,
                            ssl=self._context() if target.tls else None,
                            server_hostname=target.host if target.tls else None)
                    except (OSError, ssl.SSLError) as exc:
                        last = exc
                        continue
                    self._open.add(conn)
                    return conn
                raise ConnectFailed(f"cannot connect to {target.host}:{target.port}: {type(last).__name__}") from last
        except TimeoutError as exc:
            raise ConnectFailed(f"no connection to {target.host}:{target.port} within {timeout_s:g} s",
                                timeout=True) from exc

    async def _resolve(self, host: str, port: int) -> list[tuple[str, int]]:
        now = time.monotonic()
        cached = self._dns.get((host, port))
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ConnectFailed(f"cannot resolve {host}: {exc}") from exc
        addresses = list(dict.fromkeys((str(info[4][0]), int(info[4][1])) for info in infos))
        self._dns[(host, port)] = (now + self._dns_ttl_s, addresses)
        return addresses

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def aclose(self) -> None:
        """Close every connection (idle or busy)."""
        for conn in list(self._open):
            conn.abort()
        self._idle.clear()
