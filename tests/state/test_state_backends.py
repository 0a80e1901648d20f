"""Contract tests for the state backends: the same behaviour from MemoryState and RedisState.

Every test in the first part runs against both backends (the ``state`` fixture); the Redis-only
part checks what only matters across processes: several clients and OS processes sharing one
limit, and failing closed when Redis cannot be reached.
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from datetime import time as dtime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from hearth.settings import Settings
from hearth.state.base import BudgetCharge, Lease, Scope, StateBackend, StateUnavailable, minute_window
from hearth.state.memory import MemoryState
from hearth.state.quota_day import QuotaDay
from hearth.state.redis import RedisState
from hearth.testing.fake_clock import FakeClock
from tests.support import REDIS_URL, StateTime

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def redis_state(redis_prefix: str) -> AsyncIterator[RedisState]:
    backend = RedisState(REDIS_URL, redis_prefix)
    yield backend
    await backend.close()


def lid() -> str:
    return uuid.uuid4().hex


# --------------------------------------------------------------------------- both backends


async def test_acquire_takes_every_scope_and_release_frees_them(state: StateBackend) -> None:
    ep, qg = Scope("ep:a", max_concurrency=3), Scope("qg:g", max_concurrency=3)
    result = await state.acquire(lid(), (ep, qg), 10, 30.0)
    assert result.lease is not None and result.refusal is None
    assert (await state.usage("ep:a")).in_flight == 1
    assert (await state.usage("qg:g")).in_flight == 1
    await state.release(result.lease)
    assert (await state.usage("ep:a")).in_flight == 0
    assert (await state.usage("qg:g")).in_flight == 0


async def test_concurrency_refusal_on_second_scope_takes_nothing_on_first(state: StateBackend) -> None:
    ep, qg = Scope("ep:a", max_concurrency=5), Scope("qg:g", max_concurrency=1)
    first = await state.acquire(lid(), (ep, qg), 1, 30.0)
    assert first.lease is not None
    second = await state.acquire(lid(), (ep, qg), 1, 30.0)
    assert second.lease is None
    assert second.refusal is not None
    assert (second.refusal.scope, second.refusal.limit) == ("qg:g", "concurrency")
    assert (await state.usage("ep:a")).in_flight == 1
    assert (await state.usage("qg:g")).in_flight == 1


async def test_an_acquire_run_after_its_deadline_is_refused_late_and_takes_nothing(
        state: StateBackend, state_time: StateTime) -> None:
    ep = Scope("ep:late", max_concurrency=5, rpm=10)
    late = await state.acquire(lid(), (ep,), 7, 30.0, deadline=state_time.now() - 1.0)
    assert late.lease is None and late.refusal is not None
    assert late.refusal.limit == "late"  # its caller has given up: nobody would release what it took
    usage = await state.usage("ep:late")
    assert (usage.in_flight, usage.rpm_used, usage.tpm_used) == (0, 0, 0)
    on_time = await state.acquire(lid(), (ep,), 7, 30.0, deadline=state_time.now() + 30.0)
    assert on_time.lease is not None


async def test_rpm_refusal_on_second_scope_counts_nothing_on_first(state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    ep, qg = Scope("ep:a", rpm=10), Scope("qg:g", rpm=1)
    assert (await state.acquire(lid(), (ep, qg), 1, 30.0)).lease is not None
    refused = await state.acquire(lid(), (ep, qg), 1, 30.0)
    assert refused.refusal is not None
    assert (refused.refusal.scope, refused.refusal.limit) == ("qg:g", "rpm")
    assert (await state.usage("ep:a")).rpm_used == 1
    assert (await state.usage("qg:g")).rpm_used == 1


async def test_tpm_refusal_on_second_scope_reserves_nothing_on_first(
        state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    ep, qg = Scope("ep:a", tpm=10_000, max_concurrency=5), Scope("qg:g", tpm=100)
    assert (await state.acquire(lid(), (ep, qg), 80, 30.0)).lease is not None
    refused = await state.acquire(lid(), (ep, qg), 80, 30.0)
    assert refused.refusal is not None
    assert (refused.refusal.scope, refused.refusal.limit) == ("qg:g", "tpm")
    usage = await state.usage("ep:a")
    assert usage.tpm_used == 80
    assert usage.in_flight == 1


async def test_200_concurrent_acquires_grant_exactly_max_concurrency(state: StateBackend) -> None:
    scope = Scope("ep:busy", max_concurrency=7)
    results = await asyncio.gather(*(state.acquire(lid(), (scope,), 1, 30.0) for _ in range(200)))
    granted = [r.lease for r in results if r.lease is not None]
    refused = [r.refusal for r in results if r.refusal is not None]
    assert len(granted) == 7
    assert len(refused) == 193
    assert {(r.scope, r.limit) for r in refused} == {("ep:busy", "concurrency")}
    assert (await state.usage("ep:busy")).in_flight == 7


async def test_released_capacity_is_granted_again_exactly(state: StateBackend) -> None:
    scope = Scope("ep:busy", max_concurrency=7)
    first = await asyncio.gather(*(state.acquire(lid(), (scope,), 1, 30.0) for _ in range(50)))
    leases = [r.lease for r in first if r.lease is not None]
    assert len(leases) == 7
    for lease in leases[:3]:
        await state.release(lease)
    second = await asyncio.gather(*(state.acquire(lid(), (scope,), 1, 30.0) for _ in range(50)))
    assert sum(r.lease is not None for r in second) == 3
    assert (await state.usage("ep:busy")).in_flight == 7


async def test_concurrent_acquires_never_exceed_rpm(state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    scope = Scope("ep:rpm", rpm=5)
    results = await asyncio.gather(*(state.acquire(lid(), (scope,), 1, 30.0) for _ in range(60)))
    assert sum(r.lease is not None for r in results) == 5
    assert {r.refusal.limit for r in results if r.refusal is not None} == {"rpm"}


async def test_lease_expires_after_ttl_so_a_crashed_holders_capacity_returns(
        state: StateBackend, state_time: StateTime) -> None:
    scope = Scope("ep:a", max_concurrency=1)
    crashed = await state.acquire(lid(), (scope,), 1, 0.3)  # the holder never releases
    assert crashed.lease is not None
    blocked = await state.acquire(lid(), (scope,), 1, 0.3)
    assert blocked.refusal is not None and blocked.refusal.limit == "concurrency"
    await state_time.elapse(0.4)
    assert (await state.usage("ep:a")).in_flight == 0
    assert (await state.acquire(lid(), (scope,), 1, 30.0)).lease is not None


async def test_rpm_refuses_the_request_over_the_limit_and_names_rpm(state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    scope = Scope("ep:a", rpm=3)
    for _ in range(3):
        result = await state.acquire(lid(), (scope,), 1, 30.0)
        assert result.lease is not None
        await state.release(result.lease)  # releasing does not give a request back
    now = state_time.now()
    refused = await state.acquire(lid(), (scope,), 1, 30.0)
    assert refused.lease is None and refused.refusal is not None
    assert (refused.refusal.scope, refused.refusal.limit) == ("ep:a", "rpm")
    until_window_end = (minute_window(now) + 1) * 60 - now
    assert 0 < refused.refusal.retry_after_s <= 60
    assert abs(refused.refusal.retry_after_s - until_window_end) < 1.0
    assert (await state.usage("ep:a")).rpm_used == 3


async def test_tpm_reserves_the_estimate_and_refunds_on_release(state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    scope = Scope("ep:a", tpm=100)
    a = await state.acquire(lid(), (scope,), 40, 30.0)
    b = await state.acquire(lid(), (scope,), 40, 30.0)
    assert a.lease is not None and b.lease is not None
    assert (await state.usage("ep:a")).tpm_used == 80
    c = await state.acquire(lid(), (scope,), 40, 30.0)
    assert c.refusal is not None and c.refusal.limit == "tpm"
    await state.release(a.lease, actual_tokens=10)  # used 10 of the 40 reserved: refund 30
    assert (await state.usage("ep:a")).tpm_used == 50
    c = await state.acquire(lid(), (scope,), 40, 30.0)
    assert c.lease is not None
    assert (await state.usage("ep:a")).tpm_used == 90


async def test_tpm_release_with_more_than_estimated_charges_the_difference(
        state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    scope = Scope("ep:a", tpm=1000)
    lease = (await state.acquire(lid(), (scope,), 40, 30.0)).lease
    assert lease is not None
    await state.release(lease, actual_tokens=70)
    assert (await state.usage("ep:a")).tpm_used == 70


async def test_tpm_release_without_actual_keeps_the_reservation(state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    scope = Scope("ep:a", tpm=1000)
    lease = (await state.acquire(lid(), (scope,), 40, 30.0)).lease
    assert lease is not None
    await state.release(lease)
    assert (await state.usage("ep:a")).tpm_used == 40


async def test_tpm_correction_never_goes_below_zero(state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    scope = Scope("ep:a", tpm=1000)
    real = (await state.acquire(lid(), (scope,), 30, 30.0)).lease
    assert real is not None
    # A lease whose reservation is larger than what the window still holds (e.g. counted before a
    # restart): refunding it must clamp at zero, not make room for more than the limit.
    oversized = Lease(lid(), (scope,), 500, real.window)
    await state.release(oversized, actual_tokens=0)
    assert (await state.usage("ep:a")).tpm_used == 0
    assert (await state.acquire(lid(), (scope,), 900, 30.0)).lease is not None
    refused = await state.acquire(lid(), (scope,), 200, 30.0)
    assert refused.refusal is not None and refused.refusal.limit == "tpm"


async def test_cooldown_refuses_with_remaining_time_and_clear_lifts_it(state: StateBackend) -> None:
    scope = Scope("ep:a", max_concurrency=5)
    await state.set_cooldown("ep:a", 2.0)
    refused = await state.acquire(lid(), (scope,), 1, 30.0, cooldown_keys=("ep:a",))
    assert refused.lease is None and refused.refusal is not None
    assert (refused.refusal.scope, refused.refusal.limit) == ("ep:a", "cooldown")
    assert 1.5 < refused.refusal.retry_after_s <= 2.0
    assert 1.5 < (await state.usage("ep:a")).cooldown_s <= 2.0
    assert (await state.usage("ep:a")).in_flight == 0  # a cooldown refusal takes no lease
    await state.clear_cooldown("ep:a")
    assert (await state.usage("ep:a")).cooldown_s == 0
    assert (await state.acquire(lid(), (scope,), 1, 30.0, cooldown_keys=("ep:a",))).lease is not None


async def test_cooldown_refusal_names_the_key_that_is_cooling(state: StateBackend) -> None:
    scopes = (Scope("ep:a", max_concurrency=5, rpm=100, tpm=1000), Scope("qg:g", max_concurrency=5))
    await state.set_cooldown("cool:second", 5.0)
    refused = await state.acquire(lid(), scopes, 1, 30.0, cooldown_keys=("cool:first", "cool:second"))
    assert refused.refusal is not None
    assert (refused.refusal.scope, refused.refusal.limit) == ("cool:second", "cooldown")
    assert 4.5 < refused.refusal.retry_after_s <= 5.0


async def test_cooldown_ends_by_itself(state: StateBackend, state_time: StateTime) -> None:
    scope = Scope("ep:a", max_concurrency=1)
    await state.set_cooldown("ep:a", 0.2)
    assert (await state.acquire(lid(), (scope,), 1, 30.0, cooldown_keys=("ep:a",))).refusal is not None
    await state_time.elapse(0.3)
    assert (await state.acquire(lid(), (scope,), 1, 30.0, cooldown_keys=("ep:a",))).lease is not None


async def test_cooldown_key_only_affects_callers_that_name_it(state: StateBackend) -> None:
    scope = Scope("ep:a", max_concurrency=5)
    await state.set_cooldown("ep:a", 5.0)
    assert (await state.acquire(lid(), (scope,), 1, 30.0, cooldown_keys=("ep:b",))).lease is not None


async def test_usage_reports_in_flight_rpm_and_tpm(state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    scope = Scope("ep:a", max_concurrency=10, rpm=100, tpm=10_000)
    leases = []
    for tokens in (10, 20, 30):
        lease = (await state.acquire(lid(), (scope,), tokens, 30.0)).lease
        assert lease is not None
        leases.append(lease)
    usage = await state.usage("ep:a")
    assert (usage.in_flight, usage.rpm_used, usage.tpm_used, usage.cooldown_s) == (3, 3, 60, 0)
    await state.release(leases[0], actual_tokens=10)
    usage = await state.usage("ep:a")
    assert (usage.in_flight, usage.rpm_used, usage.tpm_used) == (2, 3, 60)
    empty = await state.usage("ep:never-used")
    assert (empty.in_flight, empty.rpm_used, empty.tpm_used, empty.cooldown_s) == (0, 0, 0, 0)


async def test_release_is_idempotent(state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    scope = Scope("ep:a", max_concurrency=5, tpm=1000)
    a = (await state.acquire(lid(), (scope,), 50, 30.0)).lease
    b = (await state.acquire(lid(), (scope,), 50, 30.0)).lease
    assert a is not None and b is not None
    await state.release(a, actual_tokens=10)
    assert a.released
    after_first = await state.usage("ep:a")
    assert (after_first.in_flight, after_first.tpm_used) == (1, 60)
    await state.release(a, actual_tokens=10)
    await state.release(a)
    after_again = await state.usage("ep:a")
    assert (after_again.in_flight, after_again.tpm_used) == (1, 60)


async def test_unlimited_scope_admits_everything(state: StateBackend) -> None:
    scope = Scope("ep:free")
    results = await asyncio.gather(*(state.acquire(lid(), (scope,), 10**6, 30.0) for _ in range(50)))
    assert all(r.lease is not None for r in results)


async def test_ping_succeeds_on_a_working_backend(state: StateBackend) -> None:
    await state.ping()


# --------------------------------------------------------------------------- wait_for_release


async def test_memory_wait_for_release_returns_early_after_a_release() -> None:
    state = MemoryState()
    lease = (await state.acquire(lid(), (Scope("ep:a", max_concurrency=1),), 1, 30.0)).lease
    assert lease is not None

    async def release_soon() -> None:
        await asyncio.sleep(0.1)
        await state.release(lease)

    releaser = asyncio.create_task(release_soon())
    started = time.monotonic()
    await state.wait_for_release(5.0)
    waited = time.monotonic() - started
    await releaser
    assert 0.05 < waited < 1.0


async def test_memory_wait_for_release_waits_for_the_timeout_without_a_release() -> None:
    state = MemoryState()
    started = time.monotonic()
    await state.wait_for_release(0.2)
    assert 0.18 < time.monotonic() - started < 1.0


async def test_redis_wait_for_release_returns_within_its_poll_time(redis_state: RedisState) -> None:
    started = time.monotonic()
    await redis_state.wait_for_release(5.0)
    assert time.monotonic() - started < 0.2


# --------------------------------------------------------------------------- budgets (both backends)


async def test_a_budget_reservation_is_settled_exactly_once(state: StateBackend) -> None:
    budget = BudgetCharge("b:settle-once", limit=1000, amount=300)
    call = lid()
    got = await state.acquire(call, (Scope("ep:a", max_concurrency=5),), 10, 30.0, budgets=(budget,))
    assert got.lease is not None and got.lease.budget_values == (300,)
    assert await state.release_and_settle(got.lease, 10, (200,)) is True  # charged 100, refunded 200
    assert await state.counters(("b:settle-once",)) == (100,)
    again = Lease(call, (), 10, got.lease.window, budgets=(budget,))
    assert await state.release_and_settle(again, 10, (200,)) is False
    assert await state.counters(("b:settle-once",)) == (100,)


async def test_a_reservation_that_outlives_its_ttl_stays_spent(state: StateBackend, state_time: StateTime) -> None:
    budget = BudgetCharge("b:expired", limit=1000, amount=300)
    got = await state.acquire(lid(), (), 10, 0.3, budgets=(budget,))
    assert got.lease is not None
    await state_time.elapse(0.5)
    assert await state.release_and_settle(got.lease, 10, (300,)) is False
    assert await state.counters(("b:expired",)) == (300,)


async def test_a_budget_without_room_refuses_and_takes_nothing(state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    scope = Scope("ep:budget-refusal", max_concurrency=5, rpm=100)
    first = await state.acquire(lid(), (scope,), 1, 30.0, budgets=(BudgetCharge("b:tight", 500, 400),))
    assert first.lease is not None
    refused = await state.acquire(lid(), (scope,), 1, 30.0, budgets=(BudgetCharge("b:tight", 500, 400),))
    assert refused.refusal is not None and (refused.refusal.limit, refused.refusal.scope) == ("budget", "b:tight")
    assert await state.counters(("b:tight",)) == (400,)
    usage = await state.usage("ep:budget-refusal")
    assert (usage.in_flight, usage.rpm_used) == (1, 1)


async def test_renew_keeps_a_live_lease_and_its_reservation_past_their_ttl(
        state: StateBackend, state_time: StateTime) -> None:
    scope = Scope("ep:renew", max_concurrency=1)
    budget = BudgetCharge("b:renew", limit=1000, amount=300)
    held = await state.acquire(lid(), (scope,), 1, 0.5, budgets=(budget,))
    assert held.lease is not None
    await state_time.elapse(0.3)
    await state.renew((held.lease,), 1.0)
    await state_time.elapse(0.4)  # past the first TTL, within the renewed one
    assert (await state.acquire(lid(), (scope,), 1, 30.0)).refusal is not None
    assert await state.release_and_settle(held.lease, 1, (300,)) is True  # the reservation was renewed too
    assert await state.counters(("b:renew",)) == (0,)
    assert (await state.acquire(lid(), (scope,), 1, 30.0)).lease is not None


async def test_renew_does_not_bring_back_an_expired_lease(state: StateBackend, state_time: StateTime) -> None:
    scope = Scope("ep:renew-late", max_concurrency=1)
    held = await state.acquire(lid(), (scope,), 1, 0.2)
    assert held.lease is not None
    await state_time.elapse(0.4)
    await state.renew((held.lease,), 30.0)
    assert (await state.acquire(lid(), (scope,), 1, 30.0)).lease is not None


async def test_redis_keeps_no_per_call_key_after_settlement(redis_state: RedisState, redis_prefix: str) -> None:
    import redis as redis_py

    for _ in range(20):
        got = await redis_state.acquire(lid(), (Scope("ep:a", max_concurrency=5),), 10, 30.0,
                                        budgets=(BudgetCharge("b:keys", 10_000, 10),))
        assert got.lease is not None
        assert await redis_state.release_and_settle(got.lease, 10, (0,)) is True
    client = redis_py.Redis.from_url(REDIS_URL)
    try:
        left = sorted(k.decode() for k in client.scan_iter(match=f"{redis_prefix}*"))
    finally:
        client.close()
    assert [k for k in left if "res:" in k] == []
    assert left == sorted({f"{redis_prefix}b:b:keys", f"{redis_prefix}c:ep:a"} & set(left))


async def test_redis_gives_every_counter_it_creates_a_ttl(redis_state: RedisState, redis_prefix: str) -> None:
    """Counters get their TTL when they are created (not on every call), so none may be left without
    one: a key without a TTL would stay in Redis for ever."""
    import redis as redis_py

    scopes = (Scope("caller:ttl", max_concurrency=5, rpm=100, tpm=10_000, daily_tokens=100_000),
              Scope("ep:ttl", max_concurrency=5, rpm=100))
    for _ in range(3):
        got = await redis_state.acquire(lid(), scopes, 50, 30.0, budgets=(BudgetCharge("b:day", 10_000, 10, 3600.0),))
        assert got.lease is not None
    client = redis_py.Redis.from_url(REDIS_URL)
    try:
        keys = [k.decode() for k in client.scan_iter(match=f"{redis_prefix}*")]
        ttls = {k[len(redis_prefix):]: client.pttl(k) for k in keys}
    finally:
        client.close()
    kinds = {k.split(":")[0] for k in ttls}  # c: slots, r: rpm, t: tpm, d: daily tokens, b: budget, once: reservation
    assert {"c", "r", "t", "d", "b", "once"} <= kinds, ttls
    assert all(ttl > 0 for ttl in ttls.values()), ttls


async def test_redis_a_correction_never_recreates_an_expired_token_counter(redis_state: RedisState,
                                                                           redis_prefix: str) -> None:
    import redis as redis_py

    scope = Scope("caller:gone", tpm=10_000, daily_tokens=100_000)
    for actual in (10, 500):  # a refund (fewer tokens than reserved) and an overrun (more)
        got = await redis_state.acquire(lid(), (scope,), 100, 30.0)
        assert got.lease is not None
        client = redis_py.Redis.from_url(REDIS_URL)
        try:
            counters = [k for k in client.scan_iter(match=f"{redis_prefix}*") if b":gone:" in k]
            assert len(counters) == 2
            client.delete(*counters)  # as if their window had ended and they expired
            await redis_state.release(got.lease, actual)
            assert [k for k in client.scan_iter(match=f"{redis_prefix}*") if b":gone:" in k] == []
        finally:
            client.close()


async def test_redis_a_full_scope_sweeps_expired_leases_before_refusing(redis_state: RedisState) -> None:
    scope = Scope("ep:sweep", max_concurrency=2)
    for _ in range(2):  # two leases whose holders never come back
        assert (await redis_state.acquire(lid(), (scope,), 1, 0.2)).lease is not None
    await asyncio.sleep(0.3)
    granted = [await redis_state.acquire(lid(), (scope,), 1, 30.0) for _ in range(3)]
    assert [g.lease is not None for g in granted] == [True, True, False]
    assert (await redis_state.usage("ep:sweep")).in_flight == 2


# --------------------------------------------------------------------------- daily tokens (both backends)


def _backend(kind: str, request: pytest.FixtureRequest, **options: Any) -> StateBackend:
    if kind == "memory":
        return MemoryState(**options)
    return RedisState(REDIS_URL, request.getfixturevalue("redis_prefix"), **options)


def _next_midnight(now: float, zone: str) -> float:
    local = datetime.fromtimestamp(now, ZoneInfo(zone))
    return datetime.combine(local.date() + timedelta(days=1), dtime(0), ZoneInfo(zone)).timestamp()


@pytest.mark.parametrize("kind", ["memory", "redis"])
@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata"])
async def test_daily_tokens_refuse_past_the_limit_until_the_day_boundary_of_the_zone(
        kind: str, zone: str, request: pytest.FixtureRequest) -> None:
    state = _backend(kind, request, quota_day=QuotaDay(zone))
    try:
        scope = Scope("qg:acct", daily_tokens=100)
        assert (await state.acquire(lid(), (scope,), 60, 30.0)).lease is not None
        refused = await state.acquire(lid(), (scope,), 50, 30.0)
        assert refused.refusal is not None
        assert (refused.refusal.scope, refused.refusal.limit) == ("qg:acct", "daily_tokens")
        # Retry-After is the truth: the next midnight in the configured zone (Kolkata is UTC+5:30)
        assert abs(refused.refusal.retry_after_s - (_next_midnight(time.time(), zone) - time.time())) < 2
        assert (await state.acquire(lid(), (scope,), 40, 30.0)).lease is not None  # exactly full is fine
    finally:
        await state.close()


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_daily_tokens_settle_the_actual_usage_like_tpm(kind: str, request: pytest.FixtureRequest) -> None:
    state = _backend(kind, request)
    try:
        scope = Scope("qg:acct", daily_tokens=100)
        first = (await state.acquire(lid(), (scope,), 60, 30.0)).lease
        assert first is not None
        assert (await state.usage("qg:acct")).daily_tokens_used == 60
        await state.release(first, actual_tokens=10)  # estimated 60, used 10: 50 come back
        assert (await state.usage("qg:acct")).daily_tokens_used == 10
        assert (await state.acquire(lid(), (scope,), 85, 30.0)).lease is not None
        over = await state.acquire(lid(), (scope,), 10, 30.0)
        assert over.refusal is not None and over.refusal.limit == "daily_tokens"
    finally:
        await state.close()


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_daily_tokens_reset_at_midnight_in_the_configured_zone(kind: str, request: pytest.FixtureRequest) -> None:
    zone = "America/New_York"
    midnight = datetime(2026, 3, 9, 0, 0, tzinfo=ZoneInfo(zone)).timestamp()  # the night after a DST change
    clock = FakeClock(midnight - 5)
    state = _backend(kind, request, quota_day=QuotaDay(zone), clock=clock)
    try:
        scope = Scope("qg:acct", daily_tokens=100)
        assert (await state.acquire(lid(), (scope,), 100, 30.0)).lease is not None
        assert (await state.acquire(lid(), (scope,), 1, 30.0)).refusal is not None
        clock.set(midnight - 0.5)  # still the same day in New York
        assert (await state.acquire(lid(), (scope,), 1, 30.0)).refusal is not None
        clock.set(midnight + 0.5)
        assert (await state.acquire(lid(), (scope,), 100, 30.0)).lease is not None
        refused = await state.acquire(lid(), (scope,), 1, 30.0)
        assert refused.refusal is not None and refused.refusal.limit == "daily_tokens"
    finally:
        await state.close()


async def test_daily_refusal_on_the_quota_group_takes_nothing_elsewhere(
        state: StateBackend, state_time: StateTime) -> None:
    await state_time.away_from_minute_edge()
    ep, qg = Scope("ep:a", max_concurrency=5, tpm=1000), Scope("qg:g", daily_tokens=10)
    refused = await state.acquire(lid(), (ep, qg), 20, 30.0)
    assert refused.refusal is not None and refused.refusal.scope == "qg:g"
    usage = await state.usage("ep:a")
    assert (usage.in_flight, usage.tpm_used) == (0, 0)


def test_quota_day_ends_at_the_next_local_midnight() -> None:
    day = QuotaDay("Asia/Shanghai")
    noon = datetime(2026, 12, 1, 12, 0, tzinfo=ZoneInfo("Asia/Shanghai")).timestamp()
    assert day.end(noon) == noon + 12 * 3600
    assert day.end(noon + 11 * 3600) == noon + 12 * 3600  # cached window, same answer
    assert day.end(noon + 12 * 3600) == noon + 36 * 3600  # midnight itself starts the next day
    # a 23-hour day (spring forward) ends 23 hours after it began
    ny = QuotaDay("America/New_York")
    start = datetime(2026, 3, 8, 0, 0, tzinfo=ZoneInfo("America/New_York")).timestamp()
    assert ny.end(start + 1) == start + 23 * 3600


def test_quota_day_refuses_an_unknown_zone() -> None:
    with pytest.raises(ValueError, match="Mars/Olympus"):
        QuotaDay("Mars/Olympus")
    with pytest.raises(ValueError, match="Mars/Olympus"):  # at start, as a setting
        Settings(quota_time_zone="Mars/Olympus")


# --------------------------------------------------------------------------- Redis across clients and processes

_ACQUIRE_CHILD = r"""
import asyncio, os, sys
from hearth.state.base import Scope
from hearth.state.redis import RedisState

async def main(url, prefix, n):
    state = RedisState(url, prefix)
    await state.ping()
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    scope = Scope("ep:shared", max_concurrency=7)
    results = await asyncio.gather(*(state.acquire(f"{os.getpid()}-{i}", (scope,), 1, 30.0) for i in range(n)))
    print(sum(r.lease is not None for r in results), flush=True)
    await state.close()

asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
"""

_CRASH_CHILD = r"""
import asyncio, os, sys
from hearth.state.base import Scope
from hearth.state.redis import RedisState

async def main(url, prefix):
    state = RedisState(url, prefix)
    result = await state.acquire("crashed-holder", (Scope("ep:crash", max_concurrency=1),), 1, 0.5)
    print("granted" if result.lease else "refused", flush=True)
    os._exit(0)  # die holding the lease: no release, no close

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def _spawn(script: str, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, *args, cwd=REPO_ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)


async def _line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 15)
    if not line:
        assert proc.stderr is not None
        raise AssertionError("child ended early: " + (await proc.stderr.read()).decode(errors="replace"))
    return line.decode().strip()


async def test_redis_two_clients_share_one_limit_exactly(redis_prefix: str) -> None:
    one, two = RedisState(REDIS_URL, redis_prefix), RedisState(REDIS_URL, redis_prefix)
    try:
        scope = Scope("ep:shared", max_concurrency=7)
        results = await asyncio.gather(*(client.acquire(lid(), (scope,), 1, 30.0)
                                         for _ in range(100) for client in (one, two)))
        assert sum(r.lease is not None for r in results) == 7
        assert (await one.usage("ep:shared")).in_flight == 7
        assert (await two.usage("ep:shared")).in_flight == 7
    finally:
        await one.close()
        await two.close()


async def test_redis_two_processes_and_two_clients_share_one_limit_exactly(redis_prefix: str) -> None:
    children = [await _spawn(_ACQUIRE_CHILD, REDIS_URL, redis_prefix, "100") for _ in range(2)]
    one, two = RedisState(REDIS_URL, redis_prefix), RedisState(REDIS_URL, redis_prefix)
    try:
        for child in children:
            assert await _line(child) == "ready"
        scope = Scope("ep:shared", max_concurrency=7)
        for child in children:  # start everyone at once
            assert child.stdin is not None
            child.stdin.write(b"go\n")
            await child.stdin.drain()
        local = await asyncio.gather(*(client.acquire(lid(), (scope,), 1, 30.0)
                                       for _ in range(100) for client in (one, two)))
        from_children = [int(await _line(child)) for child in children]
        total = sum(from_children) + sum(r.lease is not None for r in local)
        assert total == 7
        assert (await one.usage("ep:shared")).in_flight == 7
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
            await child.wait()
        await one.close()
        await two.close()


async def test_redis_lease_of_a_crashed_process_comes_back_after_its_ttl(redis_state: RedisState,
                                                                          redis_prefix: str) -> None:
    child = await _spawn(_CRASH_CHILD, REDIS_URL, redis_prefix)
    assert await _line(child) == "granted"
    assert await child.wait() == 0
    scope = Scope("ep:crash", max_concurrency=1)
    blocked = await redis_state.acquire(lid(), (scope,), 1, 30.0)
    assert blocked.refusal is not None and blocked.refusal.limit == "concurrency"
    await asyncio.sleep(0.6)
    assert (await redis_state.acquire(lid(), (scope,), 1, 30.0)).lease is not None


async def test_redis_unreachable_raises_state_unavailable_quickly_and_never_grants() -> None:
    state = RedisState("redis://127.0.0.1:1/0", "hearth-test-unreachable:")
    scope = Scope("ep:a", max_concurrency=5)
    try:
        started = time.monotonic()
        with pytest.raises(StateUnavailable):
            await state.ping()
        with pytest.raises(StateUnavailable):
            await state.acquire(lid(), (scope,), 1, 30.0)
        with pytest.raises(StateUnavailable):
            await state.release(Lease(lid(), (scope,), 1, minute_window(time.time())))
        with pytest.raises(StateUnavailable):
            await state.set_cooldown("ep:a", 1.0)
        with pytest.raises(StateUnavailable):
            await state.usage("ep:a")
        assert time.monotonic() - started < 3.0
    finally:
        await state.close()


async def test_redis_that_accepts_but_never_answers_raises_state_unavailable_within_3s() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def swallow(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)
        await reader.read()  # read until the client gives up, never answer

    server = await asyncio.start_server(swallow, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    state = RedisState(f"redis://127.0.0.1:{port}/0", "hearth-test-hung:")
    try:
        started = time.monotonic()
        with pytest.raises(StateUnavailable):
            await state.acquire(lid(), (Scope("ep:a", max_concurrency=5),), 1, 30.0)
        assert time.monotonic() - started < 3.0
    finally:
        await state.close()
        server.close()
        for writer in accepted:  # closing the server does not close the connections it accepted
            writer.close()
            await writer.wait_closed()
        await server.wait_closed()


async def test_a_cached_value_is_served_until_its_ttl_passes(state: StateBackend, state_time: StateTime) -> None:
    assert await state.cache_get("k") is None
    await state.cache_set("k", b'{"summary": "x"}', 0.2)
    assert await state.cache_get("k") == b'{"summary": "x"}'
    await state_time.elapse(0.3)
    assert await state.cache_get("k") is None


async def test_the_memory_cache_evicts_the_least_recently_used_beyond_its_bound(monkeypatch: Any) -> None:
    from hearth.state import memory

    monkeypatch.setattr(memory, "MEMORY_CACHE_ENTRIES", 2)
    state = MemoryState()
    await state.cache_set("a", b"1", 60)
    await state.cache_set("b", b"2", 60)
    assert await state.cache_get("a") == b"1"  # a is now the most recently used
    await state.cache_set("c", b"3", 60)
    assert (await state.cache_get("a"), await state.cache_get("b"), await state.cache_get("c")) == (b"1", None, b"3")


async def test_redis_usage_reads_the_window_its_clock_names_not_redis_time(redis_prefix: str) -> None:
    """A backend whose clock stands in another minute than Redis's (a test's clock, or a skewed
    host) reports the counts its admissions wrote, not those of Redis's current minute."""
    clock = FakeClock(float(int(time.time()) // 60 * 60 - 120))  # two minutes behind the real one
    state = RedisState(REDIS_URL, redis_prefix, clock=clock)
    try:
        scope = Scope("caller:skewed", rpm=10)
        assert (await state.acquire(lid(), (scope,), 5, 30.0)).lease is not None
        assert (await state.usage("caller:skewed")).rpm_used == 1
    finally:
        await state.close()
