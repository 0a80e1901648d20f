"""The MCP gateway end to end: the official SDK's client → Hearth's /mcp → two real upstream MCP servers."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from mcp import MCPError

from hearth.mcp.server_store import apply_mcp_servers
from hearth.registry.config import RegistrySpec
from hearth.testing.mcp_upstream import McpUpstream
from tests.mcp_gateway.support import TOKEN_A, TOKEN_B, ServerFactory, hearth_client, mcp_registry


def _text(result: Any) -> str:
    return str(result.content[0].text)


async def test_sdk_lists_and_calls_tools_of_two_upstreams_with_hearths_credentials(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b))
    async with hearth_client(server.base_url) as client:
        listed = sorted(tool.name for tool in (await client.list_tools()).tools)
        a = await client.call_tool("files__echo", {"text": "hi"})
        b = await client.call_tool("bank__echo", {"text": "hi"})
    assert listed == ["bank__echo", "bank__transfer", "files__add", "files__echo", "files__read_file"]
    assert (_text(a), _text(b)) == ("A:hi", "B:hi")
    # every request each upstream saw carried Hearth's credential for it, never the caller's key
    assert set(upstream_a.authorizations) == {f"Bearer {TOKEN_A}"}
    assert set(upstream_b.authorizations) == {f"Bearer {TOKEN_B}"}


async def test_a_denied_tool_is_not_listed_and_refused_when_called_directly(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b))
    async with hearth_client(server.base_url) as client:
        listed = {tool.name for tool in (await client.list_tools()).tools}
        with pytest.raises(MCPError) as denied:
            await client.call_tool("files__delete_file", {"path": "/srv/public/x"})
        with pytest.raises(MCPError) as unlisted:  # a tool no allow rule names: denied by default
            await client.call_tool("files__transfer", {"amount": 1, "to": "bob"})
    assert "files__delete_file" not in listed and "files__transfer" not in listed
    assert (denied.value.code, denied.value.error.data["code"]) == (-32003, "mcp_tool_denied")
    assert (unlisted.value.code, unlisted.value.error.data["code"]) == (-32003, "mcp_tool_denied")
    assert not any("deleted" in str(a) for a in upstream_a.authorizations)
    assert upstream_a.calls == 0  # neither refused call reached the upstream


ARGUMENT_CASES: list[tuple[str, dict[str, Any], bool]] = [
    ("files__read_file", {"path": "/srv/public/report.txt"}, True),
    ("files__read_file", {"path": "/srv/public/../secret/keys"}, False),
    ("files__read_file", {"path": "/etc/passwd"}, False),
    ("files__read_file", {}, False),
    ("bank__transfer", {"amount": 100, "to": "bob"}, True),
    ("bank__transfer", {"amount": 100.5, "to": "bob"}, False),
    ("bank__transfer", {"amount": "50", "to": "bob"}, False),
    ("bank__transfer", {"amount": True, "to": "bob"}, False),
    ("bank__transfer", {"amount": 5, "to": "mallory"}, False),
]


async def test_argument_rules_allow_and_refuse_values(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b))  # one server for every case: starting one costs
    async with hearth_client(server.base_url) as client:
        for tool, arguments, allowed in ARGUMENT_CASES:
            if allowed:
                assert not (await client.call_tool(tool, arguments)).is_error, (tool, arguments)
                continue
            with pytest.raises(MCPError) as refused:
                await client.call_tool(tool, arguments)
            assert refused.value.error.data["code"] == "mcp_tool_denied", (tool, arguments)
            assert "argument" in refused.value.error.message, (tool, arguments)
    assert upstream_a.calls == upstream_b.calls == 1  # only the two allowed calls reached an upstream


async def test_upstream_sessions_stay_one_per_server_over_100_calls(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b))
    async with hearth_client(server.base_url) as client:
        await client.call_tool("files__echo", {"text": "first"})
        await client.call_tool("bank__echo", {"text": "first"})
        before = (len(upstream_a.sessions), len(upstream_b.sessions))
        for i in range(100):
            await client.call_tool("files__add" if i % 2 else "bank__echo", {"a": i, "b": 1} if i % 2 else
                                   {"text": str(i)})
    assert before == (1, 1)
    assert (len(upstream_a.sessions), len(upstream_b.sessions)) == (1, 1)
    assert (upstream_a.calls, upstream_b.calls) == (51, 51)
    assert server.runtime.mcp is not None and server.runtime.mcp.sessions_opened() == {"bank": 1, "files": 1}


async def test_a_session_the_upstream_dropped_is_made_again_once(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b))
    async with hearth_client(server.base_url) as client:
        await client.call_tool("files__echo", {"text": "one"})
        upstream_a.stop()  # the upstream restarts: it knows none of the sessions it handed out
        restarted = McpUpstream("A", token=TOKEN_A, port=upstream_a.port).start()
        try:
            after = await client.call_tool("files__echo", {"text": "two"})
            again = await client.call_tool("files__echo", {"text": "three"})
        finally:
            restarted.stop()
    assert (_text(after), _text(again)) == ("A:two", "A:three")
    assert len(restarted.sessions) == 1 and restarted.calls == 2
    assert server.runtime.mcp is not None and server.runtime.mcp.sessions_opened()["files"] == 2


async def test_a_caller_no_rule_names_gets_an_error_not_an_empty_tool_list(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b))
    async with hearth_client(server.base_url, {"Authorization": "Bearer other-key-4567"}) as client:
        with pytest.raises(MCPError) as none:
            await client.list_tools()
    assert (none.value.code, none.value.error.data["code"]) == (-32002, "mcp_no_tools")
    assert upstream_a.authorizations == upstream_b.authorizations == []  # not even asked


async def test_concurrent_first_calls_share_one_upstream_session(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    server = hearth_server(mcp_registry(upstream_a, upstream_b))
    async with hearth_client(server.base_url) as client:
        results = await asyncio.gather(*(client.call_tool("files__echo", {"text": str(i)}) for i in range(30)))
    assert sorted(_text(r) for r in results) == sorted(f"A:{i}" for i in range(30))
    assert len(upstream_a.sessions) == 1 and upstream_a.calls == 30


async def test_a_policy_change_applies_without_a_new_upstream_session(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> None:
    registry = mcp_registry(upstream_a, upstream_b)
    server = hearth_server(registry)
    rt = server.runtime
    assert rt.mcp is not None
    async with hearth_client(server.base_url) as client:
        await client.call_tool("files__add", {"a": 1, "b": 2})
        registry["mcp_servers"][0]["rules"].append({"effect": "deny", "callers": ["tester"], "tools": ["add"]})
        spec = RegistrySpec.model_validate(registry)
        server.call(apply_mcp_servers(rt.engine, spec.mcp_servers, rt.vault))
        server.call(rt.reload_registry())  # what the registry watcher does once it sees the new version
        with pytest.raises(MCPError) as denied:
            await client.call_tool("files__add", {"a": 1, "b": 2})
        still = await client.call_tool("files__echo", {"text": "x"})
    assert denied.value.error.data["code"] == "mcp_tool_denied" and _text(still) == "A:x"
    assert len(upstream_a.sessions) == 1 and rt.mcp.sessions_opened()["files"] == 1
