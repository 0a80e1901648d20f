"""One initialized MCP session per upstream server, shared by every caller's calls, made anew only when lost.

MCP gateways in the field re-create the upstream session on every call: an ``initialize`` round trip per
tool call, and a session per call left for the upstream to expire. Here each upstream server has one
:class:`PooledSession` — initialized once (the ``initialize`` handshake, then
``notifications/initialized``), carrying Hearth's own credential — and every call of every caller is a
new JSON-RPC request on it, with Hearth's own request id (concurrent calls share the session; HTTP
keep-alive connections come from the process's aiohttp pool).

A session is made again only when the upstream drops it: a request answered **404 under a session id**
(the transport's "session not found") was refused without being run, so it is sent once more on a fresh
session. A transport failure (connection refused, reset, timeout) also discards the session, but a
``tools/call`` is *not* resent then — the upstream may have run it — so the caller gets an upstream error
and the next call connects again.

This client speaks the Streamable HTTP transport itself (POST, a JSON or an SSE answer, the
``Mcp-Session-Id`` and ``MCP-Protocol-Version`` headers; no standing GET stream: the gateway wants no
server-initiated messages). The official SDK's client was measured first: on this path it cost several
milliseconds per call more than a plain aiohttp request to the same upstream (bench/BENCHMARKS.md, MCP),
while the gateway's budget is 1 ms. The SDK's server and client are what the tests and the benchmark
run against it.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson

from hearth import __version__
from hearth.mcp.protocol import SUPPORTED_VERSIONS
from hearth.mcp.server_store import UpstreamServer
from hearth.observability.logging import get_logger
from hearth.wire.sse import SSEEventTooLarge, SSEParser

log = get_logger("hearth.mcp.session_pool")

_MAX_LIST_PAGES = 50
_MAX_ANSWER_BYTES = 16 << 20
_ACCEPT = "application/json, text/event-stream"


class UpstreamFailure(Exception):
    """The upstream could not be reached, or answered outside the protocol (never carries its credential)."""


class UpstreamRpcError(Exception):
    """The upstream answered a request with a JSON-RPC error (relayed to the caller, marked as the upstream's)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _SessionGone(Exception):
    """404 under a session id: the upstream no longer knows the session (it did not run the request)."""


class PooledSession:
    """The session to one upstream server (see the module docstring)."""

    def __init__(self, server: UpstreamServer, http: aiohttp.ClientSession) -> None:
        self.server = server
        self.opened = 0  # sessions initialized with the upstream since this object was made
        self._http = http
        self._session_id: str | None = None
        self._version: str | None = None  # the negotiated protocol version; None: not initialized
        self._generation = 0  # bumped on every new session, so a stale failure does not discard a fresh one
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": _ACCEPT, **self.server.upstream_headers()}
        if self._session_id is not None:
            headers["Mcp-Session-Id"] = self._session_id
        if self._version is not None:
            headers["MCP-Protocol-Version"] = self._version
        return headers

    async def _ensure(self) -> int:
        if self._version is not None:
            return self._generation
        async with self._lock:
            if self._version is None:
                await self._initialize()
            return self._generation

    async def _initialize(self) -> None:
        self._session_id = None
        params = {"protocolVersion": SUPPORTED_VERSIONS[0], "capabilities": {},
                  "clientInfo": {"name": "hearth-mcp-gateway", "version": __version__}}
        try:
            result, session_id = await self._post("initialize", params, expect_session=True)
        except (UpstreamRpcError, _SessionGone) as exc:
            raise UpstreamFailure(f"initialize refused: {exc}") from exc
        version = result.get("protocolVersion")
        if version not in SUPPORTED_VERSIONS:
            raise UpstreamFailure(f"the upstream speaks protocol version {str(version)[:40]!r}")
        self._session_id = session_id
        self._version = version
        await self._notify("notifications/initialized")
        self._generation += 1
        self.opened += 1
        log.info("mcp_upstream_session_opened", server=self.server.name, protocol_version=version)

    def _discard(self, generation: int) -> None:
        if generation == self._generation:
            self._version = None
            self._session_id = None

    async def _notify(self, method: str) -> None:
        body = orjson.dumps({"jsonrpc": "2.0", "method": method})
        try:
            async with self._http.post(self.server.url, data=body, headers=self._headers(),
                                       timeout=self._timeout()) as response:
                await response.read()
                if response.status >= 400:
                    raise UpstreamFailure(f"{method}: HTTP {response.status}")
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamFailure(type(exc).__name__) from exc

    def _timeout(self) -> aiohttp.ClientTimeout:
        return aiohttp.ClientTimeout(total=self.server.timeout_s)

    async def _post(self, method: str, params: Mapping[str, Any], *,
                    expect_session: bool = False) -> tuple[dict[str, Any], str | None]:
        """One request's result and the session id the answer named; raises :class:`UpstreamRpcError`,
        :class:`_SessionGone` or :class:`UpstreamFailure`."""
        request_id = next(self._ids)
        body = orjson.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        had_session = self._session_id is not None
        try:
            async with self._http.post(self.server.url, data=body, headers=self._headers(),
                                       timeout=self._timeout()) as response:
                if response.status == 404 and had_session:
                    await response.read()
                    raise _SessionGone
                kind = response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
                if kind == "text/event-stream" and response.status < 400:
                    answer = await _answer_from_events(response, request_id)
                else:
                    answer = await _answer_from_json(response)
                session_id = response.headers.get("Mcp-Session-Id") if expect_session else None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise UpstreamFailure(type(exc).__name__) from exc
        error = answer.get("error")
        if isinstance(error, dict):
            raise UpstreamRpcError(int(error.get("code", -32603)), str(error.get("message", ""))[:1000])
        if response.status >= 400:
            raise UpstreamFailure(f"HTTP {response.status}")
        result = answer.get("result")
        if not isinstance(result, dict):
            raise UpstreamFailure("the answer holds no result object")
        return result, session_id

    async def request(self, method: str, params: Mapping[str, Any], *, resend: bool) -> dict[str, Any]:
        """``method``'s result on the pooled session. A dropped session is made again and the request sent
        once more (never run the first time); after a transport failure it is sent again only if ``resend``
        (the method is safe to repeat)."""
        for attempt in range(2):
            generation = await self._ensure()
            try:
                result, _ = await self._post(method, params)
                return result
            except _SessionGone:
                self._discard(generation)
                if attempt == 1:
                    raise UpstreamFailure("the upstream dropped the session twice") from None
            except UpstreamFailure:
                self._discard(generation)
                if not resend or attempt == 1:
                    raise
        raise AssertionError("unreachable")

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.request("tools/call", {"name": tool, "arguments": arguments}, resend=False)

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the upstream lists (all pages)."""
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(_MAX_LIST_PAGES):
            page = await self.request("tools/list", {"cursor": cursor} if cursor else {}, resend=True)
            tools.extend(t for t in page.get("tools", []) if isinstance(t, dict))
            cursor = page.get("nextCursor") if isinstance(page.get("nextCursor"), str) else None
            if cursor is None:
                break
        return tools

    async def close(self) -> None:
        """End the upstream session (DELETE, best effort)."""
        session_id, self._session_id, self._version = self._session_id, None, None
        if session_id is None:
            return
        headers = {"Mcp-Session-Id": session_id, **self.server.upstream_headers()}
        try:
            async with self._http.delete(self.server.url, headers=headers,
                                         timeout=aiohttp.ClientTimeout(total=2)) as response:
                await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("mcp_upstream_session_not_ended", server=self.server.name, error=type(exc).__name__)


async def _answer_from_json(response: aiohttp.ClientResponse) -> dict[str, Any]:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():  # the whole body, however it is split, up to the bound
        size += len(chunk)
        if size > _MAX_ANSWER_BYTES:
            raise UpstreamFailure("the answer is too large")
        chunks.append(chunk)
    raw = b"".join(chunks)
    try:
        answer = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        answer = {}
    if not isinstance(answer, dict):
        raise UpstreamFailure("the answer is not a JSON-RPC message")
    return answer


async def _answer_from_events(response: aiohttp.ClientResponse, request_id: int) -> dict[str, Any]:
    """The JSON-RPC response to ``request_id`` among the stream's events (notifications before it are
    dropped: the gateway relays results only)."""
    parser = SSEParser(max_event_bytes=_MAX_ANSWER_BYTES)
    async for chunk in response.content.iter_any():
        try:
            events = parser.feed(chunk)
        except SSEEventTooLarge as exc:
            raise UpstreamFailure("an event of the answer is too large") from exc
        for event in events:
            if not event.data:
                continue
            try:
                message = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                continue
            if isinstance(message, dict) and message.get("id") == request_id and (
                    "result" in message or "error" in message):
                return message
    raise UpstreamFailure("the event stream ended without the answer")


class SessionPool:
    """The pooled sessions by server name, kept across snapshot reloads while a server's connection
    (URL, credential, timeout) stays the same."""

    def __init__(self, http: aiohttp.ClientSession) -> None:
        self._http = http
        self._sessions: dict[str, PooledSession] = {}
        self._closing: set[asyncio.Task[None]] = set()  # replaced sessions being ended (held, not collected)

    def get(self, server: UpstreamServer) -> PooledSession:
        pooled = self._sessions.get(server.name)
        if pooled is None or pooled.server.connection_key() != server.connection_key():
            if pooled is not None:
                closing = asyncio.get_running_loop().create_task(pooled.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            pooled = self._sessions[server.name] = PooledSession(server, self._http)
        elif pooled.server is not server:
            pooled.server = server  # new policy or limits: same connection
        return pooled

    def opened(self) -> dict[str, int]:
        return {name: pooled.opened for name, pooled in self._sessions.items()}

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(pooled.close() for pooled in sessions), *self._closing, return_exceptions=True)
