"""OpenTelemetry traces (docs/operations.md "Traces"), recorded with the SDK's in-memory exporter against real
Hearth servers and a fake upstream over HTTP: request → call → attempt spans under the caller's
``traceparent``, one attempt span per endpoint tried, a task's span linked to the request that submitted it,
upstream propagation only when the operator turns it on, and nothing at all — not even an import of
OpenTelemetry — when tracing is not configured."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from hearth.observability import tracing
from hearth.observability.trace_middleware import TraceMiddleware
from hearth.settings import Settings
from hearth.testing.fake_upstream import FakeBehavior
from tests.support import ADMIN, AUTH, REPO_ROOT, chat_body, gateway_registry
from tests.tasks.api_helpers import TASKS, finished

CALLER_TRACE = "0af7651916cd43dd8448eb211c80319c"
CALLER_SPAN = "b7ad6b7169203331"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
SECRET_PROMPT = "the launch code is 7-4-1-9"


def _ep(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", **extra}


def _start(propagate_upstream: bool = False) -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    tracing.start_tracing(Settings(otel_propagate_upstream=propagate_upstream), exporter=exporter)
    return exporter


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """Tracing on, into memory (started before the server, which finds it running); off again afterwards."""
    yield _start()
    tracing.stop_tracing()


@pytest.fixture
def propagating() -> Iterator[InMemorySpanExporter]:
    yield _start(propagate_upstream=True)
    tracing.stop_tracing()


async def _ended(exporter: InMemorySpanExporter, name: str, count: int = 1,
                 within_s: float = 10.0) -> list[ReadableSpan]:
    """The finished spans called ``name`` once there are ``count`` of them (a request's span ends after the
    client has its answer: the middleware closes it when the ASGI call returns)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + within_s
    while True:
        found = [s for s in exporter.get_finished_spans() if s.name == name]
        if len(found) >= count:
            return found
        names = [s.name for s in exporter.get_finished_spans()]
        assert loop.time() < until, f"{len(found)} span(s) {name!r}; have {names}"
        await asyncio.sleep(0.01)


def _hex(value: int, width: int) -> str:
    return f"{value:0{width}x}"


def _child_of(span: ReadableSpan, parent: ReadableSpan) -> bool:
    assert span.parent is not None and span.context is not None and parent.context is not None
    return span.parent.span_id == parent.context.span_id and span.context.trace_id == parent.context.trace_id


def _all_attribute_values(exporter: InMemorySpanExporter) -> list[str]:
    return [str(v) for s in exporter.get_finished_spans() for v in (s.attributes or {}).values()]


async def test_a_chat_request_with_a_traceparent_makes_request_call_and_attempt_spans_in_the_callers_trace(
        spans, fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(SECRET_PROMPT),
                        headers={**AUTH, "traceparent": TRACEPARENT})
    assert r.status_code == 200, r.text
    [request] = await _ended(spans, "POST /v1/chat/completions")
    [call] = await _ended(spans, "hearth.call")
    [attempt] = await _ended(spans, "hearth.attempt")
    assert request.kind == SpanKind.SERVER and attempt.kind == SpanKind.CLIENT
    assert request.context is not None and request.parent is not None
    assert _hex(request.context.trace_id, 32) == CALLER_TRACE  # the caller's trace goes on
    assert _hex(request.parent.span_id, 16) == CALLER_SPAN and request.parent.is_remote
    assert _child_of(call, request) and _child_of(attempt, call)
    assert request.attributes is not None and call.attributes is not None and attempt.attributes is not None
    assert request.attributes["http.route"] == "/v1/chat/completions"
    assert request.attributes["http.response.status_code"] == 200
    assert request.attributes["hearth.request_id"] == r.headers["x-request-id"]
    assert call.attributes["gen_ai.request.model"] == "m" and call.attributes["hearth.caller"] == "tester"
    assert call.attributes["hearth.status"] == 200 and call.attributes["hearth.attempts"] == 1
    assert call.attributes["gen_ai.usage.output_tokens"] > 0
    assert dict(attempt.attributes) == {"hearth.endpoint": "a", "hearth.attempt": 1, "gen_ai.request.model": "m",
                                        "gen_ai.provider.name": "openai", "http.response.status_code": 200}
    assert call.status.status_code == StatusCode.UNSET
    values = _all_attribute_values(spans)  # bounded attributes: no prompt text, no key
    assert not [v for v in values if "launch code" in v or "sk-key" in v or "test-key" in v]
    # propagation is off by default: the provider sees no trace context (neither Hearth's nor the caller's)
    assert "traceparent" not in {k.lower() for k in fake.stats.last_headers}


async def test_a_failover_records_one_attempt_span_per_endpoint_tried_under_one_call(spans, fake, fake2,
                                                                                    hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url, priority=0),
                                             _ep("b", fake2.base_url, priority=1)]))
    fake.script(FakeBehavior(status=429, retry_after=30))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200 and r.headers["x-hearth-attempts"] == "2", r.text
    [request] = await _ended(spans, "POST /v1/chat/completions")
    [call] = await _ended(spans, "hearth.call")
    attempts = sorted(await _ended(spans, "hearth.attempt", 2), key=lambda s: s.start_time or 0)
    assert request.parent is None  # no traceparent: a trace of its own
    assert all(_child_of(a, call) for a in attempts) and _child_of(call, request)
    first, second = (a.attributes or {} for a in attempts)
    assert (first["hearth.endpoint"], first["hearth.attempt"], first["http.response.status_code"],
            first["hearth.error_code"]) == ("a", 1, 429, "upstream_rate_limited")
    assert attempts[0].status.status_code == StatusCode.ERROR
    assert (second["hearth.endpoint"], second["hearth.attempt"], second["http.response.status_code"]) == ("b", 2, 200)
    assert "hearth.error_code" not in second and attempts[1].status.status_code == StatusCode.UNSET
    assert (call.attributes or {})["hearth.attempts"] == 2 and (call.attributes or {})["hearth.endpoint"] == "b"


async def test_a_stream_keeps_its_call_and_attempt_open_until_the_last_chunk(spans, fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    async with http.stream("POST", server.base_url + "/v1/chat/completions", headers=AUTH,
                           json=chat_body(stream=True)) as r:
        assert r.status_code == 200
        body = b"".join([chunk async for chunk in r.aiter_bytes()])
    assert body.endswith(b"data: [DONE]\n\n")
    [request] = await _ended(spans, "POST /v1/chat/completions")
    [call] = await _ended(spans, "hearth.call")
    [attempt] = await _ended(spans, "hearth.attempt")
    assert _child_of(call, request) and _child_of(attempt, call)
    assert (call.attributes or {})["hearth.stream"] is True
    assert call.end_time is not None and request.end_time is not None and attempt.end_time is not None
    assert attempt.end_time <= call.end_time <= request.end_time


async def test_a_task_span_links_to_the_request_that_submitted_it_and_parents_the_tasks_calls(
        spans, fake, hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), task_poll_s=0.1, task_reap_s=0.2)
    r = await http.post(server.base_url + TASKS, headers={**AUTH, "traceparent": TRACEPARENT},
                        json={"task_type": "summarize_async", "payload": {"text": "Hearth runs long jobs. "
                                                                          "They survive crashes.", "model": "m"}})
    assert r.status_code == 202, r.text
    task_id = r.json()["data"]["task_id"]
    assert (await finished(http, server, task_id))["state"] == "succeeded"
    [submit] = await _ended(spans, f"POST {TASKS}")
    [task] = await _ended(spans, "task summarize_async")
    assert submit.context is not None and task.context is not None
    assert task.kind == SpanKind.CONSUMER and task.parent is None  # its own trace, run whenever a worker is free
    [link] = task.links
    assert (link.context.trace_id, link.context.span_id) == (submit.context.trace_id, submit.context.span_id)
    assert _hex(link.context.trace_id, 32) == CALLER_TRACE
    attrs = task.attributes or {}
    assert (attrs["hearth.task.id"], attrs["hearth.task.type"], attrs["hearth.task.attempt"],
            attrs["hearth.task.outcome"]) == (task_id, "summarize_async", 1, "succeeded")
    calls = await _ended(spans, "hearth.call")
    assert calls and all(_child_of(c, task) for c in calls)  # the capability's gateway calls run under the task
    assert {(c.attributes or {}).get("hearth.task_id") for c in calls} == {task_id}
    # a FastAPI route's span is named after its template, never the raw path with the id in it
    assert (await http.get(f"{server.base_url}{TASKS}/{task_id}", headers=AUTH)).status_code == 200
    assert await _ended(spans, f"GET {TASKS}/{{task_id}}")
    assert not [s for s in spans.get_finished_spans() if task_id in s.name]
    assert (await http.get(f"{server.base_url}/no/such/{task_id}", headers=AUTH)).status_code == 404
    [unmatched] = await _ended(spans, "GET")  # no route: named by its method alone
    assert "http.route" not in (unmatched.attributes or {})
    assert (unmatched.attributes or {})["http.response.status_code"] == 404


async def test_upstream_gets_the_attempts_traceparent_only_when_propagation_is_on(propagating, fake,
                                                                                   hearth_server, http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "traceparent": TRACEPARENT})
    assert r.status_code == 200, r.text
    [attempt] = await _ended(propagating, "hearth.attempt")
    assert attempt.context is not None
    sent = {k.lower(): v for k, v in fake.stats.last_headers.items()}["traceparent"]
    assert sent == f"00-{CALLER_TRACE}-{_hex(attempt.context.span_id, 16)}-01"


async def test_nothing_is_traced_when_tracing_is_not_configured(fake, hearth_server, http):
    assert tracing.active is None and tracing.configured_endpoint(Settings()) is None
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]))
    assert not isinstance(server.asgi.app, TraceMiddleware)  # not even installed
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "traceparent": TRACEPARENT})
    assert r.status_code == 200
    assert "traceparent" not in {k.lower() for k in fake.stats.last_headers}
    assert tracing.current_traceparent() is None


def test_without_configuration_a_serving_process_never_imports_opentelemetry(tmp_path):
    """In a fresh interpreter (this one has imported the SDK for the tests above): a server starts, answers a
    chat and a task submission, stops — and Hearth imported no OpenTelemetry module: neither the SDK nor the
    exporter, nor any API module beyond those FastAPI itself imports (it depends on ``opentelemetry-api`` for
    its own telemetry, which Hearth turns off)."""
    script = textwrap.dedent(f"""
        import asyncio, sys
        import httpx
        import hearth.app, hearth.runtime, hearth.observability.tracing
        before = {{m for m in sys.modules if m.startswith("opentelemetry")}}
        from hearth.settings import Settings
        from hearth.testing.fake_upstream import FakeUpstream
        from hearth.testing.server_thread import HearthServerThread
        from tests.support import AUTH, MASTER_KEY, chat_body, gateway_registry, write_config

        fake = FakeUpstream()
        fake.start_in_thread()
        reg = gateway_registry([{{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up", "api_key": "sk-abcdefgh"}}])
        config = write_config(__import__("pathlib").Path({str(tmp_path)!r}) / "h.yaml", reg)
        server = HearthServerThread(Settings(config=config, database_url="sqlite+aiosqlite:///{tmp_path}/h.db",
                                             master_key=MASTER_KEY)).start()
        try:
            with httpx.Client(timeout=30) as c:
                assert c.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                              headers={{**AUTH, "traceparent": "{TRACEPARENT}"}}).status_code == 200
                assert c.post(server.base_url + "{TASKS}", headers=AUTH, json={{"task_type": "summarize_async",
                              "payload": {{"text": "One. Two."}}}}).status_code == 202
        finally:
            server.stop()
            fake.stop_thread()
        loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry") and m not in before)
        print("OTEL", loaded)
        assert not loaded, loaded
        assert not [m for m in before if m.startswith(("opentelemetry.sdk", "opentelemetry.exporter"))], before
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "HEARTH_OTEL"))}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "OTEL []" in done.stdout


def test_a_traceparent_is_read_only_when_it_is_valid():
    assert tracing.remote_parent(None) is None
    for bad in ("", "garbage", f"01-{CALLER_TRACE}-{CALLER_SPAN}-01", f"00-{'0' * 32}-{CALLER_SPAN}-01",
                f"00-{CALLER_TRACE}-{'0' * 16}-01", f"00-{CALLER_TRACE}-{CALLER_SPAN}-01-extra",
                f"00-{CALLER_TRACE[:-1]}-{CALLER_SPAN}-01"):
        assert tracing.remote_parent(bad) is None, bad
    parsed = tracing.remote_parent(TRACEPARENT.upper().encode())
    assert parsed is not None and parsed.is_remote and parsed.trace_flags == 1
    assert (_hex(parsed.trace_id, 32), _hex(parsed.span_id, 16)) == (CALLER_TRACE, CALLER_SPAN)


def test_tracing_is_configured_by_hearths_setting_or_the_standard_otel_variables(monkeypatch):
    for name in (*tracing.ENV_ENDPOINTS, "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    assert tracing.configured_endpoint(Settings()) is None
    assert tracing.configured_endpoint(Settings(otel_endpoint="http://127.0.0.1:4318")) == "http://127.0.0.1:4318"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4319")
    assert tracing.configured_endpoint(Settings()) == "http://127.0.0.1:4319"
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert tracing.configured_endpoint(Settings(otel_endpoint="http://127.0.0.1:4318")) is None


async def test_a_workflow_pass_has_a_span_with_its_ended_steps_and_its_tasks_link_to_it(spans, fake, hearth_server,
                                                                                     http):
    server = hearth_server(gateway_registry([_ep("a", fake.base_url)]), scheduler_interval_s=0.1, task_poll_s=0.1,
                           task_modules=["hearth.testing.task_types:register"])
    flow = {"name": "traced", "steps": [{"id": "echo", "kind": "task", "task_type": "test.echo",
                                         "input": {"x": 1}},
                                        {"id": "done", "kind": "join", "needs": ["echo"]}]}
    assert (await http.post(server.base_url + "/api/v1/workflows", json=flow, headers=ADMIN)).status_code in (200, 201)
    r = await http.post(f"{server.base_url}/api/v1/workflows/traced/runs", json={"caller": "tester", "input": {}},
                        headers=ADMIN)
    assert r.status_code == 201, r.text
    run_id = r.json()["data"]["id"]
    [start] = await _ended(spans, "POST /api/v1/workflows/{name}/runs")
    passes = await _ended(spans, "workflow pass")
    first = next(p for p in passes if p.parent is not None and _child_of(p, start))
    assert (first.attributes or {})["hearth.workflow.run_id"] == run_id
    [task] = await _ended(spans, "task test.echo")
    # the pass that submitted the task: the request's (or, if the scheduler got to the run first, the scheduler's)
    [link] = task.links
    submitter = next(p for p in await _ended(spans, "workflow pass") if p.context is not None
                     and p.context.span_id == link.context.span_id)
    assert (submitter.attributes or {})["hearth.workflow.run_id"] == run_id
    steps = await _ended(spans, "workflow step", 2)
    by_step = {(s.attributes or {})["hearth.workflow.step"]: s for s in steps}
    assert (by_step["echo"].attributes or {})["hearth.workflow.step_state"] == "succeeded"
    assert (by_step["echo"].attributes or {})["hearth.workflow.step_kind"] == "task"
    ending = next(p for p in await _ended(spans, "workflow pass") if _child_of(by_step["done"], p))
    assert (ending.attributes or {})["hearth.workflow.run_state"] == "succeeded"
