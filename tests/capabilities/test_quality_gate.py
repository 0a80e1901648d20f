"""A prompt's quality gate: rules and a judge prompt; a failing answer is regenerated up to the limit, then
the request fails with 422 ``quality_gate_failed`` and the evaluation report. Judge calls are charged."""

from __future__ import annotations

from typing import Any

import pytest

from hearth.testing.fake_upstream import FakeBehavior
from tests.support import ADMIN, AUTH, gateway_registry


@pytest.fixture
async def server(fake: Any, hearth_server: Any, http: Any) -> Any:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up"}],
                           prices=[{"model": "up", "input_per_1m": 1000.0, "output_per_1m": 1000.0}])
    server = hearth_server(reg)
    judge = await http.post(server.base_url + "/api/v1/prompts", headers=ADMIN, json={
        "code": "judge", "contents": {"en": "Rate this summary of {{ source }} from 0 to 1 as JSON: {{ text }}"}})
    assert judge.status_code == 201, judge.text
    summary = await http.post(server.base_url + "/api/v1/prompts", headers=ADMIN, json={
        "code": "summary", "contents": {"en": "Summarize: {{ text }}"},
        "quality_gate": {"rules": {"must_include": ["hearth"]}, "judge": {"prompt_code": "judge", "threshold": 0.7},
                         "max_regenerations": 1}})
    assert summary.status_code == 201, summary.text
    return server


async def _summarize(http: Any, server: Any) -> Any:
    return await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH,
                           json={"text": "Hearth is a gateway.", "model": "m"})


async def test_a_low_judge_score_regenerates_and_the_better_answer_passes(fake, server, http):
    fake.script(FakeBehavior(content="Hearth, a draft."), FakeBehavior(content='{"score": 0.2, "reason": "vague"}'),
                FakeBehavior(content="Hearth governs model calls."), FakeBehavior(content='{"score": 0.9}'))
    r = await _summarize(http, server)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert data["summary"] == "Hearth governs model calls."
    assert [a["purpose"] for a in data["attempts"]] == ["initial", "quality_judge", "quality_regeneration",
                                                         "quality_judge"]
    assert all(a["cost"] > 0 for a in data["attempts"])
    assert [(e["passed"], e["score"]) for e in data["quality"]] == [(False, 0.2), (True, 0.9)]
    assert "Rate this summary of Hearth is a gateway." in fake.stats.last_body["messages"][-1]["content"]


async def test_an_answer_failing_the_rules_is_regenerated_without_asking_the_judge(fake, server, http):
    fake.script(FakeBehavior(content="No product name here."), FakeBehavior(content="About Hearth."),
                FakeBehavior(content='{"score": 1}'))
    r = await _summarize(http, server)
    assert r.status_code == 200, r.text
    data = r.json()["data"]
    assert [a["purpose"] for a in data["attempts"]] == ["initial", "quality_regeneration", "quality_judge"]
    assert data["quality"][0]["failed_rules"] == ["must_include: 'hearth'"]


async def test_when_no_answer_passes_the_request_fails_with_the_report(fake, server, http):
    fake.set_defaults(content="Hearth. {\"score\": 0.1}")  # answers and judge alike
    r = await _summarize(http, server)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "quality_gate_failed"
    assert [e["passed"] for e in error["details"]["report"]] == [False, False]
    assert fake.stats.requests == 4  # answer, judge, regeneration, judge


async def test_a_malformed_quality_gate_is_refused_at_creation(server, http):
    r = await http.post(server.base_url + "/api/v1/prompts", headers=ADMIN, json={
        "code": "bad", "contents": {"en": "x"}, "quality_gate": {"judge": {"threshold": 2}}})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request"
