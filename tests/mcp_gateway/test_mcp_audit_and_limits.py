"""Every MCP tool call is audited (arguments only as a digest), rate-limited per caller, and the upstream
credential is kept encrypted at rest — on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import orjson
import pytest
from mcp import MCPError

from hearth.mcp.audit import argument_digest
from hearth.observability.metrics import REGISTRY
from hearth.store.tables import mcp_calls, mcp_servers
from hearth.testing.mcp_upstream import McpUpstream
from tests.mcp_gateway.support import TOKEN_A, TOKEN_B, ServerFactory, hearth_client, mcp_registry, table_rows
from tests.support import AUTH, REDIS_URL


def test_the_argument_digest_is_sha256_of_canonical_json() -> None:
    assert argument_digest({"b": 1, "a": "é"}) == hashlib.sha256('{"a":"é","b":1}'.encode()).hexdigest()
    assert argument_digest({"a": "é", "b": 1}) == argument_digest({"b": 1, "a": "é"})


async def test_every_call_is_audited_with_a_digest_never_the_arguments(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream, database_url: str) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b), database_url=database_url)
    secret = {"path": "/srv/public/payroll-2026.xlsx"}
    denied_before = _metric("files", "denied")
    async with hearth_client(server.base_url) as client:
        await client.call_tool("files__read_file", secret)
        with pytest.raises(MCPError):
            await client.call_tool("files__delete_file", {"path": "/srv/public/x"})
        with pytest.raises(MCPError):
            await client.call_tool("ghost__tool", {})
        await client.call_tool("bank__transfer", {"amount": 5, "to": "bob"})
    assert server.runtime.mcp is not None
    assert server.call(server.runtime.mcp.audit.flush())
    rows = sorted(await table_rows(database_url, mcp_calls), key=lambda r: r["id"])
    assert [(r["caller"], r["server"], r["tool"], r["outcome"], r["error_code"]) for r in rows] == [
        ("tester", "files", "files__read_file", "ok", None),
        ("tester", "files", "files__delete_file", "denied", "mcp_tool_denied"),
        ("tester", None, "ghost__tool", "not_found", "mcp_tool_not_found"),
        ("tester", "bank", "bank__transfer", "ok", None),
    ]
    assert rows[0]["args_sha256"] == hashlib.sha256(orjson.dumps(secret, option=orjson.OPT_SORT_KEYS)).hexdigest()
    assert all(r["latency_ms"] > 0 and r["request_id"] for r in rows)
    assert "payroll" not in str(rows)
    assert _metric("files", "denied") - denied_before == 1  # hearth_mcp_calls_total, as audited


def _metric(server: str, outcome: str) -> float:
    return REGISTRY.get_sample_value("hearth_mcp_calls_total", {"server": server, "outcome": outcome}) or 0.0


async def test_upstream_credentials_are_encrypted_at_rest_and_shown_masked(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream, database_url: str) -> None:
    hearth_server(mcp_registry(upstream_a, upstream_b), database_url=database_url)
    rows = {r["name"]: r for r in await table_rows(database_url, mcp_servers)}
    assert set(rows) == {"files", "bank"}
    for name, token in (("files", TOKEN_A), ("bank", TOKEN_B)):
        assert token not in str(rows[name]) and rows[name]["credential_enc"].startswith("v1:")
        assert rows[name]["credential_hint"].endswith(token[-4:]) and "****" in rows[name]["credential_hint"]


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_the_callers_rpm_on_a_server_refuses_the_call_over_it(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream, http: Any,
        backend: str, request: pytest.FixtureRequest) -> None:
    state = {"state_backend": "redis", "redis_url": REDIS_URL,
             "redis_prefix": request.getfixturevalue("redis_prefix")} if backend == "redis" else {}
    server = hearth_server(mcp_registry(upstream_a, upstream_b, caller_rpm=3), **state)
    if 60 - time.time() % 60 < 3:  # the RPM window is the wall-clock minute: start the count inside one
        await asyncio.sleep(60 - time.time() % 60 + 0.05)
    async with hearth_client(server.base_url) as client:
        for i in range(3):
            await client.call_tool("bank__echo", {"text": str(i)})
        with pytest.raises(MCPError) as limited:
            await client.call_tool("bank__echo", {"text": "over"})
        other_server = await client.call_tool("files__echo", {"text": "still"})  # its own limit: none
    call = {"name": "bank__echo", "arguments": {"text": "x"}}
    raw = await http.post(f"{server.base_url}/mcp", headers={**AUTH, "Content-Type": "application/json"},
                          json={"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": call})
    assert (raw.status_code, raw.json()["error"]["data"]["code"]) == (429, "mcp_rpm_exceeded")
    assert int(raw.headers["retry-after"]) >= 1 and raw.headers["x-should-retry"] == "true"
    assert (limited.value.code, limited.value.error.data["code"]) == (-32029, "mcp_rpm_exceeded")
    assert upstream_b.calls == 3 and not other_server.is_error
    assert server.runtime.mcp is not None and server.call(server.runtime.mcp.audit.flush())
    rows = await table_rows(server.settings.database_url, mcp_calls)
    assert [r["outcome"] for r in rows if r["server"] == "bank"].count("rate_limited") == 2


async def test_the_state_backend_down_fails_closed(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream, redis_prefix: str) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b, caller_rpm=3), state_backend="redis",
                           redis_url="redis://127.0.0.1:1/0", redis_prefix=redis_prefix)
    async with hearth_client(server.base_url) as client:
        with pytest.raises(MCPError) as busy:
            await client.call_tool("bank__echo", {"text": "x"})
        unlimited = await client.call_tool("files__echo", {"text": "x"})  # no limit there: nothing to count
    assert busy.value.error.data["code"] == "state_backend_unavailable"
    assert upstream_b.calls == 0 and not unlimited.is_error
