"""The capability API end to end over HTTP against the fake upstream, on SQLite and PostgreSQL: the
envelope carries the result, usage, cost and prompt version; every model call (corrective retries too)
is charged and logged; with no model to serve, summarize and bill extraction degrade to the local engine."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from hearth.testing.fake_upstream import FakeBehavior
from tests.support import ADMIN, AUTH, gateway_registry

PRICE = {"model": "up", "input_per_1m": 1000.0, "output_per_1m": 1000.0}
VALID_BILL = {"vendor": "ACME", "bill_number": "INV-7", "issue_date": "2026-03-01", "due_date": None,
              "currency": "USD", "subtotal": 10.0, "tax": 2.5, "total": 12.5, "buyer": None, "notes": None,
              "line_items": [{"description": "Widget", "quantity": 2, "unit_price": 5.0, "amount": 10.0}]}


def _registry(fake: Any) -> dict[str, Any]:
    return gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                              "upstream_model": "up"}], prices=[PRICE])


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    return hearth_server(_registry(fake), database_url=database_url)


async def _logs(http: Any, server: Any, request_id: str) -> list[dict[str, Any]]:
    for _ in range(100):  # the writer flushes every 50 ms in tests
        r = await http.get(server.base_url + "/api/v1/request-logs", params={"request_id": request_id},
                           headers=ADMIN)
        rows = r.json()["data"]["items"]
        if any(row["route"] == "capability" for row in rows):
            return sorted(rows, key=lambda row: row["id"])
        await asyncio.sleep(0.05)
    raise AssertionError("no capability row was logged")


async def test_summarize_answers_in_the_envelope_with_usage_cost_and_the_prompt_version(fake, server, http):
    r = await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH,
                        json={"text": "Hearth is a gateway. It governs calls.", "model": "m"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True and body["error"] is None
    data = body["data"]
    assert data["summary"] == fake_reply(fake)
    assert data["usage"]["completion_tokens"] > 0 and data["cost"] > 0
    assert (data["prompt_code"], data["prompt_version"], data["degraded"]) == ("summary", 0, False)
    assert [a["purpose"] for a in data["attempts"]] == ["initial"]
    sent = fake.stats.last_body["messages"][-1]["content"]
    assert "Hearth is a gateway. It governs calls." in sent
    rows = await _logs(http, server, r.headers["x-request-id"])
    assert [(row["route"], row["capability"], row["prompt_code"]) for row in rows] == [
        ("chat", "summarize", "summary"), ("capability", "summarize", "summary")]
    assert rows[1]["cost"] == pytest.approx(data["cost"])


def fake_reply(fake: Any) -> str:
    from hearth.testing.fake_upstream import reply_text

    return reply_text(fake.defaults.chunks)


async def test_a_created_prompt_serves_its_localized_content_and_version(fake, server, http):
    created = await http.post(server.base_url + "/api/v1/prompts", headers=ADMIN, json={
        "code": "summary", "display_name": "Summary", "default_locale": "en",
        "contents": {"en": "EN: {{ text }}", "zh": {"system": "你是摘要助手。", "user": "中文：{{ text }}"}}})
    assert created.status_code == 201, created.text
    r = await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH,
                        json={"text": "报告正文", "model": "m", "locale": "zh-CN"})
    assert r.status_code == 200, r.text
    assert (r.json()["data"]["prompt_version"], r.json()["data"]["locale"]) == (1, "zh")
    assert fake.stats.last_body["messages"] == [{"role": "system", "content": "你是摘要助手。"},
                                                {"role": "user", "content": "中文：报告正文"}]


async def test_extraction_retries_once_after_invalid_json_and_charges_both_calls(fake, server, http):
    schema = {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"],
              "additionalProperties": False}
    fake.script(FakeBehavior(content="Sure! The order is forty-two."), FakeBehavior(content='{"order": 42}'))
    r = await http.post(server.base_url + "/api/v1/ai/extract", headers=AUTH,
                        json={"text": "Order 42 shipped.", "schema": schema, "model": "m"})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["data"] == {"order": 42}
    assert [a["purpose"] for a in data["attempts"]] == ["initial", "corrective_retry"]
    assert all(a["cost"] > 0 for a in data["attempts"])
    assert fake.stats.requests == 2
    correction = fake.stats.last_body["messages"][-1]["content"]
    assert "did not match the required JSON Schema" in correction
    rows = await _logs(http, server, r.headers["x-request-id"])
    assert [row["route"] for row in rows] == ["chat", "chat", "capability"]
    assert all(row["cost"] > 0 for row in rows[:2]) and rows[2]["attempts"] == 2


async def test_extraction_invalid_twice_is_a_422_with_the_errors(fake, server, http):
    schema = {"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"]}
    fake.script(FakeBehavior(content='{"order": "x"}'), FakeBehavior(content='{"nothing": 1}'))
    r = await http.post(server.base_url + "/api/v1/ai/extract", headers=AUTH,
                        json={"text": "Order 42.", "schema": schema, "model": "m"})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "schema_validation_failed"
    assert error["details"]["errors"] and len(error["details"]["attempts"]) == 2
    assert fake.stats.requests == 2


async def test_bill_extraction_checks_the_business_rules_too(fake, server, http):
    wrong_total = {**VALID_BILL, "total": 99.0}
    fake.script(FakeBehavior(content=orjson.dumps(wrong_total).decode()),
                FakeBehavior(content="```json\n" + orjson.dumps(VALID_BILL).decode() + "\n```"))
    r = await http.post(server.base_url + "/api/v1/ai/extract/bill", headers=AUTH,
                        json={"ocr_text": "ACME Invoice INV-7 ...", "model": "m"})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["data"]["total"] == 12.5
    assert len(data["attempts"]) == 2 and data["input_source"] == "ocr_text"


async def test_generate_checks_the_prompt_variables(fake, server, http):
    await http.post(server.base_url + "/api/v1/prompts", headers=ADMIN, json={
        "code": "questions", "contents": {"en": "Write {{ count }} questions about {{ topic }}."},
        "variables": [{"name": "topic", "required": True}, {"name": "count", "allowed": [1, 3, 5], "default": 3}]})
    url = server.base_url + "/api/v1/ai/text/generate"
    missing = await http.post(url, headers=AUTH, json={"prompt_code": "questions", "model": "m"})
    assert (missing.status_code, missing.json()["error"]["code"]) == (400, "prompt_variable_missing")
    bad = await http.post(url, headers=AUTH, json={"prompt_code": "questions", "model": "m",
                                                   "variables": {"topic": "x", "count": 4}})
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "prompt_variable_invalid")
    assert fake.stats.requests == 0  # refused before any model call
    good = await http.post(url, headers=AUTH, json={"prompt_code": "questions", "model": "m",
                                                    "variables": {"topic": "fractions"}})
    assert good.status_code == 200, good.text
    assert fake.stats.last_body["messages"][-1]["content"] == "Write 3 questions about fractions."


async def test_chat_with_a_role_sends_its_persona_first(fake, server, http):
    role = await http.post(server.base_url + "/api/v1/roles", headers=ADMIN, json={
        "code": "tutor", "persona": {"en": "You are a patient tutor."}, "model": "m"})
    assert role.status_code == 201, role.text
    r = await http.post(server.base_url + "/api/v1/ai/chat", headers=AUTH,
                        json={"role": "tutor", "messages": [{"role": "user", "content": "What is 2+2?"}]})
    assert r.status_code == 200, r.text
    assert r.json()["data"]["message"]["role"] == "assistant"
    sent = fake.stats.last_body["messages"]
    assert sent[0]["role"] == "system" and sent[0]["content"].startswith("You are a patient tutor.")
    assert sent[-1] == {"role": "user", "content": "What is 2+2?"}


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_with_no_endpoints_summarize_and_bill_extraction_answer_degraded(hearth_server, http, database_url):
    registry = {"providers": [], "endpoints": [], "models": [], "callers": [{"name": "tester", "key": "test-key-123"}]}
    server = hearth_server(registry, database_url=database_url)
    text = "Hearth governs model calls. It keeps budgets exact. It logs every call. It runs on one machine."
    r = await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH,
                        json={"text": text, "max_sentences": 2})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["degraded"] is True and data["attempts"] == []
    assert data["degraded_reason"] == "no_model_configured"
    assert 0 < len(data["summary"]) < len(text)
    bill = await http.post(server.base_url + "/api/v1/ai/extract/bill", headers=AUTH,
                           json={"ocr_text": "Invoice No: INV-001\nDate: 2026-03-01\nTotal: $1,234.50"})
    assert bill.status_code == 200, bill.text
    assert bill.json()["data"]["degraded"] is True
    assert bill.json()["data"]["data"]["total"] == 1234.5


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize(("body", "code"), [
    ({}, "input_missing"),
    ({"text": 5}, "invalid_request"),
    ({"text": "x", "surprise": 1}, "invalid_request"),
    ({"text": "x", "model": "m", "prompt_code": "nope"}, "prompt_not_found"),
])
async def test_bad_capability_input_is_a_clear_4xx(fake, server, http, body, code):
    r = await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH, json=body)
    assert 400 <= r.status_code < 500, r.text
    assert r.json()["error"]["code"] == code
    assert fake.stats.requests == 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_openapi_lists_every_capability_with_request_and_response_schemas_and_examples(server, http):
    doc = (await http.get(server.base_url + "/openapi.json")).json()
    for path in ("/api/v1/ai/summarize", "/api/v1/ai/extract", "/api/v1/ai/extract/bill", "/api/v1/ai/text/generate",
                 "/api/v1/ai/chat"):
        op = doc["paths"][path]["post"]
        request = op["requestBody"]["content"]["application/json"]["schema"]
        assert request["properties"] and request.get("examples"), path
        assert op["responses"]["200"]["content"]["application/json"]["schema"], path
        assert {"400", "422", "429"} <= set(op["responses"]), path
    for path in ("/api/v1/prompts", "/api/v1/prompts/{code}/versions/{version}", "/api/v1/roles"):
        assert path in doc["paths"], path


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_prompt_stats_compare_versions_by_calls_successes_and_schema_failures(fake, server, http):
    for text in ("A {{ text }}", "B {{ text }}"):
        await http.post(server.base_url + "/api/v1/prompts", headers=ADMIN, json={
            "code": "extraction", "contents": {"en": text + " {{ schema }}"}})
    schema = {"type": "object", "required": ["n"]}
    fake.set_defaults(content='{"n": 1}')
    for _ in range(2):
        await http.post(server.base_url + "/api/v1/ai/extract", headers=AUTH, json={"text": "t", "schema": schema,
                                                                                   "model": "m"})
    await http.patch(server.base_url + "/api/v1/prompts/extraction/versions/2", headers=ADMIN,
                     json={"status": "active", "operator": "ops", "reason": "try v2"})
    fake.set_defaults(content="not json")
    last = await http.post(server.base_url + "/api/v1/ai/extract", headers=AUTH,
                           json={"text": "t", "schema": schema, "model": "m"})
    assert last.status_code == 422
    await _logs(http, server, last.headers["x-request-id"])
    stats = (await http.get(server.base_url + "/api/v1/prompts/extraction/stats", headers=ADMIN)).json()["data"]
    by_version = {v["version"]: v for v in stats["versions"]}
    assert (by_version[1]["calls"], by_version[1]["succeeded"], by_version[1]["model_calls"]) == (2, 2, 2)
    assert (by_version[2]["calls"], by_version[2]["schema_failures"], by_version[2]["model_calls"]) == (1, 1, 2)
    assert by_version[2]["schema_failure_rate"] == 1.0 and by_version[1]["cost"] >= 0


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_a_failing_scene_model_degrades_but_a_model_the_caller_named_does_not(fake, hearth_server, http,
                                                                                     database_url):
    registry = _registry(fake)
    registry["scenes"] = [{"name": "summary", "default_model": "m"}]
    server = hearth_server(registry, database_url=database_url)
    fake.set_defaults(status=500)
    text = "Hearth governs model calls. It keeps budgets exact. It logs every call."
    by_scene = await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH,
                               json={"text": text, "scene": "summary"})
    assert by_scene.status_code == 200, by_scene.text
    assert by_scene.json()["data"]["degraded"] is True
    assert by_scene.json()["data"]["degraded_reason"] in ("upstream_error", "no_healthy_endpoint")
    named = await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH, json={"text": text, "model": "m"})
    assert named.status_code >= 500 and named.json()["success"] is False


@pytest.mark.parametrize(("path", "body", "content", "key"), [
    ("/api/v1/ai/summarize", {"text": "Some text."}, None, "summary"),
    ("/api/v1/ai/extract", {"text": "Order 7.", "schema": {"type": "object", "required": ["order"]}},
     '{"order": 7}', "data"),
    ("/api/v1/ai/extract/bill", {"ocr_text": "ACME INV-7"}, orjson.dumps(VALID_BILL).decode(), "data"),
    ("/api/v1/ai/text/generate", {"prompt_code": "hello", "variables": {"who": "Ada"}}, None, "text"),
    ("/api/v1/ai/chat", {"messages": [{"role": "user", "content": "Hi"}]}, None, "message"),
])
async def test_every_capability_reports_usage_cost_and_prompt_version_in_the_envelope_and_the_log(
        fake, server, http, path, body, content, key):
    created = await http.post(server.base_url + "/api/v1/prompts", headers=ADMIN, json={
        "code": "hello", "contents": {"en": "Say hello to {{ who }}."}, "variables": [{"name": "who"}]})
    assert created.status_code == 201, created.text
    if content is not None:
        fake.set_defaults(content=content)
    r = await http.post(server.base_url + path, headers=AUTH, json={"model": "m", **body})
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data[key] and data["usage"]["total_tokens"] > 0 and data["cost"] > 0
    assert isinstance(data["prompt_version"], int) and data["prompt_code"]
    rows = await _logs(http, server, r.headers["x-request-id"])
    capability_row = rows[-1]
    assert capability_row["route"] == "capability"
    assert (capability_row["prompt_code"], capability_row["prompt_version"]) == (data["prompt_code"],
                                                                                 data["prompt_version"])
    assert capability_row["cost"] == pytest.approx(data["cost"])
    assert capability_row["prompt_tokens"] + capability_row["completion_tokens"] == data["usage"]["total_tokens"]
    assert all(row["prompt_version"] == data["prompt_version"] for row in rows)
