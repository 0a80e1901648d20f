"""The test harness's server thread: its prompt stop is still uvicorn's graceful one — a request in flight
gets its answer before the server goes, and nothing is accepted afterwards."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support import AUTH, chat_body, gateway_registry


async def test_stop_lets_a_request_in_flight_finish_and_then_refuses_connections(fake: Any, hearth_server: Any,
                                                                                  http: httpx.AsyncClient) -> None:
    server = hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                              "upstream_model": "up"}]), embedded_worker=False)
    fake.set_defaults(latency_ms=300)
    call = asyncio.create_task(http.post(server.base_url + "/v1/chat/completions", headers=AUTH, json=chat_body()))
    for _ in range(500):
        if fake.stats.in_flight:
            break
        await asyncio.sleep(0.005)
    assert fake.stats.in_flight == 1, "the call never reached the upstream"
    await asyncio.to_thread(server.stop)
    answer = await call
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"]
    try:
        late = await http.get(server.base_url + "/healthz")
    except httpx.TransportError:
        pass
    else:
        raise AssertionError(f"a stopped server answered {late.status_code}")
