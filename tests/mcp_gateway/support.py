"""Helpers of the MCP gateway tests: the registry with two upstream servers, an SDK client through Hearth."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import Table, select

from hearth.store.db import create_engine
from hearth.testing.mcp_upstream import McpUpstream
from hearth.testing.server_thread import HearthServerThread
from tests.support import AUTH

ServerFactory = Callable[..., HearthServerThread]  # the `hearth_server` fixture
TOKEN_A = "upstream-a-secret-0001"
TOKEN_B = "upstream-b-secret-0002"
OTHER_KEY = "other-key-4567"


def mcp_registry(a: McpUpstream, b: McpUpstream, **bank: Any) -> dict[str, Any]:
    """Caller ``tester`` (key ``test-key-123``) and ``other`` (no MCP rule names it); servers ``files`` on
    ``a`` and ``bank`` on ``b``, each with its own credential, and a policy with a deny and argument rules."""
    return {
        "callers": [{"name": "tester", "key": "test-key-123"}, {"name": "other", "key": OTHER_KEY}],
        "mcp_servers": [
            {"name": "files", "url": a.url, "credential": TOKEN_A,
             "rules": [{"effect": "allow", "callers": ["tester"], "tools": ["echo", "add", "delete_file"]},
                       {"effect": "allow", "callers": ["tester"], "tools": ["read_file"],
                        "arguments": {"path": {"prefix": "/srv/public/"}}},
                       {"effect": "deny", "callers": ["*"], "tools": ["delete_*"]}]},
            {"name": "bank", "url": b.url, "credential": TOKEN_B, **bank,
             "rules": [{"effect": "allow", "callers": ["tester"], "tools": ["echo"]},
                       {"effect": "allow", "callers": ["tester"], "tools": ["transfer"],
                        "arguments": {"amount": {"max": 100, "min": 0}, "to": {"one_of": ["alice", "bob"]}}}]},
        ],
    }


@asynccontextmanager
async def hearth_client(base_url: str, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
    """The official SDK's client, Streamable HTTP, against Hearth's ``/mcp`` (auto mode: it probes the
    2026 ``server/discover`` first and falls back to the handshake)."""
    http = httpx2.AsyncClient(headers=headers if headers is not None else AUTH, timeout=30)
    async with http, Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client:
        yield client


async def table_rows(database_url: str, table: Table) -> list[dict[str, Any]]:
    """Every row of ``table`` (the audit, the stored servers), read with a connection of the test's own."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            return [dict(r) for r in (await conn.execute(select(table))).mappings().all()]
    finally:
        await engine.dispose()
