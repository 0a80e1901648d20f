"""One initialized MCP session per upstream server, shared by every caller's calls, made anew only when lost.

MCP gateways in the field re-create the upstream session on every call: an ``initialize`` round trip per
tool call, and a session per call left for the upstream to expire. Here each upstream server has one
:class:`PooledSession` — the official SDK's client over Streamable HTTP, initialized once (protocol
handshake era), carrying Hearth's own credential — and every call of every caller goes through it
(the SDK multiplexes concurrent requests by JSON-RPC id).

A session is made again only when the upstream drops it: the SDK reports a request answered 404 under
a session id as ``Session terminated``; the call is then sent once more on a fresh session (the upstream
refused it without running it). A transport failure (connection refused, reset, timeout) also discards
the session, but a ``tools/call`` is *not* resent then — the upstream may have run it — so the caller
gets an upstream error and the next call connects again.

The SDK's client lives in an anyio task group that must be entered and left by the same task, so each
session is owned by a background task of its own; callers only send requests through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_types import INVALID_REQUEST, PaginatedRequestParams

from hearth.mcp.server_store import UpstreamServer
from hearth.observability.logging import get_logger

log = get_logger("hearth.mcp.session_pool")

_MAX_LIST_PAGES = 50
_CONNECT_TIMEOUT_S = 10.0


class UpstreamFailure(Exception):
    """The upstream could not be reached, or answered outside the protocol (never the upstream's credential)."""


# How upstreams say "no such session" (a 404 under a session id): the SDK's own server answers "Session not
# found", the SDK's client stands in "Session terminated" for a 404 without a JSON-RPC body, other SDKs use
# -32001. The upstream refused the message without running it, so it is safe to send again.
_SESSION_GONE = re.compile(r"session\b.*\b(not found|terminated|expired|unknown|invalid)", re.IGNORECASE)


def _session_gone(exc: MCPError) -> bool:
    return exc.code in (INVALID_REQUEST, -32001) and _SESSION_GONE.search(str(exc.error.message)) is not None


@dataclass(slots=True)
class _Live:
    client: Client
    stop: asyncio.Event
    task: asyncio.Task[None]


class PooledSession:
    """The session to one upstream server (see the module docstring)."""

    def __init__(self, server: UpstreamServer) -> None:
        self.server = server
        self.opened = 0  # sessions initialized with the upstream since this object was made
        self._live: _Live | None = None
        self._lock = asyncio.Lock()

    async def _connected(self) -> Client:
        live = self._live
        if live is not None and not live.task.done():
            return live.client
        async with self._lock:
            live = self._live
            if live is not None and not live.task.done():
                return live.client
            self._live = await self._open()
            self.opened += 1
            return self._live.client

    async def _open(self) -> _Live:
        server = self.server
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()

        async def own() -> None:
            http = httpx2.AsyncClient(headers=server.upstream_headers(),
                                      timeout=httpx2.Timeout(min(server.timeout_s, _CONNECT_TIMEOUT_S),
                                                             read=server.timeout_s))
            try:
                async with http, Client(streamable_http_client(server.url, http_client=http), mode="legacy",
                                        read_timeout_seconds=server.timeout_s, cache=None) as client:
                    ready.set_result(client)
                    await stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(UpstreamFailure(f"{type(exc).__name__}"))
                    return
                if not isinstance(exc, asyncio.CancelledError):
                    log.warning("mcp_upstream_session_ended", server=server.name, error=type(exc).__name__)
                raise

        task = asyncio.create_task(own(), name=f"mcp-session-{server.name}")
        try:
            async with asyncio.timeout(server.timeout_s):
                client = await ready
        except TimeoutError as exc:
            stop.set()
            task.cancel()
            raise UpstreamFailure("TimeoutError") from exc
        return _Live(client, stop, task)

    async def _discard(self, client: Client) -> None:
        """Close the session ``client`` belongs to, if it is still the pooled one."""
        live = self._live
        if live is None or live.client is not client:
            return
        self._live = None
        await _end(live)

    async def call_tool(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The upstream's ``tools/call`` result (as JSON); :class:`MCPError` for its JSON-RPC error,
        :class:`UpstreamFailure` if it could not be reached or its session could not be made."""
        for attempt in range(2):
            client = await self._connected()
            try:
                result = await client.session.call_tool(tool, arguments)
            except MCPError as exc:
                if _session_gone(exc):
                    await self._discard(client)
                    if attempt == 0:
                        continue
                    raise UpstreamFailure("session terminated twice") from exc
                raise
            except Exception as exc:  # transport: the upstream may have run the call, so no resend
                await self._discard(client)
                raise UpstreamFailure(type(exc).__name__) from exc
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)
        raise AssertionError("unreachable")

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the upstream lists (all pages); safe to resend, so sent once more on a fresh session
        after any failure."""
        for attempt in range(2):
            client = await self._connected()
            try:
                return await _all_tools(client)
            except MCPError as exc:
                if not _session_gone(exc):
                    raise
                await self._discard(client)
                if attempt == 1:
                    raise UpstreamFailure("session terminated twice") from exc
            except Exception as exc:
                await self._discard(client)
                if attempt == 1:
                    raise UpstreamFailure(type(exc).__name__) from exc
        raise AssertionError("unreachable")

    async def close(self) -> None:
        live, self._live = self._live, None
        if live is not None:
            await _end(live)


async def _all_tools(client: Client) -> list[dict[str, Any]]:
    tools: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(_MAX_LIST_PAGES):
        page = await client.session.list_tools(params=PaginatedRequestParams(cursor=cursor))
        tools.extend(tool.model_dump(by_alias=True, mode="json", exclude_none=True) for tool in page.tools)
        cursor = page.next_cursor
        if cursor is None:
            break
    return tools


async def _end(live: _Live) -> None:
    live.stop.set()
    with contextlib.suppress(Exception, asyncio.CancelledError):
        async with asyncio.timeout(5):
            await asyncio.shield(live.task)
    if not live.task.done():
        live.task.cancel()


class SessionPool:
    """The pooled sessions by server name, kept across snapshot reloads while a server's connection
    (URL, credential) stays the same."""

    def __init__(self) -> None:
        self._sessions: dict[str, PooledSession] = {}
        self._closing: set[asyncio.Task[None]] = set()  # replaced sessions being closed (held, not collected)

    def get(self, server: UpstreamServer) -> PooledSession:
        pooled = self._sessions.get(server.name)
        if pooled is None or pooled.server.connection_key() != server.connection_key():
            if pooled is not None:
                closing = asyncio.get_running_loop().create_task(pooled.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            pooled = self._sessions[server.name] = PooledSession(server)
        elif pooled.server is not server:
            pooled.server = server  # new policy or limits: same connection
        return pooled

    def opened(self) -> dict[str, int]:
        return {name: pooled.opened for name, pooled in self._sessions.items()}

    async def close(self) -> None:
        sessions, self._sessions = list(self._sessions.values()), {}
        await asyncio.gather(*(pooled.close() for pooled in sessions), *self._closing, return_exceptions=True)
