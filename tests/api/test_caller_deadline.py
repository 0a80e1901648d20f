"""The caller's own deadline and attempt budget narrow the server's — and can never widen them."""

from __future__ import annotations

import time
from typing import Any

from tests.support import AUTH, chat_body, gateway_registry


def _pool(fake: Any, n: int = 3) -> dict[str, Any]:
    return gateway_registry([{"name": f"e{i}", "provider": "openai-like", "base_url": fake.base_url,
                              "upstream_model": "up", "max_concurrency": 10} for i in range(n)])


async def test_a_short_caller_timeout_ends_the_call_early(fake, hearth_server, http):
    server = hearth_server(_pool(fake, 1))
    fake.set_defaults(latency_ms=3000)
    started = time.monotonic()
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "X-Hearth-Timeout-Ms": "300"})
    assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout"
    assert time.monotonic() - started < 2.0


async def test_the_sdk_read_timeout_header_narrows_the_deadline(fake, hearth_server, http):
    server = hearth_server(_pool(fake, 1))
    fake.set_defaults(latency_ms=3000)
    started = time.monotonic()
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "X-Stainless-Read-Timeout": "0.4"})
    assert r.status_code == 504
    assert time.monotonic() - started < 2.0


async def test_a_caller_cannot_widen_the_servers_deadline(fake, hearth_server, http):
    server = hearth_server(_pool(fake, 1), request_timeout_s=0.5)
    fake.set_defaults(latency_ms=3000)
    started = time.monotonic()
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "X-Hearth-Timeout-Ms": "600000"})
    assert r.status_code == 504
    assert time.monotonic() - started < 2.0


async def test_the_callers_attempt_budget_narrows_failover(fake, hearth_server, http):
    server = hearth_server(_pool(fake))
    fake.set_defaults(status=500)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "X-Hearth-Max-Attempts": "1"})
    assert r.status_code == 502
    assert fake.stats.requests == 1
    fake.reset()
    fake.set_defaults(status=500)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "X-Hearth-Max-Attempts": "10"})  # more than the server's 3
    assert r.status_code == 502
    assert fake.stats.requests == 3


async def test_malformed_limit_headers_are_a_clear_400(fake, hearth_server, http):
    server = hearth_server(_pool(fake, 1))
    for header, value in (("X-Hearth-Timeout-Ms", "soon"), ("X-Hearth-Timeout-Ms", "0"),
                          ("X-Hearth-Max-Attempts", "0"), ("X-Hearth-Max-Attempts", "11")):
        r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                            headers={**AUTH, header: value})
        assert r.status_code == 400, (header, value)
        assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"]["param"] == header
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "X-Stainless-Read-Timeout": "nonsense"})
    assert r.status_code == 200  # the SDK's own header is never a reason to refuse
