"""What the gateway does with the upstream's answers: SSE answers, its JSON-RPC errors, an upstream down."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from mcp import MCPError

from hearth.store.tables import mcp_calls
from hearth.testing.mcp_upstream import McpUpstream
from tests.mcp_gateway.support import TOKEN_A, TOKEN_B, ServerFactory, hearth_client, mcp_registry, table_rows


@pytest.fixture
def sse_upstream() -> Iterator[McpUpstream]:
    server = McpUpstream("S", token=TOKEN_B, json_response=False).start()
    yield server
    server.stop()


async def test_an_upstream_answering_with_event_streams_is_served(
        hearth_server: ServerFactory, upstream_a: McpUpstream, sse_upstream: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, sse_upstream))
    async with hearth_client(server.base_url) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        results = [await client.call_tool("bank__echo", {"text": str(i)}) for i in range(3)]
    assert {"bank__echo", "bank__transfer"} <= tools
    assert [r.content[0].text for r in results] == ["S:0", "S:1", "S:2"]
    assert len(sse_upstream.sessions) == 1


async def test_the_upstreams_json_rpc_error_and_tool_error_are_relayed_and_audited(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    registry = mcp_registry(upstream_a, upstream_b)
    registry["mcp_servers"][0]["rules"].append({"effect": "allow", "callers": ["tester"], "tools": ["refuse"]})
    server = hearth_server(registry)
    async with hearth_client(server.base_url) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("files__refuse", {"code": -32042, "message": "not today"})
        tool_error = await client.call_tool("files__echo", {"wrong": 1})  # the upstream's input check
    assert (refused.value.code, refused.value.error.message) == (-32042, "not today")
    assert refused.value.error.data["code"] == "mcp_upstream_error" and refused.value.error.data["server"] == "files"
    assert tool_error.is_error and "validation error" in tool_error.content[0].text
    assert server.runtime.mcp is not None and server.call(server.runtime.mcp.audit.flush())
    rows = await table_rows(server.settings.database_url, mcp_calls)
    assert [(r["tool"], r["outcome"], r["error_code"]) for r in sorted(rows, key=lambda r: r["id"])] == [
        ("files__refuse", "upstream_error", "mcp_upstream_error"), ("files__echo", "tool_error", None)]


async def test_an_upstream_down_fails_its_calls_and_leaves_the_others_listed(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b))
    upstream_b.stop()
    async with hearth_client(server.base_url) as client:
        tools = {t.name for t in (await client.list_tools()).tools}
        with pytest.raises(MCPError) as down:
            await client.call_tool("bank__echo", {"text": "x"})
        up = await client.call_tool("files__echo", {"text": "x"})
    assert tools == {"files__add", "files__echo", "files__read_file"}
    assert (down.value.code, down.value.error.data["code"]) == (-32010, "mcp_upstream_error")
    assert up.content[0].text == "A:x"
    assert TOKEN_A not in str(down.value.error)


async def test_a_wrong_upstream_credential_is_an_upstream_error_never_shown(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    registry = mcp_registry(upstream_a, upstream_b)
    registry["mcp_servers"][0]["credential"] = "not-the-right-token"
    server = hearth_server(registry)
    async with hearth_client(server.base_url) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("files__echo", {"text": "x"})
    assert refused.value.error.data["code"] == "mcp_upstream_error"
    assert upstream_a.refused >= 1 and "not-the-right-token" not in str(refused.value.error)


async def test_a_large_answer_arrives_whole(
        hearth_server: ServerFactory, upstream_a: McpUpstream, sse_upstream: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, sse_upstream))
    text = "x" * 300_000  # many TCP segments, in a JSON answer and in an SSE one
    async with hearth_client(server.base_url) as client:
        as_json = await client.call_tool("files__echo", {"text": text})
        as_events = await client.call_tool("bank__echo", {"text": text})
    assert as_json.content[0].text == f"A:{text}" and as_events.content[0].text == f"S:{text}"
