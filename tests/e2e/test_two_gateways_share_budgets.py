"""Two gateway processes on one PostgreSQL and one Redis: one budget, never overspent, survives restarts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e import processes
from tests.support import (
    ADMIN,
    AUTH,
    MASTER_KEY,
    MAX_TOKENS,
    PRICE,
    REDIS_URL,
    budget_registry,
    chat_body,
    ledger_summary,
    post_many,
    reservation_tokens,
    write_config,
)


async def test_500_parallel_requests_across_two_processes_never_overspend(
        tmp_path: Path, postgres_url: str, redis_prefix: str, fake: Any, http: Any) -> None:
    limit_micro = 9 * reservation_tokens() * PRICE
    config = write_config(tmp_path / "hearth.yaml", budget_registry(fake, limit_micro / 1e6))
    env = {"HEARTH_CONFIG": config, "HEARTH_DATABASE_URL": postgres_url, "HEARTH_STATE_BACKEND": "redis",
           "HEARTH_REDIS_PREFIX": redis_prefix, "HEARTH_MASTER_KEY": MASTER_KEY, "HEARTH_LOG_LEVEL": "warning",
           "HEARTH_ADMIN_TOKEN": "admin-token-xyz",
           # a 250-request burst per process on a loaded host can dispatch a script past the default
           # 2 s state timeout (refused late, 503); budget arithmetic is what is under test here
           "HEARTH_STATE_TIMEOUT_S": "10"}
    fake.set_defaults(latency_ms=100)
    gateways = [processes.start(tmp_path, env, name=f"gw{i}") for i in range(2)]
    try:
        # aiohttp, closed afterwards: the httpx fixture's pool would then hold 500 idle keep-alive
        # connections, and the next request could pick one the server is closing at that moment
        results = await post_many([g.base_url + "/v1/chat/completions" for g in gateways], 500,
                                  chat_body(max_tokens=MAX_TOKENS), AUTH)
        used_before = await _used(http, gateways[0].base_url)
    finally:
        for g in gateways:
            g.stop()  # graceful: both ledgers are flushed
    ok = [r for r in results if r.status_code == 200]
    refused = [r for r in results if r.status_code == 429]
    assert len(ok) + len(refused) == 500
    assert len(ok) >= 9 and {r.json()["error"]["code"] for r in refused} == {"budget_exhausted"}
    assert fake.stats.requests == len(ok)
    ledger = await ledger_summary(postgres_url)
    assert ledger["duplicates"] == []
    assert ledger["settled_calls"] == len(ok)
    assert ledger["spend"] <= limit_micro

    assert used_before == ledger["spend"] / 1e6
    # a restart (both processes gone, Redis keeps its counters; the ledger holds the same truth)
    again = processes.start(tmp_path, env, name="gw-restarted")
    try:
        assert await _used(http, again.base_url) == used_before
    finally:
        again.stop()


async def _used(http: Any, base_url: str) -> float:

    items = (await http.get(base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
    return float(next(i["used"] for i in items if i["budget"] == "daily"))


async def test_counters_are_rebuilt_from_the_ledger_when_redis_lost_them(
        tmp_path: Path, postgres_url: str, redis_prefix: str, fake: Any, http: Any) -> None:
    import redis


    config = write_config(tmp_path / "hearth.yaml", budget_registry(fake, 3 * reservation_tokens(), unit="tokens"))
    env = {"HEARTH_CONFIG": config, "HEARTH_DATABASE_URL": postgres_url, "HEARTH_STATE_BACKEND": "redis",
           "HEARTH_REDIS_PREFIX": redis_prefix, "HEARTH_MASTER_KEY": MASTER_KEY, "HEARTH_LOG_LEVEL": "warning",
           "HEARTH_ADMIN_TOKEN": "admin-token-xyz"}
    gw = processes.start(tmp_path, env, name="gw")
    codes: list[int] = []
    try:
        while 429 not in codes and len(codes) < 12:  # sequential calls until the budget refuses one
            codes.append((await http.post(gw.base_url + "/v1/chat/completions",
                                          json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)).status_code)
    finally:
        gw.stop()
    assert codes[-1] == 429 and set(codes[:-1]) == {200} and len(codes) >= 4, codes
    ledger = await ledger_summary(postgres_url)
    assert ledger["settled_calls"] == len(codes) - 1, ledger
    client = redis.Redis.from_url(REDIS_URL)
    client.delete(*list(client.scan_iter(match=redis_prefix + "*")))  # Redis lost everything
    gw = processes.start(tmp_path, env, name="gw2")
    try:
        r = await http.post(gw.base_url + "/v1/chat/completions", json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)
    finally:
        gw.stop()
    assert r.status_code == 429  # rebuilt from the PostgreSQL ledger: no money forgotten
