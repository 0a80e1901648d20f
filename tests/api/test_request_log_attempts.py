"""Each request log lists its attempts: endpoint, status, error code and latency, in the order tried."""

from __future__ import annotations

import math
import socket
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import select

from hearth.observability.request_log import (
    MAX_ATTEMPT_RECORDS,
    RequestLogRecord,
    RequestLogWriter,
    bound_record,
)
from hearth.store.db import create_engine, migrate
from hearth.store.tables import request_logs
from hearth.testing.fake_upstream import FakeBehavior
from tests.support import ADMIN, AUTH, chat_body, gateway_registry, request_log_row


def _ep(name: str, base_url: str, priority: int) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", "priority": priority}



def _shape(attempts: list[dict[str, Any]]) -> list[tuple[str, int, str | None]]:
    for a in attempts:
        assert set(a) == {"endpoint", "status", "error_code", "latency_ms"}
        assert isinstance(a["latency_ms"], float) and 0 <= a["latency_ms"] < 10_000
    return [(a["endpoint"], a["status"], a["error_code"]) for a in attempts]


def _closed_port() -> int:
    with socket.socket() as s:  # bound, never listening: connecting is refused
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_failover_lists_every_attempt_in_order(database_url, fake, fake2, hearth_server, http):
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, 0), _ep("b", dead, 1),
                                             _ep("c", fake2.base_url, 2)]), database_url=database_url)
    fake.script(FakeBehavior(status=503, latency_ms=30))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "c"
    row = await request_log_row(http, server, r.headers["x-request-id"])
    assert row["attempts"] == 3
    assert _shape(row["attempt_log"]) == [("a", 503, "upstream_error"), ("b", 502, "upstream_error"),
                                          ("c", 200, None)]
    assert row["attempt_log"][0]["latency_ms"] >= 30  # the 503 took its latency


async def test_rate_limited_and_rejected_attempts_say_so(fake, fake2, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, 0), _ep("b", fake2.base_url, 1)]))
    fake.script(FakeBehavior(status=429, retry_after=30))
    fake2.script(FakeBehavior(status=400))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 400
    row = await request_log_row(http, server, r.headers["x-request-id"])
    assert _shape(row["attempt_log"]) == [("a", 429, "upstream_rate_limited"), ("b", 400, "upstream_rejected_request")]


async def test_a_stream_lists_its_attempts_with_how_the_stream_ended(fake, fake2, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, 0), _ep("b", fake2.base_url, 1)]))
    fake.script(FakeBehavior(status=500))
    fake2.set_defaults(error_after_chunks=2)
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as r:
        await r.aread()
        rid = r.headers["x-request-id"]
    row = await request_log_row(http, server, rid)
    assert _shape(row["attempt_log"]) == [("a", 500, "upstream_error"), ("b", 502, "upstream_stream_error")]


async def test_a_call_refused_before_any_attempt_lists_none(fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, 0)]))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(model="nope"), headers=AUTH)
    assert r.status_code == 404
    assert (await request_log_row(http, server, r.headers["x-request-id"]))["attempt_log"] == []


def _record(**over: Any) -> RequestLogRecord:
    values: dict[str, Any] = dict(
        request_id="req-1", created_at=datetime.now(UTC), caller="tester", route="chat", model="m",
        endpoint="a", upstream_model="up", stream=False, status=200, error_code=None, attempts=1,
        prompt_tokens=10, completion_tokens=20, usage_estimated=False, cost=0.001, latency_ms=12.5,
        ttft_ms=None, end_user="u")
    values.update(over)
    return RequestLogRecord(**values)


def test_the_attempt_list_is_bounded_and_made_valid_before_it_is_queued() -> None:
    hostile: list[Any] = [{"endpoint": "e" * 1000, "status": 2**40, "error_code": "c\x00" * 100,
                           "latency_ms": math.nan},
                          {"endpoint": None, "status": "500", "error_code": 7, "latency_ms": -1.0},
                          "not a dict"]
    hostile += [{"endpoint": f"x{i}", "status": 502, "error_code": None, "latency_ms": 1.0} for i in range(100)]
    r = bound_record(_record(attempt_log=hostile))
    assert r.attempt_log is not None and len(r.attempt_log) == MAX_ATTEMPT_RECORDS
    first, second = r.attempt_log[0], r.attempt_log[1]
    assert first == {"endpoint": "e" * 128, "status": 999, "error_code": ("c\ufffd" * 32), "latency_ms": 0.0}
    assert second == {"endpoint": "", "status": 0, "error_code": None, "latency_ms": 0.0}
    assert r.attempt_log[2]["endpoint"] == "x0"  # the non-dict entry is dropped
    assert bound_record(_record(attempt_log="junk")).attempt_log is None


@pytest.mark.parametrize("size", [1, 200])
async def test_a_hostile_attempt_list_is_written_not_dead_lettered(size, database_url) -> None:
    engine = create_engine(database_url)
    try:
        await migrate(engine)
        writer = RequestLogWriter(engine)
        writer.submit(_record(attempt_log=[{"endpoint": "\ud800" * 300, "status": -5, "error_code": "z" * 500,
                                            "latency_ms": math.inf}] * size))
        assert await writer.flush()
        assert (writer.written, writer.dead) == (1, 0)
        async with engine.connect() as conn:
            stored = (await conn.execute(select(request_logs.c.attempt_log))).scalar_one()
        assert len(stored) == min(size, MAX_ATTEMPT_RECORDS)
        assert stored[0]["status"] == 0 and len(stored[0]["endpoint"]) == 128 and len(stored[0]["error_code"]) == 64
    finally:
        await engine.dispose()


async def test_the_openapi_document_describes_the_rows_the_route_sends(fake, hearth_server, http):
    from hearth.api.request_log_schemas import RequestLogEnvelope, RequestLogItem

    server = hearth_server(gateway_registry([_ep("a", fake.base_url, 0)]))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    await request_log_row(http, server, r.headers["x-request-id"])
    answer = (await http.get(server.base_url + "/api/v1/request-logs", headers=ADMIN)).json()
    page = RequestLogEnvelope.model_validate(answer).data
    assert page.items[0].attempt_log is not None and page.items[0].attempt_log[0].endpoint == "a"
    assert set(answer["data"]["items"][0]) == set(RequestLogItem.model_fields)  # every column documented
    doc = (await http.get(server.base_url + "/openapi.json")).json()
    ok = doc["paths"]["/api/v1/request-logs"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok["$ref"].endswith("/RequestLogEnvelope")
    assert "attempt_log" in doc["components"]["schemas"]["RequestLogItem"]["properties"]
