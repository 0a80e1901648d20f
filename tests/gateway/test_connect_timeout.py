"""Connect timeout is its own short class: a host that never accepts fails over at once, not after the
endpoint's whole timeout."""

from __future__ import annotations

import time

from tests.support import AUTH, chat_body, gateway_registry


async def test_a_host_that_never_accepts_fails_over_within_the_connect_timeout(
        never_accepting, fake, hearth_server, http):
    registry = gateway_registry([
        {"name": "dead", "provider": "openai-like", "base_url": f"http://127.0.0.1:{never_accepting}/v1",
         "upstream_model": "up", "priority": 0, "timeout_s": 30},
        {"name": "live", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up",
         "priority": 1}])
    server = hearth_server(registry, connect_timeout_s=0.3)
    started = time.monotonic()
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    elapsed = time.monotonic() - started
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-endpoint"] == "live" and r.headers["x-hearth-attempts"] == "2"
    assert elapsed < 3.0  # the connect class (0.3 s), not the endpoint's 30 s timeout
