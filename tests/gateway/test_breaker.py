"""Breaker transitions, cooldowns and the final failure classification, on a fake clock.

Pure unit tests of :class:`~hearth.gateway.health.HealthBook` and
:func:`~hearth.gateway.attempts.final_error`: time moves by ``FakeClock.advance``, so an open
circuit, a half-open probe or a cooldown is checked at its exact edges without waiting for it.
(The HTTP-level behaviour — which endpoint a request reaches — is in ``test_failover.py``.)
"""

from __future__ import annotations

import pytest

from hearth.errors import UpstreamHTTPError, UpstreamNetworkError
from hearth.gateway.attempts import final_error
from hearth.gateway.health import HealthBook
from hearth.registry.snapshot import Endpoint
from hearth.testing.fake_clock import FakeClock

OPEN_S = 30.0


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def book(clock: FakeClock) -> HealthBook:
    return HealthBook(failure_threshold=3, open_s=OPEN_S, clock=clock)


def _fail(book: HealthBook, clock: FakeClock, times: int, name: str = "a") -> list[bool]:
    return [book.failed(name, clock.now()) for _ in range(times)]


def _endpoint(name: str, *, enabled: bool = True) -> Endpoint:
    return Endpoint(name=name, provider="p", kind="openai", base_url="http://127.0.0.1:9", upstream_model="up",
                    enabled=enabled)


# --------------------------------------------------------------------------- breaker transitions


def test_an_unknown_endpoint_is_closed_and_routable(book: HealthBook, clock: FakeClock) -> None:
    assert book.can_try("a", clock.now()) and book.closed("a", clock.now())
    assert book.get("a").state(clock.now()) == "closed"
    assert book.ready_in("a", clock.now()) == 0.0


def test_failures_below_the_threshold_keep_the_circuit_closed(book: HealthBook, clock: FakeClock) -> None:
    assert _fail(book, clock, 2) == [False, False]
    assert book.closed("a", clock.now())


def test_a_success_resets_the_consecutive_failures(book: HealthBook, clock: FakeClock) -> None:
    _fail(book, clock, 2)
    book.succeeded("a", latency_ms=10.0)
    assert _fail(book, clock, 2) == [False, False]  # counting starts again
    assert book.closed("a", clock.now())


def test_the_threshold_failure_opens_the_circuit_for_open_s(book: HealthBook, clock: FakeClock) -> None:
    assert _fail(book, clock, 3) == [False, False, True]
    assert not book.can_try("a", clock.now())
    assert book.ready_in("a", clock.now()) == OPEN_S
    clock.advance(OPEN_S - 0.25)
    assert book.get("a").state(clock.now()) == "open" and not book.can_try("a", clock.now())
    assert book.ready_in("a", clock.now()) == 0.25


def test_more_failures_while_open_do_not_extend_the_open_time(book: HealthBook, clock: FakeClock) -> None:
    _fail(book, clock, 3)
    clock.advance(10)
    assert book.failed("a", clock.now()) is False  # a late answer of a call started before it opened
    assert book.ready_in("a", clock.now()) == OPEN_S - 10


def test_after_open_s_exactly_one_half_open_probe_is_let_through(book: HealthBook, clock: FakeClock) -> None:
    _fail(book, clock, 3)
    clock.advance(OPEN_S)
    now = clock.now()
    assert book.get("a").state(now) == "half_open"
    assert book.can_try("a", now) and not book.closed("a", now)  # routine traffic does not probe
    assert book.started("a", now) is True  # the probe
    assert not book.can_try("a", now)  # nobody else while it is in flight
    assert book.ready_in("a", now) is None


def test_a_successful_probe_closes_the_circuit(book: HealthBook, clock: FakeClock) -> None:
    _fail(book, clock, 3)
    clock.advance(OPEN_S)
    book.started("a", clock.now())
    book.succeeded("a", latency_ms=20.0)
    book.finished("a")
    assert book.closed("a", clock.now()) and book.get("a").consecutive_failures == 0
    assert book.started("a", clock.now()) is False  # an ordinary attempt again


def test_a_failed_probe_reopens_the_circuit_for_a_full_open_s(book: HealthBook, clock: FakeClock) -> None:
    _fail(book, clock, 3)
    clock.advance(OPEN_S + 5)
    book.started("a", clock.now())
    assert book.failed("a", clock.now()) is True  # a single failure reopens: it was the probe
    assert not book.can_try("a", clock.now())
    assert book.ready_in("a", clock.now()) == OPEN_S
    clock.advance(OPEN_S)
    assert book.can_try("a", clock.now())  # the next probe is due


def test_a_probe_without_a_verdict_frees_the_half_open_slot(book: HealthBook, clock: FakeClock) -> None:
    _fail(book, clock, 3)
    clock.advance(OPEN_S)
    book.started("a", clock.now())
    book.released_probe("a")  # e.g. the caller's own 400
    assert book.can_try("a", clock.now())
    assert book.started("a", clock.now()) is True  # another probe may go


def test_forget_drops_an_open_circuit(book: HealthBook, clock: FakeClock) -> None:
    _fail(book, clock, 3)
    book.forget("a")
    assert book.closed("a", clock.now())


def test_breakers_are_per_endpoint(book: HealthBook, clock: FakeClock) -> None:
    _fail(book, clock, 3, name="a")
    assert not book.can_try("a", clock.now()) and book.closed("b", clock.now())


def test_in_flight_never_goes_below_zero(book: HealthBook, clock: FakeClock) -> None:
    book.started("a", clock.now())
    book.finished("a")
    book.finished("a")
    assert book.get("a").in_flight == 0


def test_latency_is_an_ewma_seeded_by_the_first_sample(book: HealthBook) -> None:
    book.succeeded("a", latency_ms=100.0)
    assert book.get("a").latency_ms == 100.0
    book.succeeded("a", latency_ms=200.0)
    assert book.get("a").latency_ms == pytest.approx(120.0)


# --------------------------------------------------------------------------- cooldowns and error memory


def test_a_cooldown_blocks_routing_until_it_ends(book: HealthBook, clock: FakeClock) -> None:
    book.cool_down("a", clock.now() + 12)
    assert not book.can_try("a", clock.now()) and not book.closed("a", clock.now())
    assert book.ready_in("a", clock.now()) == 12
    assert book.snapshot("a", clock.now())["cooldown_s"] == 12
    clock.advance(12)
    assert book.can_try("a", clock.now()) and book.closed("a", clock.now())


def test_a_shorter_cooldown_never_shortens_a_longer_one(book: HealthBook, clock: FakeClock) -> None:
    book.cool_down("a", clock.now() + 60)
    book.cool_down("a", clock.now() + 5)
    assert book.ready_in("a", clock.now()) == 60


def test_ready_in_is_the_longer_of_cooldown_and_open_breaker(book: HealthBook, clock: FakeClock) -> None:
    _fail(book, clock, 3)  # open for 30 s
    book.cool_down("a", clock.now() + 45)
    assert book.ready_in("a", clock.now()) == 45
    clock.advance(45)
    assert book.ready_in("a", clock.now()) == 0.0


def test_recent_errors_decay_to_nothing_in_30_s_stamped_by_the_books_clock(book: HealthBook,
                                                                             clock: FakeClock) -> None:
    book.cool_down("a", clock.now() + 1)  # stamps the error with the book's own clock
    assert book.snapshot("a", clock.now())["recent_errors"] == 1.0
    clock.advance(15)
    assert book.snapshot("a", clock.now())["recent_errors"] == 0.5
    book.failed("a", clock.now())
    assert book.snapshot("a", clock.now())["recent_errors"] == 1.5
    clock.advance(30)
    assert book.snapshot("a", clock.now())["recent_errors"] == 0.0


# --------------------------------------------------------------------------- final failure classification


def test_429s_everywhere_say_when_the_first_cooldown_ends(book: HealthBook, clock: FakeClock) -> None:
    pool = (_endpoint("a"), _endpoint("b"))
    book.cool_down("a", clock.now() + 20)
    book.cool_down("b", clock.now() + 8)
    clock.advance(3)
    error = final_error(UpstreamHTTPError(429, {}, retry_after=20), book, pool, clock.now())
    assert (error.code, error.retry_after) == ("upstream_rate_limited", 5)


def test_a_429_on_a_pool_with_nothing_enabled_keeps_the_upstreams_retry_after(book: HealthBook,
                                                                               clock: FakeClock) -> None:
    error = final_error(UpstreamHTTPError(429, {}, retry_after=9), book, (_endpoint("a", enabled=False),),
                        clock.now())
    assert (error.code, error.retry_after) == ("upstream_rate_limited", 9)


@pytest.mark.parametrize("status", [401, 403])
def test_a_credential_failure_says_when_another_endpoint_is_routable(book: HealthBook, clock: FakeClock,
                                                                      status: int) -> None:
    pool = (_endpoint("a"), _endpoint("b"))
    book.cool_down("a", clock.now() + 3600)  # disabled for the credential failure
    _fail(book, clock, 3, name="b")  # b's breaker opens for 30 s
    error = final_error(UpstreamHTTPError(status, {}), book, pool, clock.now())
    assert (error.code, error.retry_after) == ("upstream_auth_failed", OPEN_S)


def test_a_5xx_is_an_upstream_error_carrying_its_own_retry_after(book: HealthBook, clock: FakeClock) -> None:
    error = final_error(UpstreamHTTPError(503, {}, retry_after=4), book, (_endpoint("a"),), clock.now())
    assert (error.code, error.retry_after) == ("upstream_error", 4)
    assert "503" in error.message


def test_network_failures_are_timeouts_or_upstream_errors(book: HealthBook, clock: FakeClock) -> None:
    pool = (_endpoint("a"),)
    assert final_error(UpstreamNetworkError("read timed out", timeout=True), book, pool, clock.now()).code \
        == "upstream_timeout"
    refused = final_error(UpstreamNetworkError("connection refused"), book, pool, clock.now())
    assert refused.code == "upstream_error" and "connection refused" in refused.message


def test_no_attempt_at_all_means_the_deadline_passed(book: HealthBook, clock: FakeClock) -> None:
    error = final_error(None, book, (_endpoint("a"),), clock.now())
    assert error.code == "upstream_timeout" and "deadline" in error.message
