"""``GET /metrics`` over real HTTP after real traffic through the fake upstream: names, types, label sets,
bounded label values (nothing from request input), the bearer token, and the cached cluster gauges."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hearth.observability import metrics
from hearth.testing.fake_upstream import FakeBehavior
from tests.support import AUTH, budget_registry, chat_body, gateway_registry

# Every label any Hearth metric may carry: bounded enums or configured names (and `le` of histograms).
ALLOWED_LABELS = {"route", "model", "status_class", "reason", "endpoint", "outcome", "kind", "queue", "state",
                  "severity", "writer", "budget", "caller", "quota_group", "le"}

# name → (type, label names) of the metrics the docs promise (docs/operations.md, "Metrics").
EXPECTED: dict[str, tuple[str, set[str]]] = {
    "hearth_gateway_requests": ("counter", {"route", "model", "status_class"}),
    "hearth_gateway_request_duration_seconds": ("histogram", {"route", "model"}),
    "hearth_gateway_time_to_first_token_seconds": ("histogram", {"model"}),
    "hearth_gateway_admission_refusals": ("counter", {"reason"}),
    "hearth_gateway_failovers": ("counter", {"model"}),
    "hearth_gateway_tokens": ("counter", {"model", "kind"}),
    "hearth_gateway_cost": ("counter", {"model"}),
    "hearth_endpoint_attempts": ("counter", {"endpoint", "outcome"}),
    "hearth_gateway_in_flight": ("gauge", set()),
    "hearth_endpoint_breaker_state": ("gauge", {"endpoint"}),
    "hearth_endpoint_cooldown_seconds": ("gauge", {"endpoint"}),
    "hearth_endpoint_attempts_in_flight": ("gauge", {"endpoint"}),
    "hearth_writer_backlog": ("gauge", {"writer"}),
    "hearth_writer_dropped_rows": ("gauge", {"writer"}),
    "hearth_writer_dead_rows": ("gauge", {"writer"}),
    "hearth_writer_written_rows": ("gauge", {"writer"}),
    "hearth_database_pool_connections_in_use": ("gauge", set()),
    "hearth_database_pool_size": ("gauge", set()),
    "hearth_database_up": ("gauge", set()),
    "hearth_database_round_trip_seconds": ("gauge", set()),
    "hearth_state_backend_up": ("gauge", set()),
    "hearth_state_backend_round_trip_seconds": ("gauge", set()),
    "hearth_endpoint_usage": ("gauge", {"endpoint", "kind"}),
    "hearth_endpoint_limit": ("gauge", {"endpoint", "kind"}),
    "hearth_endpoint_shared_cooldown_seconds": ("gauge", {"endpoint"}),
    "hearth_endpoint_enabled": ("gauge", {"endpoint"}),
    "hearth_budget_remaining_ratio": ("gauge", {"budget", "caller"}),
    "hearth_task_queue_depth": ("gauge", {"queue", "state"}),
    "hearth_tasks_running": ("gauge", {"queue"}),
    "hearth_task_queue_oldest_due_seconds": ("gauge", {"queue"}),
    "hearth_dead_letters_open": ("gauge", {"severity"}),
    "hearth_callback_backlog": ("gauge", {"state"}),
    "hearth_workflow_runs": ("gauge", {"state"}),
    "hearth_review_items_waiting": ("gauge", {"state"}),
    "hearth_review_oldest_waiting_seconds": ("gauge", set()),
    "hearth_metrics_collect_seconds": ("gauge", set()),
}
ALLOWED_LABELS |= {"server"}  # the MCP gateway's upstream servers (configured names)
EXPECTED.update({"hearth_mcp_calls": ("counter", {"server", "outcome"}),
                 "hearth_mcp_call_duration_seconds": ("histogram", {"server"})})


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _value(families: dict[str, Any], name: str, sample: str | None = None, **labels: str) -> float:
    family = families[name]
    wanted = sample or name
    found = [s.value for s in family.samples if s.name == wanted and all(s.labels.get(k) == v
                                                                       for k, v in labels.items())]
    return float(sum(found))


def _two_endpoints(fake: Any, fake2: Any) -> dict[str, Any]:
    registry = budget_registry(fake, limit=1000.0)
    registry["endpoints"].append({"name": "b", "provider": "openai-like", "base_url": fake2.base_url,
                                  "upstream_model": "up", "priority": 1, "rpm": 600})
    registry["endpoints"][0]["priority"] = 0
    registry["models"][0]["endpoints"] = ["a", "b"]
    return registry


async def test_a_scrape_after_traffic_has_every_metric_with_its_type_and_labels(database_url, fake, fake2,
                                                                                 hearth_server, http):
    server = hearth_server(_two_endpoints(fake, fake2), database_url=database_url, metrics_cache_s=0.01)
    before = _families((await http.get(server.base_url + "/metrics")).text)
    url = server.base_url + "/v1/chat/completions"
    for _ in range(3):
        assert (await http.post(url, json=chat_body(), headers=AUTH)).status_code == 200
    for _ in range(2):
        r = await http.post(url, json=chat_body(stream=True), headers=AUTH)
        assert r.status_code == 200 and "[DONE]" in r.text
    fake.script(FakeBehavior(status=429, retry_after=30))  # a cools down, b answers: a failover
    r = await http.post(url, json=chat_body(), headers=AUTH)
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
    assert (await http.post(url, json=chat_body(model="no-such-model"), headers=AUTH)).status_code == 404

    r = await http.get(server.base_url + "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = _families(r.text)
    for name, (kind, labels) in EXPECTED.items():
        assert name in families, name
        family = families[name]
        assert family.type == kind, name
        assert family.documentation, name
        for s in family.samples:
            assert set(s.labels) - {"le"} == labels, (name, s.labels)
    for name, family in families.items():
        assert name.startswith("hearth_"), name
        for s in family.samples:
            assert set(s.labels) <= ALLOWED_LABELS, (name, s.labels)

    def delta(name: str, sample: str | None = None, **labels: str) -> float:
        return _value(families, name, sample, **labels) - (
            _value(before, name, sample, **labels) if name in before else 0.0)

    assert delta("hearth_gateway_requests", "hearth_gateway_requests_total", route="chat", model="m",
                 status_class="2xx") == 6
    assert delta("hearth_gateway_requests", "hearth_gateway_requests_total", route="chat", model="unknown",
                 status_class="4xx") == 1
    assert delta("hearth_gateway_request_duration_seconds", "hearth_gateway_request_duration_seconds_count",
                 route="chat", model="m") == 6
    assert delta("hearth_gateway_time_to_first_token_seconds", "hearth_gateway_time_to_first_token_seconds_count",
                 model="m") == 2
    assert delta("hearth_gateway_failovers", "hearth_gateway_failovers_total", model="m") == 1
    assert delta("hearth_gateway_tokens", "hearth_gateway_tokens_total", model="m", kind="completion") == 6 * 20
    assert delta("hearth_gateway_cost", "hearth_gateway_cost_total", model="m") > 0
    assert delta("hearth_endpoint_attempts", "hearth_endpoint_attempts_total", endpoint="a",
                 outcome="upstream_rate_limited") == 1
    assert delta("hearth_endpoint_attempts", "hearth_endpoint_attempts_total", endpoint="b", outcome="ok") == 1
    assert _value(families, "hearth_endpoint_cooldown_seconds", endpoint="a") > 20
    assert _value(families, "hearth_endpoint_breaker_state", endpoint="a") == 0
    assert _value(families, "hearth_endpoint_limit", endpoint="a", kind="concurrency") == 1000
    assert _value(families, "hearth_endpoint_limit", endpoint="b", kind="rpm") == 600
    assert _value(families, "hearth_endpoint_usage", endpoint="b", kind="rpm") == 1
    assert _value(families, "hearth_endpoint_enabled", endpoint="a") == 1
    ratio = _value(families, "hearth_budget_remaining_ratio", budget="daily", caller="tester")
    assert 0 < ratio < 1  # six calls spent some of the daily 1000
    assert _value(families, "hearth_database_up") == 1 and _value(families, "hearth_state_backend_up") == 1
    queues = {s.labels["queue"] for s in families["hearth_task_queue_depth"].samples}
    assert queues == {"ai.default", "ai.summary", "ai.bill_extract", "documents.cpu"}  # the configured ones
    assert _value(families, "hearth_gateway_in_flight") == 0


async def test_refusals_are_counted_by_their_error_code(fake, hearth_server, http):
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    registry["callers"][0]["limits"] = {"caller": {"rpm": 1}}
    server = hearth_server(registry)
    url = server.base_url + "/v1/chat/completions"
    assert (await http.post(url, json=chat_body(), headers=AUTH)).status_code == 200
    before = _families((await http.get(server.base_url + "/metrics")).text)
    refused = await http.post(url, json=chat_body(), headers=AUTH)
    assert refused.status_code == 429
    code = refused.json()["error"]["code"]
    after = _families((await http.get(server.base_url + "/metrics")).text)
    name, sample = "hearth_gateway_admission_refusals", "hearth_gateway_admission_refusals_total"
    was = _value(before, name, sample, reason=code) if name in before else 0.0
    assert _value(after, name, sample, reason=code) == was + 1


async def test_no_label_takes_a_value_from_request_input(fake, hearth_server, http):
    server = hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                              "upstream_model": "up"}]))
    url = server.base_url + "/v1/chat/completions"
    marks = []
    for i in range(5):
        mark = uuid.uuid4().hex
        marks.append(mark)
        headers = {**AUTH, "X-Request-Id": f"rid-{mark}", "X-Hearth-User": f"user-{mark}",
                   "X-Hearth-Tenant": f"tenant-{mark}", "X-Hearth-Scene": f"scene-{mark}"}
        model = f"model-{mark}" if i % 2 else "m"
        body = chat_body(model=model, user=f"body-user-{mark}", stream=i == 4)
        r = await http.post(url, json=body, headers=headers)
        assert r.status_code in (200, 400, 404)
        r = await http.post(server.base_url + "/v1/embeddings", json={"model": f"emb-{mark}", "input": "x"},
                            headers=headers)
        assert r.status_code >= 400
    text = (await http.get(server.base_url + "/metrics")).text
    for mark in marks:
        assert mark not in text
    families = _families(text)
    assert _value(families, "hearth_gateway_requests", "hearth_gateway_requests_total", model="unknown") >= 6


async def test_the_metrics_token_guards_the_route(fake, hearth_server, http):
    server = hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                              "upstream_model": "up"}]), metrics_token="scrape-secret-42")
    url = server.base_url + "/metrics"
    missing = await http.get(url)
    assert missing.status_code == 401 and missing.json()["error"]["code"] == "metrics_token_required"
    assert "hearth_" not in missing.text
    assert (await http.get(url, headers={"Authorization": "Bearer wrong"})).status_code == 401
    ok = await http.get(url, headers={"Authorization": "Bearer scrape-secret-42"})
    assert ok.status_code == 200 and "hearth_gateway_in_flight" in ok.text


async def test_a_scrape_storm_reads_the_database_once_per_cache_period(fake, hearth_server, http):
    server = hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                              "upstream_model": "up"}]), metrics_cache_s=3600, embedded_worker=False)
    scrapes = [_families((await http.get(server.base_url + "/metrics")).text) for _ in range(20)]
    took = {_value(f, "hearth_metrics_collect_seconds") for f in scrapes}
    assert len(took) == 1  # one refresh served all twenty (its own duration, repeated)
    r = await http.post(server.base_url + "/api/v1/ai/tasks", headers=AUTH,
                        json={"task_type": "summarize_async", "payload": {"text": "hello " * 20}})
    assert r.status_code == 202
    again = _families((await http.get(server.base_url + "/metrics")).text)
    assert _value(again, "hearth_metrics_collect_seconds") in took  # still the cached figures:
    assert _value(again, "hearth_task_queue_depth") == 0  # the queued task is not seen before the period ends


async def test_a_capability_request_counts_once_as_capability_and_its_model_call_once(fake, hearth_server, http):
    server = hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                              "upstream_model": "up"}],
                                            prices=[{"model": "up", "input_per_1m": 1000.0, "output_per_1m": 1000.0}]))
    before = _families((await http.get(server.base_url + "/metrics")).text)
    r = await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH,
                        json={"text": "Hearth is a gateway. It governs calls.", "model": "m"})
    assert r.status_code == 200, r.text
    after = _families((await http.get(server.base_url + "/metrics")).text)
    cost = r.json()["data"]["cost"]

    def delta(name: str, sample: str, **labels: str) -> float:
        return _value(after, name, sample, **labels) - (_value(before, name, sample, **labels)
                                                        if name in before else 0.0)

    requests = ("hearth_gateway_requests", "hearth_gateway_requests_total")
    assert delta(*requests, route="capability", model="m", status_class="2xx") == 1
    assert delta(*requests, route="chat", model="m", status_class="2xx") == 1
    assert delta("hearth_gateway_cost", "hearth_gateway_cost_total", model="m") == pytest.approx(cost)  # not twice
    assert _value(after, "hearth_gateway_in_flight") == 0


def test_name_labels_are_capped_and_status_classes_bounded():
    names = metrics._Names()
    assert names.label(None) == "unknown" and names.label("") == "unknown"
    for i in range(metrics.MAX_NAMES):
        assert names.label(f"n{i}") == f"n{i}"
    assert names.label("one-too-many") == "other"
    assert names.label("n0") == "n0"
    assert [metrics.status_class(s) for s in (200, 299, 404, 499, 503, 0, 600, 99)] == [
        "2xx", "2xx", "4xx", "4xx", "5xx", "other", "other", "other"]
    assert metrics.is_admission_refusal("caller_rpm_exceeded") and metrics.is_admission_refusal("budget_exhausted")
    assert not metrics.is_admission_refusal("upstream_rate_limited")
    assert not metrics.is_admission_refusal("made_up_exceeded")


async def test_task_retries_are_counted_by_configured_queue(fake, hearth_server, http):
    server = hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                              "upstream_model": "up"}]), offline_fallback=False)
    fake.set_defaults(status=503)  # every model call fails retryably: the task is queued again
    name, sample = "hearth_task_retries", "hearth_task_retries_total"
    before = _families((await http.get(server.base_url + "/metrics")).text)
    was = _value(before, name, sample) if name in before else 0.0
    r = await http.post(server.base_url + "/api/v1/ai/tasks", headers=AUTH,
                        json={"task_type": "summarize_async", "payload": {"text": "hello " * 20, "model": "m"}})
    assert r.status_code == 202, r.text
    for _ in range(200):  # the embedded worker claims and runs it within moments
        families = _families((await http.get(server.base_url + "/metrics")).text)
        if name in families and _value(families, name, sample) > was:
            break
        await asyncio.sleep(0.05)
    assert _value(families, name, sample) == was + 1
    queues = {s.labels["queue"] for s in families[name].samples}
    assert queues <= set(server.settings.task_queues) | {"other"}


def test_lease_expirations_of_unconfigured_queues_are_counted_as_other():
    name, sample = "hearth_task_lease_expirations", "hearth_task_lease_expirations_total"
    before = _families(metrics.exposition().decode())
    metrics.count_lease_expirations(["ai.default", "caller-chosen-queue-x1"], configured={"ai.default": 4})
    after = _families(metrics.exposition().decode())

    def delta(**labels: str) -> float:
        return _value(after, name, sample, **labels) - (_value(before, name, sample, **labels)
                                                        if name in before else 0.0)

    assert delta(queue="ai.default") == 1 and delta(queue="other") == 1
    assert "caller-chosen-queue-x1" not in metrics.exposition().decode()


async def test_queued_tasks_show_in_their_queue_depth(database_url, fake, hearth_server, http):
    server = hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                              "upstream_model": "up"}]), database_url=database_url,
                           metrics_cache_s=0.01, embedded_worker=False)
    for i in range(3):
        r = await http.post(server.base_url + "/api/v1/ai/tasks", headers=AUTH,
                            json={"task_type": "summarize_async", "payload": {"text": f"hello {i} " * 20}})
        assert r.status_code == 202, r.text
    queue = r.json()["data"]["queue"]
    families = _families((await http.get(server.base_url + "/metrics")).text)
    assert _value(families, "hearth_task_queue_depth", queue=queue, state="queued") == 3
    assert _value(families, "hearth_task_queue_depth") == 3
    assert _value(families, "hearth_tasks_running") == 0
    assert _value(families, "hearth_task_queue_oldest_due_seconds", queue=queue) >= 0
