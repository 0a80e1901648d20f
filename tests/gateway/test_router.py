"""The routing core as fast unit tests: the endpoint order (seeded RNG, fixed clock), capability
narrowing, priority tiers, exclusion. No server: these are pure functions of the pool and its health."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from hearth.errors import HearthError
from hearth.gateway.endpoint_admission import first_choice
from hearth.gateway.endpoint_capabilities import capable_models, required_capabilities
from hearth.gateway.health import HealthBook
from hearth.gateway.router import order_candidates
from hearth.registry.snapshot import Endpoint, Model
from hearth.testing.fake_clock import FakeClock

NOW = 1_780_000_000.0


def ep(name: str, **extra: Any) -> Endpoint:
    return Endpoint(name=name, provider="p", kind="openai", base_url="http://x", upstream_model="up", **extra)


def firsts(pool: list[Endpoint], health: HealthBook, draws: int, seed: int = 7) -> Counter[str]:
    rng = random.Random(seed)
    return Counter(order_candidates(pool, health, NOW, set(), rng=rng)[0].name for _ in range(draws))


# ---- weights, load, determinism ---------------------------------------------------------------
def test_weights_spread_first_choices_in_proportion() -> None:
    counts = firsts([ep("a", weight=3), ep("b", weight=1)], HealthBook(), 20_000)
    assert 2.85 < counts["a"] / counts["b"] < 3.15, counts  # 3:1; ignored weights would give 1:1


def test_every_endpoint_of_the_tier_is_in_the_order_once() -> None:
    pool = [ep("a", weight=5), ep("b", weight=1), ep("c", weight=0.1)]
    for _ in range(50):
        order = order_candidates(pool, HealthBook(), NOW, set(), rng=random.Random())
        assert sorted(e.name for e in order) == ["a", "b", "c"]


def test_the_same_seed_gives_the_same_order() -> None:
    pool = [ep(n, weight=w) for n, w in (("a", 1), ("b", 2), ("c", 3), ("d", 4))]
    one = [[e.name for e in order_candidates(pool, HealthBook(), NOW, set(), rng=rng)]
           for rng in [random.Random(42)] for _ in range(20)]
    two = [[e.name for e in order_candidates(pool, HealthBook(), NOW, set(), rng=rng)]
           for rng in [random.Random(42)] for _ in range(20)]
    assert one == two


def test_a_loaded_endpoint_gets_fewer_first_choices() -> None:
    health = HealthBook()
    health.get("a").in_flight = 9  # 9 of 10 slots taken: its weight counts a tenth
    counts = firsts([ep("a", max_concurrency=10), ep("b", max_concurrency=10)], health, 20_000)
    assert 0.07 < counts["a"] / counts["b"] < 0.13, counts


def test_recent_errors_lower_an_endpoints_share() -> None:
    health = HealthBook()
    health.failed("a", NOW)  # one recent error: its weight is halved (the circuit stays closed)
    counts = firsts([ep("a"), ep("b")], health, 20_000)
    assert 0.45 < counts["a"] / counts["b"] < 0.55, counts


# ---- tiers, exclusion, health -----------------------------------------------------------------
def test_lower_priority_numbers_always_come_first_whatever_the_weight() -> None:
    pool = [ep("backup", priority=1, weight=100), ep("main-1", priority=0), ep("main-2", priority=0)]
    rng = random.Random(1)
    for _ in range(200):
        order = [e.name for e in order_candidates(pool, HealthBook(), NOW, set(), rng=rng)]
        assert sorted(order[:2]) == ["main-1", "main-2"] and order[2] == "backup"


def test_excluded_disabled_cooling_and_open_endpoints_are_left_out() -> None:
    health = HealthBook(failure_threshold=1, open_s=30)
    health.cool_down("cooling", NOW + 60)
    health.failed("open", NOW)
    pool = [ep("tried"), ep("off", enabled=False), ep("cooling"), ep("open"), ep("ok", priority=5)]
    order = order_candidates(pool, health, NOW, {"tried"}, rng=random.Random(3))
    assert [e.name for e in order] == ["ok"]
    # once the breaker's open time has passed, the half-open endpoint is offered again (one probe)
    later = order_candidates(pool, health, NOW + 31, {"tried"}, rng=random.Random(3))
    assert [e.name for e in later] == ["open", "ok"]


# ---- capabilities ----------------------------------------------------------------------------
TOOL = {"type": "function", "function": {"name": "f"}}


@pytest.mark.parametrize(("body", "stream", "kind", "needs"), [
    ({"messages": [{"role": "user", "content": "hi"}]}, False, "chat", {"chat"}),
    ({"messages": []}, True, "chat", {"chat", "streaming"}),
    ({"tools": [TOOL]}, False, "chat", {"chat", "tools"}),
    ({"functions": [{"name": "f"}]}, False, "chat", {"chat", "tools"}),
    ({"tools": []}, False, "chat", {"chat"}),  # an empty list asks for nothing
    ({"response_format": {"type": "json_object"}}, False, "chat", {"chat", "json"}),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, True, "chat",
     {"chat", "streaming", "json"}),
    ({"response_format": {"type": "text"}}, False, "chat", {"chat"}),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                 {"type": "image_url", "image_url": {"url": "u"}}]}]},
     False, "chat", {"chat", "vision"}),
    ({"input": "x"}, False, "embedding", {"embeddings"}),
])
def test_what_a_request_needs_is_read_from_its_body_and_route(body: dict[str, Any], stream: bool, kind: str,
                                                              needs: set[str]) -> None:
    assert required_capabilities(body, kind=kind, stream=stream) == needs


def test_a_pool_is_narrowed_to_the_endpoints_with_every_needed_capability() -> None:
    plain, tooled = ep("plain"), ep("tooled", capabilities=frozenset({"chat", "streaming", "tools"}))
    model = Model("m", "chat", (plain, tooled))
    assert capable_models([model], frozenset({"chat"})) == [model]  # all qualify: the model itself
    (narrowed,) = capable_models([model], frozenset({"chat", "tools"}))
    assert narrowed.name == "m" and narrowed.endpoints == (tooled,)
    order = order_candidates(narrowed.endpoints, HealthBook(), NOW, set(), rng=random.Random(0))
    assert order == [tooled]


def test_models_without_a_capable_endpoint_are_skipped_for_the_next() -> None:
    first = Model("first", "chat", (ep("a"),))
    fallback = Model("fallback", "chat", (ep("b", capabilities=frozenset({"chat", "vision"})),))
    assert [m.name for m in capable_models([first, fallback], frozenset({"chat", "vision"}))] == ["fallback"]


def test_nothing_capable_is_unsupported_feature_naming_what_is_missing() -> None:
    model = Model("m", "chat", (ep("a"), ep("b", capabilities=frozenset({"chat", "tools"}))))
    with pytest.raises(HearthError) as missing:
        capable_models([model], frozenset({"chat", "streaming", "json"}))
    assert missing.value.code == "unsupported_feature" and missing.value.status == 400
    assert missing.value.param == "response_format" and "json" in missing.value.message
    # each capability exists, but no endpoint has both: the message says so
    with pytest.raises(HearthError) as together:
        capable_models([model], frozenset({"chat", "streaming", "tools"}))
    assert "streaming and tools together" in together.value.message


def test_the_first_choice_is_judged_at_the_time_of_the_health_books_clock() -> None:
    clock = FakeClock(NOW)
    health = HealthBook(failure_threshold=1, open_s=30, clock=clock)
    model = Model("m", "chat", (ep("a"), ep("b", priority=1)))
    health.cool_down("a", NOW + 10)
    assert first_choice(model, health, random.Random(0)) == model.endpoints[1]
    clock.advance(10.5)  # the cooldown is over by the book's clock: no real second passed
    assert first_choice(model, health, random.Random(0)) == model.endpoints[0]
    health.failed("a", clock.now())  # open for 30 s
    assert first_choice(model, health, random.Random(0)) == model.endpoints[1]
    clock.advance(31)  # half-open: a probe is due, which is not routine, so no pre-admitted first choice
    assert first_choice(model, health, random.Random(0)) is None
