"""/mcp's steps 1 and 2 on the wire: authentication, then the JSON-RPC message, headers and protocol version."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hearth.auth.signing import signed_headers
from hearth.testing.mcp_upstream import McpUpstream
from tests.mcp_gateway.support import ServerFactory, mcp_registry
from tests.support import AUTH, SIGNING_KEY

JSON = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def _call(i: int = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "files__echo",
                                                                          "arguments": {"text": "x"}}}


@pytest.fixture
def hearth(hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream) -> Any:
    return hearth_server(mcp_registry(upstream_a, upstream_b))


MALFORMED: list[tuple[bytes, int, int, str]] = [
    (b"{not json", 400, -32700, "invalid_json"),
    (b'[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', 400, -32600, "invalid_request"),  # a batch
    (b'"ping"', 400, -32600, "invalid_request"),
    (b'{"jsonrpc": "1.0", "id": 1, "method": "ping"}', 400, -32600, "invalid_request"),
    (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', 400, -32600, "invalid_request"),
    (b'{"jsonrpc": "2.0", "id": 1}', 400, -32600, "invalid_request"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": [1]}', 400, -32600, "invalid_request"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": 5}}', 400, -32600,
     "invalid_request"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}', 400, -32600, "invalid_request"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "resources/list"}', 404, -32601, "mcp_method_not_found"),
    (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "nowhere__x"}}', 404, -32602,
     "mcp_tool_not_found"),
]


async def test_a_malformed_message_gets_a_json_rpc_protocol_error(hearth: Any, http: Any) -> None:
    for body, status, rpc_code, code in MALFORMED:
        r = await http.post(f"{hearth.base_url}/mcp", content=body, headers={**AUTH, **JSON})
        answer = r.json()
        assert r.status_code == status, body
        assert r.headers["content-type"].startswith("application/json"), body
        assert answer["jsonrpc"] == "2.0" and answer["error"]["code"] == rpc_code, body
        assert answer["error"]["data"]["code"] == code and answer["error"]["data"]["request_id"], body
        assert answer["id"] in (None, 1), body


async def test_authentication_comes_first_and_the_callers_key_is_not_forwarded(
        hearth: Any, http: Any, upstream_a: McpUpstream) -> None:
    url = f"{hearth.base_url}/mcp"
    missing = await http.post(url, content=b"{not json", headers=JSON)  # refused as unauthenticated, not malformed
    wrong = await http.post(url, json=_call(), headers={**JSON, "Authorization": "Bearer nope-nope-nope"})
    ok = await http.post(url, json=_call(), headers={**AUTH, **JSON, "Cookie": "s=caller-cookie"})
    assert (missing.status_code, missing.json()["error"]["code"]) == (401, -32001)
    assert (wrong.status_code, wrong.json()["error"]["data"]["code"]) == (401, "invalid_api_key")
    assert ok.status_code == 200 and ok.json()["result"]["content"][0]["text"] == "A:x"
    assert "test-key-123" not in str(upstream_a.authorizations)


async def test_protocol_version_header_and_content_type_are_checked(hearth: Any, http: Any) -> None:
    url = f"{hearth.base_url}/mcp"
    unknown = await http.post(url, json=_call(), headers={**AUTH, **JSON, "MCP-Protocol-Version": "1999-01-01"})
    modern = await http.post(url, json=_call(), headers={**AUTH, **JSON, "MCP-Protocol-Version": "2026-07-28"})
    known = await http.post(url, json=_call(), headers={**AUTH, **JSON, "MCP-Protocol-Version": "2025-06-18"})
    text = await http.post(url, content=orjson.dumps(_call()), headers={**AUTH, "Content-Type": "text/plain"})
    assert (unknown.status_code, unknown.json()["error"]["data"]["code"]) == (400, "mcp_protocol_version_unsupported")
    assert unknown.json()["error"]["data"]["supported"] == ["2025-11-25", "2025-06-18", "2025-03-26"]
    assert modern.status_code == 400
    assert known.status_code == 200
    assert (text.status_code, text.json()["error"]["code"]) == (400, -32600)


async def test_initialize_negotiates_and_notifications_get_202(hearth: Any, http: Any) -> None:
    url = f"{hearth.base_url}/mcp"

    async def initialize(version: str) -> Any:
        return await http.post(url, headers={**AUTH, **JSON}, json={
            "jsonrpc": "2.0", "id": "init", "method": "initialize",
            "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})

    same, newer = await initialize("2025-06-18"), await initialize("2030-01-01")
    note = await http.post(url, headers={**AUTH, **JSON},
                           json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    get, delete = await http.get(url, headers=AUTH), await http.delete(url, headers=AUTH)
    assert same.json()["result"]["protocolVersion"] == "2025-06-18"
    assert newer.json()["result"]["protocolVersion"] == "2025-11-25"  # Hearth's latest; the client decides
    assert same.json()["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert "mcp-session-id" not in same.headers  # every message stands alone: any process can answer it
    assert (note.status_code, note.content) == (202, b"")
    assert (get.status_code, delete.status_code) == (405, 405)


async def test_a_signed_callers_nonce_is_claimed_once_on_every_kind_of_message(
        hearth_server: ServerFactory, upstream_a: McpUpstream, upstream_b: McpUpstream, http: Any) -> None:
    registry = mcp_registry(upstream_a, upstream_b)
    registry["callers"][0].update(signing_key=SIGNING_KEY, require_signature=True)
    server = hearth_server(registry)
    url = f"{server.base_url}/mcp"
    for message in (_call(), {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}):
        body = orjson.dumps(message)
        headers = {**AUTH, **JSON, **signed_headers(SIGNING_KEY, "POST", url, body)}
        first = await http.post(url, content=body, headers=headers)
        replay = await http.post(url, content=body, headers=headers)
        assert first.status_code == 200 and "result" in first.json()
        assert (replay.status_code, replay.json()["error"]["data"]["code"]) == (401, "nonce_replayed")
    unsigned = await http.post(url, json=_call(), headers={**AUTH, **JSON})
    assert (unsigned.status_code, unsigned.json()["error"]["data"]["code"]) == (401, "signature_required")
    assert upstream_a.calls == 1
