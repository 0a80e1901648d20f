"""Joint admission: a governed call takes its caller-level limits, budget reservations, nonce and its
first endpoint's slots in one atomic state-backend step — and gives every part back exactly once.

The HTTP tests run a real Hearth server against a real fake upstream and read the server's own
state backend (memory or Redis) on the server's loop; the function-level tests drive
:func:`admit_caller` / :func:`finish_caller` against real ``MemoryState`` and ``RedisState``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from sqlalchemy import event, select

from hearth.auth.signing import signed_headers
from hearth.gateway.budget import Applicable, reservation_charges
from hearth.gateway.budget_ledger import BudgetLedger, Charge
from hearth.gateway.caller_admission import AdmissionLimits, CallerAdmission, CallerGrant, admit_caller, finish_caller
from hearth.gateway.state_recovery import StateRecovery
from hearth.registry.snapshot import Budget, Endpoint, Model, QuotaGroup, Registry
from hearth.state.base import Scope, ScopeUsage
from hearth.state.memory import MemoryState
from hearth.store.db import create_engine, migrate
from hearth.store.tables import budget_ledger
from hearth.testing.fake_clock import RunningClock
from hearth.testing.fake_upstream import FakeBehavior, prompt_tokens_for
from tests.support import (
    ADMIN,
    AUTH,
    REDIS_SERVER_BINARY,
    REDIS_URL,
    chat_body,
    gateway_registry,
    ledger_summary,
    start_redis_server,
)

MAX_TOKENS = 20  # the fake answers 20 completion tokens unless capped; this caps at exactly 20
CALLER = "caller:tester"
BACKENDS = pytest.mark.parametrize("backend", ["memory", "redis"])
KEY = "joint-signing-key-0123456789abcdef"
PATH = "/v1/chat/completions"


# --------------------------------------------------------------------------- helpers


def _ep(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "max_concurrency": 100, "rpm": 10_000, **extra}


def _registry(endpoints: list[dict[str, Any]], *, limits: dict[str, Any] | None = None, budget: bool = True,
              **caller: Any) -> dict[str, Any]:
    """One model ``m`` over ``endpoints``; caller ``tester`` with ``limits`` and a roomy token budget."""
    reg = gateway_registry(endpoints)
    reg["callers"] = [{"name": "tester", "key": "test-key-123", **({"limits": limits} if limits else {}), **caller}]
    if budget:
        reg["budgets"] = [{"name": "daily", "caller": "tester", "scope": "caller", "period": "day",
                           "unit": "tokens", "limit": 10_000_000}]
    return reg


def _backend(backend: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if backend == "redis":
        return {"state_backend": "redis", "redis_prefix": request.getfixturevalue("redis_prefix")}
    return {}


async def _on_server(server: Any, coro: Awaitable[Any]) -> Any:
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, server.loop))


async def _usage(server: Any, key: str) -> ScopeUsage:
    usage: ScopeUsage = await _on_server(server, server.runtime.state.usage(key))
    return usage


async def _flushed(server: Any) -> None:
    await _on_server(server, server.runtime.ledger.flush())


@pytest.fixture
def hearth(hearth_server: Any) -> Iterator[Callable[..., Any]]:
    """``hearth_server`` whose servers write their queued ledger and request-log rows before they stop.

    ``BudgetLedger.stop`` cancels its writer, which may be in the middle of a transaction; the final
    flush can then wait out SQLite's 30 s busy timeout (and the server fails to stop within 20 s) or
    re-insert rows that were already committed (``test_stopping_the_ledger_during_a_commit_loses_no_row``).
    With nothing left to write, stopping is quick."""
    started: list[Any] = []

    def start(registry: dict[str, Any], **settings: Any) -> Any:
        server = hearth_server(registry, **settings)
        # RPM counts in one-minute windows: the server's state backend starts the test at the
        # beginning of a minute (time still flows), so no count straddles a window's end.
        server.runtime.state.clock = RunningClock.at_minute_start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.call(server.runtime.ledger.flush())
        server.call(server.runtime.log_writer.flush())


async def _chat(http: Any, server: Any) -> Any:
    return await http.post(server.base_url + PATH, json=chat_body(max_tokens=MAX_TOKENS), headers=AUTH)


def _actual_tokens() -> int:
    """What the fake reports for one ``chat_body(max_tokens=20)`` call."""
    return prompt_tokens_for(chat_body()["messages"]) + MAX_TOKENS


async def _until(check: Callable[[], Awaitable[bool]], timeout_s: float = 3.0) -> bool:
    give_up = time.monotonic() + timeout_s
    while time.monotonic() < give_up:
        if await check():
            return True
        await asyncio.sleep(0.02)
    return False


# --------------------------------------------------------------------------- 1. everything is given back


@BACKENDS
async def test_governed_calls_release_everything_and_count_rpm_once_per_scope(
        backend, fake, hearth, http, request, tmp_path: Path):
    db = f"sqlite+aiosqlite:///{tmp_path}/joint.db"
    # The endpoint is narrower than the caller, so some joint attempts find it full and go the ordinary way.
    registry = _registry([_ep("a", fake.base_url, max_concurrency=3)],
                         limits={"caller": {"concurrency": 4, "rpm": 1000}})
    server = hearth(registry, database_url=db, limit_wait_s=10, admission_wait_s=10,
                           **_backend(backend, request))
    fake.set_defaults(latency_ms=30)
    n = 8
    for _ in range(n):
        r = await _chat(http, server)
        assert r.status_code == 200, r.text
    for key in ("ep:a", CALLER):
        assert (await _usage(server, key)).in_flight == 0, key
    parallel = 24
    results = await asyncio.gather(*[_chat(http, server) for _ in range(parallel)])
    assert [r.status_code for r in results] == [200] * parallel, [r.text[:200] for r in results if r.status_code != 200]
    assert fake.stats.max_in_flight <= 3
    total = n + parallel
    for key in ("ep:a", CALLER):
        usage = await _usage(server, key)
        assert usage.in_flight == 0, key
        assert usage.rpm_used == total, key  # each call counted once on each scope
    await _flushed(server)
    ledger = await ledger_summary(db)
    assert ledger["duplicates"] == [] and ledger["open"] == 0
    assert ledger["reserved_calls"] == ledger["settled_calls"] == total  # in fewer rows: groups
    assert ledger["charged"] == total * _actual_tokens()


# --------------------------------------------------------------------------- 2. endpoint full


@BACKENDS
async def test_endpoint_full_the_second_call_waits_in_ordinary_admission_and_spends_one_rpm(
        backend, fake, hearth, http, request):
    registry = _registry([_ep("a", fake.base_url, max_concurrency=1)],
                         limits={"caller": {"concurrency": 2, "rpm": 100}})
    server = hearth(registry, limit_wait_s=0, admission_wait_s=10, **_backend(backend, request))
    fake.script(FakeBehavior(latency_ms=800))  # the first call holds the endpoint; the second is fast
    first_done = second_done = 0.0

    async def first() -> Any:
        nonlocal first_done
        r = await _chat(http, server)
        first_done = time.monotonic()
        return r

    async def second() -> Any:
        nonlocal second_done
        r = await _chat(http, server)
        second_done = time.monotonic()
        return r

    holder = asyncio.create_task(first())

    async def upstream_busy() -> bool:
        return fake.stats.in_flight >= 1

    assert await _until(upstream_busy), "the first call never reached the upstream"
    waiter = asyncio.create_task(second())

    async def caller_part_taken() -> bool:
        return (await _usage(server, CALLER)).in_flight == 2

    # The joint step was refused by the endpoint only: the caller's part was taken alone and the
    # call now waits for the endpoint in the attempt loop.
    assert await _until(caller_part_taken), "the second call never took its caller slot"
    assert (await _usage(server, "ep:a")).in_flight == 1
    assert not waiter.done()
    r1, r2 = await asyncio.wait_for(asyncio.gather(holder, waiter), 15)
    assert (r1.status_code, r2.status_code) == (200, 200), (r1.text, r2.text)
    assert second_done >= first_done - 0.05  # it waited for the first to end
    assert fake.stats.max_in_flight == 1 and fake.stats.requests == 2
    caller, ep = await _usage(server, CALLER), await _usage(server, "ep:a")
    assert caller.rpm_used == 2  # the refused joint attempt consumed nothing
    assert ep.rpm_used == 2
    assert caller.in_flight == 0 and ep.in_flight == 0


# --------------------------------------------------------------------------- 3. failover


@BACKENDS
async def test_failover_from_a_500_first_choice_frees_both_endpoints_and_charges_the_budget_once(
        backend, fake, fake2, hearth, http, request, tmp_path: Path):
    db = f"sqlite+aiosqlite:///{tmp_path}/joint.db"
    # `a` has the better priority: it is the first choice, admitted jointly with the caller.
    registry = _registry([_ep("a", fake.base_url, priority=0), _ep("b", fake2.base_url, priority=1)],
                         limits={"caller": {"concurrency": 2, "rpm": 100}})
    server = hearth(registry, database_url=db, **_backend(backend, request))
    fake.set_defaults(status=500)
    r = await _chat(http, server)
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-endpoint"] == "b" and r.headers["x-hearth-attempts"] == "2"
    assert fake.stats.requests == 1 and fake2.stats.requests == 1
    for key in ("ep:a", "ep:b", CALLER):
        usage = await _usage(server, key)
        assert usage.in_flight == 0, key
        assert usage.rpm_used == 1, key
    await _flushed(server)
    ledger = await ledger_summary(db)
    assert ledger["duplicates"] == [] and ledger["open"] == 0
    assert ledger["reserved_calls"] == ledger["settled_calls"] == len(ledger["settles"]) == 1
    assert ledger["charged"] == _actual_tokens()
    items = (await http.get(server.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
    daily = next(i for i in items if i["budget"] == "daily")
    assert daily["used"] == _actual_tokens() and daily["spent"] == _actual_tokens() and daily["reserved"] == 0


# --------------------------------------------------------------------------- 4. function level


@pytest.fixture
async def ledger(tmp_path: Path, state: Any) -> AsyncIterator[BudgetLedger]:
    """A real ledger on a real database; the state backend's epoch installed, as at start-up."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/ledger.db")
    await migrate(engine)
    book = BudgetLedger(engine, state)
    book.recovery = StateRecovery(state, engine, Registry, reservation_ttl_s=30.0,  # type: ignore[attr-defined]
                                  open_within_s=600.0, reservation_window_s=2.0)
    await book.recovery.ensure()  # type: ignore[attr-defined]
    yield book
    await book.stop()
    await engine.dispose()


async def _admit(state: Any, ledger: BudgetLedger, scopes: tuple[Scope, ...], budgets: list[Applicable],
                 charges: Any, tokens: int, wait_s: float, ttl_s: float, nonce: tuple[str, float] | None = None,
                 *, endpoint: Endpoint | None = None, window_s: float = 5.0) -> CallerGrant:
    return await admit_caller(state, ledger, ledger.recovery,  # type: ignore[attr-defined]
                              CallerAdmission(scopes, budgets, charges, tokens, nonce, endpoint),
                              limits=AdmissionLimits(wait_s, ttl_s, 2.0, window_s))


GROUP = QuotaGroup("g", max_concurrency=10, rpm=1000)
EP = Endpoint(name="e1", provider="p", kind="openai", base_url="http://127.0.0.1:9", upstream_model="up",
              quota_group=GROUP, max_concurrency=5, rpm=1000, tpm=1_000_000)
OTHER = Endpoint(name="e2", provider="p", kind="openai", base_url="http://127.0.0.1:9", upstream_model="up",
                 max_concurrency=5)
BUDGET = Budget(name="b", caller="c", scope="caller", subject="c", period="total", unit="tokens", limit=10_000)
CALLER_SCOPE = Scope("caller:c", max_concurrency=5, rpm=100, tpm=100_000)
TOKENS = 50


def _governed(kind: str) -> tuple[tuple[Scope, ...], list[Applicable], tuple[str, float] | None]:
    """Caller scopes, budgets and nonce for each kind of governed call."""
    budgets = [Applicable(BUDGET, "c", f"b|c|c|{uuid.uuid4().hex[:8]}", 0.0)]
    nonce = (f"nonce-{uuid.uuid4().hex}", 60.0)
    return {"limits": ((CALLER_SCOPE,), [], None),
            "limits+budget": ((CALLER_SCOPE,), budgets, None),
            "budget": ((), budgets, None),
            "nonce": ((), [], nonce),
            "everything": ((CALLER_SCOPE,), budgets, nonce)}[kind]


@pytest.mark.parametrize("kind", ["limits", "limits+budget", "budget", "nonce", "everything"])
async def test_an_unused_preadmitted_endpoint_lease_is_released_by_finish_caller(state, state_time, ledger, kind):
    await state_time.away_from_minute_edge()
    scopes, budgets, nonce = _governed(kind)
    charges = reservation_charges(budgets, TOKENS, 0)
    grant = await _admit(state, ledger, scopes, budgets, charges, TOKENS, 0.0, 30.0, nonce, endpoint=EP)
    assert grant.preadmitted is not None and grant.preadmitted.endpoint is EP
    assert {s.key for s in grant.preadmitted.lease.scopes} == {"ep:e1", "qg:g"}
    assert grant.lease is not None and grant.lease.scopes == scopes
    for key in ("ep:e1", "qg:g"):
        usage = await state.usage(key)
        assert (usage.in_flight, usage.rpm_used) == (1, 1), key
    assert (await state.usage("ep:e1")).tpm_used == TOKENS
    if charges:
        assert await state.counters((charges[0].key,)) == (TOKENS,)
    # The call fails before its first attempt: the pre-admitted lease is never taken.
    await finish_caller(state, ledger, grant, None, actual_amounts=tuple(0 for _ in charges))
    assert grant.finished and grant.preadmitted is None
    for key in ("ep:e1", "qg:g", "caller:c"):
        usage = await state.usage(key)
        assert usage.in_flight == 0, key
    assert (await state.usage("ep:e1")).rpm_used == 1  # counted once, never given back (RPM is spent)
    if charges:
        assert await state.counters((charges[0].key,)) == (0,)  # the reservation was refunded
    await finish_caller(state, ledger, grant, None, actual_amounts=tuple(0 for _ in charges))  # a second: no-op
    assert (await state.usage("ep:e1")).in_flight == 0


async def test_a_full_endpoint_takes_the_callers_part_alone(state, state_time, ledger):
    await state_time.away_from_minute_edge()
    full = Endpoint(name="full", provider="p", kind="openai", base_url="http://127.0.0.1:9", upstream_model="up",
                    max_concurrency=1, rpm=1000)
    held = await state.acquire(uuid.uuid4().hex, (Scope("ep:full", 1, 1000),), TOKENS, 30.0)
    assert held.lease is not None
    scopes, budgets, _ = _governed("limits+budget")
    charges = reservation_charges(budgets, TOKENS, 0)
    grant = await _admit(state, ledger, scopes, budgets, charges, TOKENS, 0.0, 30.0, endpoint=full)
    assert grant.preadmitted is None and grant.lease is not None and grant.lease.scopes == scopes
    caller, ep = await state.usage("caller:c"), await state.usage("ep:full")
    assert (caller.in_flight, caller.rpm_used) == (1, 1)
    assert (ep.in_flight, ep.rpm_used) == (1, 1)  # only the holder's: the refused joint step took nothing
    await finish_caller(state, ledger, grant, None, actual_amounts=(0,))
    await state.release(held.lease)
    assert (await state.usage("caller:c")).in_flight == 0 and (await state.usage("ep:full")).in_flight == 0


async def test_a_reservation_committed_after_its_window_proceeds_once_checked(state, ledger):
    scopes, budgets, _ = _governed("limits+budget")
    charges = reservation_charges(budgets, TOKENS, 0)
    grant = await _admit(state, ledger, scopes, budgets, charges, TOKENS, 0.0, 30.0, window_s=0.0)
    assert grant.lease is not None  # no rebuild read the ledger since its admission: counted
    assert ledger.reservations_late == (1 if state.shared else 0)  # only a shared backend asks
    assert await state.counters((budgets[0].key,)) == (TOKENS,)
    await finish_caller(state, ledger, grant, None, actual_amounts=(0,))


async def test_a_cooling_endpoint_takes_the_callers_part_alone(state, state_time, ledger):
    await state_time.away_from_minute_edge()
    await state.set_cooldown("ep:e1", 30.0)
    grant = await _admit(state, ledger, (CALLER_SCOPE,), [], (), TOKENS, 0.0, 30.0, endpoint=EP)
    assert grant.preadmitted is None and grant.lease is not None
    assert (await state.usage("caller:c")).rpm_used == 1
    assert (await state.usage("ep:e1")).rpm_used == 0 and (await state.usage("qg:g")).rpm_used == 0
    await finish_caller(state, ledger, grant, None, actual_amounts=())
    assert (await state.usage("caller:c")).in_flight == 0


async def test_take_preadmitted_only_for_a_model_served_by_it_and_only_once(state, ledger):
    grant = await _admit(state, ledger, (CALLER_SCOPE,), [], (), TOKENS, 0.0, 30.0, endpoint=EP)
    other_model = Model("other", "chat", (OTHER,))
    model = Model("m", "chat", (OTHER, EP))
    assert grant.take_preadmitted(other_model) is None
    pre = grant.take_preadmitted(model)
    assert pre is not None and pre.endpoint is EP
    assert grant.take_preadmitted(model) is None
    await state.release(pre.lease)  # the attempt loop releases what it took
    await finish_caller(state, ledger, grant, None, actual_amounts=())
    for key in ("ep:e1", "qg:g", "caller:c"):
        assert (await state.usage(key)).in_flight == 0, key


# --------------------------------------------------------------------------- 5. round trips (Redis)


@pytest.fixture
def counting_redis(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str, bool]]:
    """``(url, prefix, private)``: a redis-server of this test's own when the binary exists, so its
    command counters see only this test; otherwise the shared Redis (whose counters other
    processes may bump, so the caller of this fixture measures more than once)."""
    if REDIS_SERVER_BINARY is None:
        yield REDIS_URL, request.getfixturevalue("redis_prefix"), False
        return
    proc, port = start_redis_server(tmp_path / "redis" / "redis.log")
    try:
        yield f"redis://127.0.0.1:{port}/0", "hearth-rt:", True
    finally:
        proc.kill()
        proc.wait(5)


def _script_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


async def _round_trips(client: redis.Redis, one_call: Callable[[], Awaitable[None]], m: int, expected: int,
                       tries: int) -> int:
    """Script calls made by ``m`` sequential calls. Outside noise only ever adds, so the least of up
    to ``tries`` measurements bounds the true count from above."""
    best: int | None = None
    for _ in range(tries):
        before = _script_calls(client)
        for _ in range(m):
            await one_call()
        used = _script_calls(client) - before
        best = used if best is None else min(best, used)
        if best <= expected:
            break
    assert best is not None
    return best


ROUND_TRIP_CASES = {
    "limits+budget": {"limits": {"caller": {"concurrency": 50, "rpm": 10_000}}, "budget": True},
    "no limits": {"limits": None, "budget": False},
    "budget only": {"limits": None, "budget": True},
    "signed, no limits": {"limits": None, "budget": False, "signed": True},
    "signed, limits+budget": {"limits": {"caller": {"concurrency": 50, "rpm": 10_000}}, "budget": True,
                              "signed": True},
}


@pytest.mark.parametrize("case", list(ROUND_TRIP_CASES))
async def test_a_call_costs_two_script_round_trips(case, counting_redis, fake, hearth, http):
    await _round_trip_check(ROUND_TRIP_CASES[case], counting_redis, fake, hearth, http)


async def test_a_limits_only_caller_costs_two_script_round_trips(counting_redis, fake, hearth, http):
    case = {"limits": {"caller": {"concurrency": 50, "rpm": 10_000}}, "budget": False}
    await _round_trip_check(case, counting_redis, fake, hearth, http)


async def _round_trip_check(case: dict[str, Any], counting_redis: tuple[str, str, bool], fake: Any,
                            hearth: Any, http: Any) -> None:
    url, prefix, private = counting_redis
    signed = case.get("signed", False)
    extra = {"signing_key": KEY, "require_signature": True} if signed else {}
    registry = _registry([_ep("a", fake.base_url)], limits=case["limits"], budget=case["budget"], **extra)
    server = hearth(registry, state_backend="redis", redis_url=url, redis_prefix=prefix)
    body = orjson.dumps(chat_body(max_tokens=MAX_TOKENS))

    async def one_call() -> None:
        headers = {**AUTH, "Content-Type": "application/json"}
        if signed:
            headers |= signed_headers(KEY, "POST", server.base_url + PATH, body)
        r = await http.post(server.base_url + PATH, content=body, headers=headers)
        assert r.status_code == 200, r.text

    for _ in range(2):  # warm up: scripts loaded (no NOSCRIPT fallback), connection dialled
        await one_call()
    m = 10
    client = redis.Redis.from_url(url, socket_connect_timeout=1)
    try:
        used = await _round_trips(client, one_call, m, 2 * m, 1 if private else 8)
    finally:
        client.close()
    assert used == 2 * m
    assert (await _usage(server, "ep:a")).in_flight == 0


# --------------------------------------------------------------------------- the ledger stops cleanly


async def test_stopping_the_ledger_during_a_commit_loses_no_row(tmp_path: Path):
    """Through SQLAlchemy (a URL with options takes the general way, not the one-hop writer of a plain file)."""
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/ledger.db?timeout=30")
    await migrate(engine)
    committing = asyncio.Event()
    try:
        ledger = BudgetLedger(engine, MemoryState(), flush_s=0.01)
        first = await ledger.reserve("c1", (Charge("daily", "daily|c|c|total", 100),), deadline=time.monotonic() + 30)
        second = await ledger.reserve("c2", (Charge("daily", "daily|c|c|total", 200),), deadline=time.monotonic() + 30)

        @event.listens_for(engine.sync_engine, "commit")
        def _on_commit(_conn: Any) -> None:
            committing.set()

        first.settle((100,), epoch="")
        ledger.start()
        await asyncio.wait_for(committing.wait(), 5)  # the writer's COMMIT is on its way
        second.settle((200,), epoch="")  # a call settled meanwhile
        await asyncio.wait_for(ledger.stop(), 40)  # what a graceful shutdown does
        async with engine.connect() as conn:
            written = sorted((r.kind, r.amount) for r in (await conn.execute(select(budget_ledger))).all())
        assert written == [("reserve", 100), ("reserve", 200), ("settle", 100), ("settle", 200)]
        assert ledger.backlog == 0
    finally:
        await engine.dispose()


async def test_stopping_the_ledger_during_a_one_hop_settlement_batch_loses_no_row(tmp_path: Path):
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/ledger.db")  # a plain file: the one-hop writer
    await migrate(engine)
    try:
        ledger = BudgetLedger(engine, MemoryState(), flush_s=30)
        first = await ledger.reserve("c1", (Charge("daily", "daily|c|c|total", 100),), deadline=time.monotonic() + 30)
        second = await ledger.reserve("c2", (Charge("daily", "daily|c|c|total", 200),), deadline=time.monotonic() + 30)
        first.settle((100,), epoch="")
        flushing = asyncio.create_task(ledger.flush())
        await asyncio.sleep(0)  # the batch (the first settlement) is on its way to the writer thread
        second.settle((200,), epoch="")  # a call settled meanwhile
        await asyncio.wait_for(ledger.stop(), 40)  # what a graceful shutdown does
        await flushing
        async with engine.connect() as conn:
            written = sorted((r.kind, r.amount) for r in (await conn.execute(select(budget_ledger))).all())
        assert written == [("reserve", 100), ("reserve", 200), ("settle", 100), ("settle", 200)]
        assert ledger.backlog == 0 and ledger.stats()["settlement_batches_one_hop"] >= 1
    finally:
        await engine.dispose()
