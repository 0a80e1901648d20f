"""A small pipelined Redis client for the admission hot path.

Why not redis-py or coredis: measured per governed call (``bench/redis_client_bench.py``, results in
bench/BENCHMARKS.md, "Redis client comparison (issue 8)"), the same three commands sent through
``RedisState`` cost ~3x (c=1) to ~4x (c=64) this client's CPU with ``redis.asyncio`` + hiredis, and
more with coredis: ``redis.asyncio`` packs every argument in Python (hiredis only parses there), checks
a connection out of its pool and arms an ``asyncio`` timeout per command, and opens one socket per
concurrent command. This client keeps what the state backend needs and nothing else:

* **one connection per process, pipelined**: every command is written at once and replies are
  matched in order (Redis answers one connection strictly in order), so concurrent callers share
  the socket without a pool or locks; writes made in one event-loop step leave in one syscall;
* **hiredis** parses replies (C); error replies become :class:`RespError`;
* **one watchdog** per connection instead of a timer per command: if Redis has been silent for
  ``command_timeout_s`` while a command waits (silent = no byte since that command was sent), on
  two checks 0.25 s apart, the connection is aborted and every waiter fails with
  :class:`RespUnavailable` — a hung server costs at most ~timeout + 0.5 s, never a hang. Silence,
  not a command's age, is the measure: under a CPU backlog replies are read late although Redis
  answered long ago, and the second check lets the event loop read what is already there (uvloop
  runs due timers before it polls sockets);
* **reconnect on demand**: the next command after a failure dials again (``connect_timeout_s``).

URLs: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://…`` (TLS, verified against the
system CAs with the host name checked) and ``unix:///path/to/redis.sock[?db=N]``; no other URL option
(a query parameter other than ``db`` is refused, not ignored).

Not supported, by choice: Redis Cluster and Sentinel (one server address), RESP3, client TLS
certificates or a private CA file. Why this client at all, measured per governed call against
redis-py (asyncio, hiredis) and coredis: bench/BENCHMARKS.md, "Redis client comparison (issue 8)".
"""

from __future__ import annotations

import asyncio
import hashlib
import ssl
from collections import deque
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import hiredis

_WATCHDOG_S = 0.25


class RespError(Exception):
    """Redis answered with an error reply (e.g. ``NOSCRIPT``, ``WRONGTYPE``, a script error)."""


class RespUnavailable(Exception):
    """No answer: cannot connect, the connection dropped, or the server did not reply in time."""


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script run by SHA (``EVALSHA``), loaded on first ``NOSCRIPT``."""

    body: bytes
    sha: bytes

    @classmethod
    def of(cls, source: str) -> Script:
        body = source.encode()
        return cls(body, hashlib.sha1(body).hexdigest().encode())  # Redis names scripts by SHA-1


def pack(args: tuple[Any, ...]) -> bytes:
    """One command in RESP: an array of bulk strings (str, bytes, int and float arguments).

    hiredis packs in C, three times faster than the same loop in Python (~6 vs ~19 µs for an
    admission script's 55 arguments), and a governed call packs two such commands."""
    return cast(bytes, hiredis.pack_command(args))


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int
    path: str | None
    db: int
    username: str | None
    password: str | None
    tls: bool

    @classmethod
    def parse(cls, url: str) -> Address:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"unsupported Redis URL scheme {parts.scheme!r} (use redis://, rediss:// or unix://)")
        db_text = query.get("db", [""])[0] or (parts.path.strip("/") if parts.scheme != "unix" else "") or "0"
        if not db_text.isdigit():
            raise ValueError("the Redis database in the URL must be a number")
        unknown = sorted(set(query) - {"db"})
        if unknown:  # e.g. ssl_cert_reqs, socket_timeout: options of other clients, never applied here
            raise ValueError(f"Redis URL option(s) {', '.join(unknown)} not supported (only ?db=N)")
        if parts.username and parts.password is None:
            raise ValueError("a Redis user in the URL needs a password (redis://user:password@host)")
        return cls(host=parts.hostname or "127.0.0.1",
                   port=parts.port or 6379, path=parts.path if parts.scheme == "unix" else None,
                   db=int(db_text), username=unquote(parts.username) if parts.username else None,
                   password=unquote(parts.password) if parts.password else None, tls=parts.scheme == "rediss")


class _Connection(asyncio.Protocol):
    """One socket: queued writes, FIFO reply matching, the watchdog."""

    def __init__(self, loop: asyncio.AbstractEventLoop, command_timeout_s: float) -> None:
        self._loop = loop
        self._timeout = command_timeout_s
        self._reader = hiredis.Reader(replyError=RespError)
        self._waiting: deque[tuple[asyncio.Future[Any], float]] = deque()
        self._out: list[bytes] = []
        self._transport: asyncio.Transport | None = None
        self._flush_pending = False
        self._watchdog: asyncio.TimerHandle | None = None
        self._last_rx = 0.0
        self._strike = False
        self.lost: BaseException | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        self._last_rx = self._loop.time()
        self._reader.feed(data)
        waiting = self._waiting
        while True:
            try:
                reply = self._reader.gets()
            except hiredis.ProtocolError as exc:
                self._fail(RespUnavailable(f"Redis protocol error: {exc}"))
                return
            if reply is False:
                return
            if not waiting:
                self._fail(RespUnavailable("Redis sent a reply nobody asked for"))
                return
            fut, _ = waiting.popleft()
            if fut.done():  # the caller gave up (cancelled); the reply is still consumed in order
                continue
            if isinstance(reply, RespError):
                fut.set_exception(reply)
            else:
                fut.set_result(reply)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._fail(RespUnavailable(f"Redis connection lost: {exc}" if exc else "Redis closed the connection"))

    def send(self, payload: bytes) -> asyncio.Future[Any]:
        if self.lost is not None:
            raise RespUnavailable(str(self.lost))
        fut = self._loop.create_future()
        self._waiting.append((fut, self._loop.time()))
        self._out.append(payload)
        if not self._flush_pending:
            self._flush_pending = True
            self._loop.call_soon(self._flush)
        if self._watchdog is None:
            self._watchdog = self._loop.call_later(_WATCHDOG_S, self._watch)
        return fut

    def _flush(self) -> None:
        self._flush_pending = False
        if self._out and self._transport is not None and self.lost is None:
            data = b"".join(self._out)
            self._out.clear()
            self._transport.write(data)

    def _watch(self) -> None:
        self._watchdog = None
        if not self._waiting or self.lost is not None:
            self._strike = False
            return
        silent = self._loop.time() - max(self._last_rx, self._waiting[0][1])
        if silent <= self._timeout:
            self._strike = False
        elif self._strike:
            self._fail(RespUnavailable(f"Redis did not answer within {self._timeout:g} s"))
            return
        else:
            self._strike = True  # confirm on the next check, after the loop has polled the socket
        self._watchdog = self._loop.call_later(_WATCHDOG_S, self._watch)

    def _fail(self, exc: RespUnavailable) -> None:
        if self.lost is None:
            self.lost = exc
        if self._transport is not None:
            try:
                self._transport.abort()
            except RuntimeError:  # its event loop is already closed: the socket goes with it
                pass
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        while self._waiting:
            fut, _ = self._waiting.popleft()
            if not fut.done():
                fut.set_exception(exc)

    def close(self) -> None:
        self._fail(RespUnavailable("client closed"))


class RespClient:
    """``await client.execute("GET", key)``; ``await client.run(script, keys, args)``.

    Raises :class:`RespError` for error replies and :class:`RespUnavailable` for everything that
    means "no answer". Safe to share between any number of tasks of one event loop.
    """

    def __init__(self, url: str, connect_timeout_s: float = 1.0, command_timeout_s: float = 2.0) -> None:
        self._address = Address.parse(url)
        self._connect_timeout = connect_timeout_s
        self._command_timeout = command_timeout_s
        self._conn: _Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connecting: asyncio.Task[_Connection] | None = None

    async def execute(self, *args: Any) -> Any:
        conn = self._conn
        if conn is None or conn.lost is not None or self._loop is not asyncio.get_running_loop():
            conn = await self._connect()
        return await conn.send(pack(args))

    async def execute_many(self, *commands: tuple[Any, ...]) -> list[Any]:
        """Several commands written together; replies in order (not a transaction)."""
        conn = self._conn
        if conn is None or conn.lost is not None or self._loop is not asyncio.get_running_loop():
            conn = await self._connect()
        futures = [conn.send(pack(c)) for c in commands]
        return [await f for f in futures]

    async def run(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        try:
            return await self.execute(b"EVALSHA", script.sha, len(keys), *keys, *args)
        except RespError as exc:
            if not str(exc).startswith("NOSCRIPT"):
                raise
        return await self.execute(b"EVAL", script.body, len(keys), *keys, *args)

    async def _connect(self) -> _Connection:
        """The live connection, dialling once for every task that needs it now.

        The dial is its own task: a caller that is cancelled while waiting for it stops waiting
        (and sees ``CancelledError``), the others still get the connection."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # first use, or a new event loop (tests): the old socket is useless
            self._drop()
            self._loop = loop
        if self._connecting is None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
            self._connecting = loop.create_task(self._dial(loop))
            self._connecting.add_done_callback(self._dialled)
        return await asyncio.shield(self._connecting)

    def _dialled(self, task: asyncio.Task[_Connection]) -> None:
        if self._connecting is task:
            self._connecting = None
        if not task.cancelled() and task.exception() is None and self._loop is task.get_loop():
            self._conn = task.result()

    async def _dial(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        a = self._address
        conn = _Connection(loop, self._command_timeout)
        try:
            async with asyncio.timeout(self._connect_timeout):
                if a.path is not None:
                    await loop.create_unix_connection(lambda: conn, a.path)
                else:
                    await loop.create_connection(lambda: conn, a.host, a.port,
                                                 ssl=ssl.create_default_context() if a.tls else None)
        except (OSError, TimeoutError) as exc:
            raise RespUnavailable(f"cannot connect to Redis: {type(exc).__name__}: {exc}") from exc
        hello: list[tuple[Any, ...]] = []
        if a.password is not None:
            hello.append(("AUTH", a.username, a.password) if a.username else ("AUTH", a.password))
        if a.db:
            hello.append(("SELECT", a.db))
        try:
            replies = await asyncio.gather(*(conn.send(pack(c)) for c in hello), return_exceptions=True)
        except BaseException:
            conn.close()
            raise
        refused = next((r for r in replies if isinstance(r, BaseException)), None)
        if refused is not None:
            conn.close()
            # The server's words only; the password is never part of an AUTH error reply.
            raise RespUnavailable(f"Redis refused the connection setup: {refused}") from refused
        return conn

    def _drop(self) -> None:
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def close(self) -> None:
        self._drop()
