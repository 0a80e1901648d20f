"""Test servers run the HTTP protocol `hearth serve` runs, so in-process tests exercise it too."""

from __future__ import annotations

from typing import Any

from hearth.api.http_protocol import MAX_REQUEST_HEAD_BYTES
from tests.support import gateway_registry, send_raw_request


async def test_a_test_server_refuses_a_huge_request_head_with_431_as_hearth_serve_does(
        hearth_server: Any, fake: Any) -> None:
    server = hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                              "upstream_model": "up"}]))
    huge = b"x" * (MAX_REQUEST_HEAD_BYTES + 1)
    request = b"GET /healthz HTTP/1.1\r\nhost: t\r\nx-big: " + huge + b"\r\n\r\n"
    assert (await send_raw_request(server.port, request)).startswith(b"HTTP/1.1 431")
    ok = await send_raw_request(server.port, b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
    assert ok.startswith(b"HTTP/1.1 200")
