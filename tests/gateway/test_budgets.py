"""Strict budgets under parallel load: never overspent, charged once, refused with 429, durable."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from hearth.store.db import create_engine
from hearth.store.tables import budget_ledger
from hearth.testing.fake_upstream import FakeBehavior, reply_text
from hearth.testing.server_thread import free_port
from hearth.wire.tokens import estimate_messages, estimate_text, prompt_upper_bound
from tests.support import (
    ADMIN,
    AUTH,
    MAX_TOKENS,
    PRICE,
    budget_registry,
    chat_body,
    ledger_summary,
    post_many,
    reservation_tokens,
)


async def _burst(http: Any, urls: list[str], n: int, headers: dict[str, str] | None = None) -> list[Any]:
    return await post_many([u + "/v1/chat/completions" for u in urls], n, chat_body(max_tokens=MAX_TOKENS),
                           {**AUTH, **(headers or {})})


async def _flushed(server: Any) -> None:
    await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(server.runtime.ledger.flush(), server.loop))


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_500_parallel_requests_never_overspend_and_each_call_is_charged_once(
        backend, database_url, fake, hearth_server, http, request):
    n_affordable = 7
    limit_micro = n_affordable * reservation_tokens() * PRICE
    # 500 requests land in one event-loop step; on a loaded test host the last admission script can
    # leave more than the default 2 s after its deadline was set, and is refused late (503, fail
    # closed: tests/state/test_state_backends.py). The budget arithmetic is what is under test here.
    settings: dict[str, Any] = {"database_url": database_url, "state_timeout_s": 10.0}
    if backend == "redis":
        settings |= {"state_backend": "redis", "redis_prefix": request.getfixturevalue("redis_prefix")}
    server = hearth_server(budget_registry(fake, limit_micro / 1e6), **settings)
    fake.set_defaults(latency_ms=100)
    results = await _burst(http, [server.base_url], 500)
    ok = [r for r in results if r.status_code == 200]
    refused = [r for r in results if r.status_code == 429]
    others = [(r.status_code, r.text[:200]) for r in results if r.status_code not in (200, 429)]
    assert len(ok) + len(refused) == 500, others[:3]
    assert len(ok) >= n_affordable  # the budget let through what it could afford …
    assert {r.json()["error"]["code"] for r in refused} == {"budget_exhausted"}
    assert fake.stats.requests == len(ok)  # … and nothing refused reached the upstream
    await _flushed(server)
    ledger = await ledger_summary(database_url)
    assert ledger["duplicates"] == []
    assert ledger["settled_calls"] == len(ok) == ledger["reserved_calls"]  # every call reserved and settled once
    assert ledger["spend"] <= limit_micro
    status = (await http.get(server.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
    daily = next(i for i in status if i["budget"] == "daily")
    assert daily["spent"] == pytest.approx(ledger["charged"] / 1e6)
    assert daily["used"] <= daily["limit"]


async def test_budget_headers_and_token_budgets(fake, hearth_server, http):
    server = hearth_server(budget_registry(fake, 10 * reservation_tokens(), unit="tokens"))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)
    assert r.status_code == 200
    assert r.headers["x-hearth-budget"] == "daily" and r.headers["x-hearth-budget-unit"] == "tokens"
    # a non-stream answer reports the budget after its settlement: the real usage, not the reservation
    assert int(r.headers["x-hearth-budget-remaining"]) == 10 * reservation_tokens() - r.json()["usage"]["total_tokens"]


async def test_each_tenant_gets_its_own_budget_and_unnamed_tenants_share_one(fake, hearth_server, http):
    limit = reservation_tokens()  # one call per tenant
    server = hearth_server(budget_registry(fake, limit, unit="tokens", scope="tenant", subject="*"))
    url = server.base_url + "/v1/chat/completions"
    body = chat_body(max_tokens=MAX_TOKENS)
    for tenant in ("acme", "globex"):
        assert (await http.post(url, json=body, headers={**AUTH, "X-Hearth-Tenant": tenant})).status_code == 200
        assert (await http.post(url, json=body, headers={**AUTH, "X-Hearth-Tenant": tenant})).status_code == 429
    assert (await http.post(url, json=body, headers=AUTH)).status_code == 200
    assert (await http.post(url, json=body, headers=AUTH)).status_code == 429


async def test_failed_call_refunds_its_whole_reservation(fake, hearth_server, http):
    server = hearth_server(budget_registry(fake, reservation_tokens(), unit="tokens"))
    fake.script({"status": 500})
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)
    assert r.status_code == 502
    ok = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)
    assert ok.status_code == 200  # the failed call gave its reservation back


async def test_restart_loses_no_spend(tmp_path: Path, fake, hearth_server, http):
    db = f"sqlite+aiosqlite:///{tmp_path}/budget.db"
    registry = budget_registry(fake, 3 * reservation_tokens(), unit="tokens")
    first = hearth_server(registry, database_url=db)
    results = await _burst(http, [first.base_url], 5)
    ok = [r for r in results if r.status_code == 200]
    assert len(ok) == 3
    spent = sum(r.json()["usage"]["total_tokens"] for r in ok)
    before = (await http.get(first.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"][0]
    assert before["used"] == spent
    first.stop()  # graceful: the ledger is flushed
    second = hearth_server(registry, database_url=db)
    items = (await http.get(second.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
    assert items[0]["used"] == spent and items[0]["spent"] == spent  # rebuilt from the ledger, exactly
    left = 3 * reservation_tokens() - spent
    r = await http.post(second.base_url + "/v1/chat/completions", json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)
    assert r.status_code == (200 if left >= reservation_tokens() else 429)


async def test_a_callers_own_key_sees_only_its_budgets(fake, hearth_server, http):
    server = hearth_server(budget_registry(fake, 100.0))
    mine = await http.get(server.base_url + "/api/v1/budgets", headers=AUTH)
    assert mine.status_code == 200 and all(i["caller"] == "tester" for i in mine.json()["data"]["items"])
    other = await http.get(server.base_url + "/api/v1/budgets", params={"caller": "someone"}, headers=AUTH)
    assert other.status_code == 403
    await http.post(server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)
    for _ in range(40):
        usage = (await http.get(server.base_url + "/api/v1/usage", headers=AUTH)).json()["data"]
        if usage["requests"]:
            break
        await asyncio.sleep(0.05)
    assert usage["requests"] == 1 and usage["completion_tokens"] == MAX_TOKENS and usage["cost"] > 0


CJK = "预算" * 300  # 600 characters, 1,800 UTF-8 bytes


async def test_a_strict_budget_reserves_the_prompts_utf8_size_and_approx_reserves_less(fake, hearth_server, http):
    reg = budget_registry(fake, 1_000_000, unit="tokens")
    reg["budgets"].append({"name": "cheap", "caller": "tester", "scope": "caller", "period": "month",
                           "unit": "tokens", "limit": 1_000_000, "estimate": "approx"})
    server = hearth_server(reg)
    body = chat_body(CJK, max_tokens=MAX_TOKENS)
    r = await http.post(server.base_url + "/v1/chat/completions", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    await _flushed(server)
    engine = create_engine(server.settings.database_url)
    try:
        async with engine.connect() as conn:
            reserved = {row.budget: row.amount for row in await conn.execute(
                select(budget_ledger).where(budget_ledger.c.kind == "reserve"))}
    finally:
        await engine.dispose()
    assert reserved["daily"] == prompt_upper_bound(body) + MAX_TOKENS >= 1800 + MAX_TOKENS
    assert reserved["cheap"] < reserved["daily"] / 2  # ~1 token per CJK character, no byte bound


async def test_an_overrun_is_charged_in_full_and_alerted(fake, hearth_server, http, caplog):
    limit = 100 * reservation_tokens()
    server = hearth_server(budget_registry(fake, limit, unit="tokens", estimate="approx"))
    fake.script(FakeBehavior(extra_prompt_tokens=500))  # the provider bills far beyond any estimate
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)
    assert r.status_code == 200
    billed = r.json()["usage"]["total_tokens"]
    assert billed > reservation_tokens()
    assert int(r.headers["x-hearth-budget-remaining"]) == limit - billed  # the whole cost, not the reservation
    await _flushed(server)
    summary = await ledger_summary(server.settings.database_url)
    assert summary["charged"] == billed
    (settle,) = summary["settles"].values()
    assert settle["overrun"] == billed - (summary["reserves"][(settle["call_id"], settle["counter_key"])])
    items = (await http.get(server.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
    assert items[0]["used"] == billed and items[0]["spent"] == billed
    assert any(rec.message == "budget_overrun" or "budget_overrun" in rec.getMessage() for rec in caplog.records)


async def test_a_call_for_several_choices_reserves_the_output_of_each(fake, hearth_server, http):
    # an upstream bills every one of the `n` choices: max_tokens bounds each, not their sum
    body = chat_body(max_tokens=MAX_TOKENS, n=3)
    server = hearth_server(budget_registry(fake, 1_000_000, unit="tokens"))
    r = await http.post(server.base_url + "/v1/chat/completions", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    assert [c["index"] for c in r.json()["choices"]] == [0, 1, 2]
    assert r.json()["usage"]["completion_tokens"] == 3 * MAX_TOKENS
    await _flushed(server)
    summary = await ledger_summary(server.settings.database_url)
    assert list(summary["reserves"].values()) == [prompt_upper_bound(body) + 3 * MAX_TOKENS]
    (settle,) = summary["settles"].values()
    assert settle["overrun"] == 0


async def test_a_budget_that_affords_one_choice_refuses_three_before_the_upstream(fake, hearth_server, http):
    one_choice = prompt_upper_bound(chat_body(max_tokens=MAX_TOKENS, n=3)) + MAX_TOKENS
    server = hearth_server(budget_registry(fake, one_choice + MAX_TOKENS, unit="tokens"))
    url = server.base_url + "/v1/chat/completions"
    r = await http.post(url, json=chat_body(max_tokens=MAX_TOKENS, n=3), headers=AUTH)
    assert (r.status_code, r.json()["error"]["code"]) == (429, "budget_exhausted")
    r = await http.post(url, json=chat_body(max_tokens=MAX_TOKENS, n=3, stream=True), headers=AUTH)
    assert (r.status_code, r.json()["error"]["code"]) == (429, "budget_exhausted")
    assert fake.stats.requests == 0
    r = await http.post(url, json=chat_body(max_tokens=MAX_TOKENS, n=1), headers=AUTH)
    assert r.status_code == 200, r.text


async def test_an_answer_without_usage_is_charged_its_estimated_output_too(fake, hearth_server, http):
    body = chat_body("what is the tallest mountain?", max_tokens=MAX_TOKENS, n=2)
    server = hearth_server(budget_registry(fake, 1_000_000, unit="tokens"))
    fake.script(FakeBehavior(usage_in_reply=False))
    r = await http.post(server.base_url + "/v1/chat/completions", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    await _flushed(server)
    summary = await ledger_summary(server.settings.database_url)
    prompt, output = estimate_messages(body["messages"]), 2 * estimate_text(reply_text(MAX_TOKENS))  # both choices
    assert summary["charged"] == prompt + output
    # the caller sees what it was charged, marked as Hearth's estimate (as a stream's usage chunk is)
    assert r.json()["usage"] == {"prompt_tokens": prompt, "completion_tokens": output,
                                 "total_tokens": prompt + output, "hearth_estimated": True}


async def test_a_budgeted_call_that_names_no_output_limit_is_sent_the_limit_it_reserved(fake, hearth_server, http):
    # a strict budget reserves "prompt + constrained output" (seed 004): the constraint must reach the model
    limit = 300  # HEARTH_DEFAULT_MAX_TOKENS
    fake.set_defaults(chunks=limit + 200)  # left alone, the model writes more
    server = hearth_server(budget_registry(fake, 1_000_000, unit="tokens"), default_max_tokens=limit)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200, r.text
    assert fake.stats.last_body["max_tokens"] == limit
    assert r.json()["choices"][0]["finish_reason"] == "length"
    await _flushed(server)
    summary = await ledger_summary(server.settings.database_url)
    assert list(summary["reserves"].values()) == [prompt_upper_bound(chat_body()) + limit]
    (settle,) = summary["settles"].values()
    assert settle["overrun"] == 0


async def test_a_call_under_no_budget_keeps_the_models_own_output_limit(fake, hearth_server, http):
    reg = budget_registry(fake, 1_000_000, unit="tokens")
    reg["budgets"] = []
    server = hearth_server(reg)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200, r.text
    assert "max_tokens" not in fake.stats.last_body


async def test_a_predicted_output_is_reserved_as_output_since_its_rejected_tokens_are_billed_so(
        fake, hearth_server, http):
    predicted = "def total(lines):\n    return sum(line.price for line in lines)\n" * 20
    body = chat_body(max_tokens=MAX_TOKENS, prediction={"type": "content", "content": predicted})
    server = hearth_server(budget_registry(fake, 1_000_000, unit="tokens"))
    r = await http.post(server.base_url + "/v1/chat/completions", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    await _flushed(server)
    summary = await ledger_summary(server.settings.database_url)
    predicted_bytes = len(json.dumps(predicted).encode())  # a byte-level BPE token covers at least one byte
    assert list(summary["reserves"].values()) == [prompt_upper_bound(body) + MAX_TOKENS + predicted_bytes]


async def test_a_call_whose_upstream_took_the_request_and_then_timed_out_is_charged_as_answered(
        fake, hearth_server, http):
    # the provider may still finish (and bill) a non-stream answer Hearth stopped waiting for; the caller's
    # own short deadline must not turn every call into a free one
    body = chat_body(max_tokens=MAX_TOKENS)
    server = hearth_server(budget_registry(fake, 1_000_000, unit="tokens"))
    fake.set_defaults(latency_ms=2000)
    r = await http.post(server.base_url + "/v1/chat/completions", json=body,
                        headers={**AUTH, "X-Hearth-Timeout-Ms": "300"})
    assert (r.status_code, r.json()["error"]["code"]) == (504, "upstream_timeout")
    await _flushed(server)
    summary = await ledger_summary(server.settings.database_url)
    assert summary["charged"] == estimate_messages(body["messages"]) + MAX_TOKENS


async def test_a_call_no_upstream_took_is_refunded_entirely(fake, hearth_server, http):
    reg = budget_registry(fake, 1_000_000, unit="tokens")
    reg["endpoints"][0]["base_url"] = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: never sent
    server = hearth_server(reg)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)
    assert r.status_code == 502, r.text
    await _flushed(server)
    summary = await ledger_summary(server.settings.database_url)
    assert summary["reserves"] and summary["charged"] == 0
