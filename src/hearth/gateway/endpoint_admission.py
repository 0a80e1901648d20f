"""Endpoint admission: take a concurrency lease (plus RPM/TPM) on one endpoint of the pool, atomically.

Each candidate's endpoint scope and quota-group scope are acquired together in the state backend.
If every candidate is full, the request waits for a release up to ``admission_wait_s`` (bounded by
the call's deadline), then gets 429 ``capacity_exhausted``. A backend fault fails closed: 503.

Every refusal tells the caller truthfully when a retry can succeed (``Retry-After``): the end of the
RPM/TPM window or of a cooldown as the state backend holds it, the remaining cooldown or open
breaker time from the :class:`~hearth.gateway.health.HealthBook` — never a made-up constant.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from hearth.errors import HearthError
from hearth.gateway.health import HealthBook
from hearth.gateway.router import order_candidates
from hearth.ids import new_id
from hearth.registry.snapshot import Endpoint, Model
from hearth.state.base import Lease, Refusal, Scope, StateBackend, StateUnavailable


def scopes_for(ep: Endpoint) -> tuple[Scope, ...]:
    scopes = [Scope(f"ep:{ep.name}", ep.max_concurrency, ep.rpm, ep.tpm)]
    g = ep.quota_group
    if g is not None and (g.max_concurrency or g.rpm or g.tpm or g.daily_tokens):
        scopes.append(Scope(f"qg:{g.name}", g.max_concurrency, g.rpm, g.tpm, g.daily_tokens))
    return tuple(scopes)


def cooldown_key(ep: Endpoint) -> str:
    return f"ep:{ep.name}"


@dataclass(slots=True)
class Admitted:
    endpoint: Endpoint
    lease: Lease


def first_choice(model: Model, health: HealthBook, rng: random.Random) -> Endpoint | None:
    """The endpoint a first attempt at ``model`` would take, when that is routine (breaker closed), at
    the time of ``health``'s clock.

    Governed calls admit it in the same state-backend step as the caller's limits and budgets, so
    the common case costs one round trip instead of two; anything unusual (cooldown, a half-open
    probe, a full endpoint) goes the ordinary way through :func:`admit`."""
    now = health.clock.now()
    choices = order_candidates(model.endpoints, health, now, set(), rng=rng)
    return choices[0] if choices and health.closed(choices[0].name, now) else None


async def admit(state: StateBackend, health: HealthBook, pool: tuple[Endpoint, ...],
                candidates: Callable[[], list[Endpoint]], *, tokens: int, deadline: float, wait_s: float,
                lease_ttl_s: float) -> Admitted:
    """Lease one endpoint from ``candidates()`` (re-evaluated after each wait), in its order."""
    give_up = min(deadline, time.monotonic() + wait_s)
    while True:
        now = health.clock.now()
        choices = candidates()
        if not choices:
            raise _nothing_routable(pool, health, now)
        refusals: list[tuple[Endpoint, Refusal]] = []
        for ep in choices:
            try:
                result = await state.acquire(new_id(), scopes_for(ep), tokens, lease_ttl_s,
                                             cooldown_keys=(cooldown_key(ep),))
            except StateUnavailable as exc:
                raise HearthError("state_backend_unavailable", retry_after=2) from exc
            if result.lease is not None:
                return Admitted(ep, result.lease)
            assert result.refusal is not None
            refusals.append((ep, result.refusal))
            if result.refusal.limit == "cooldown":
                health.cool_down(ep.name, now + result.refusal.retry_after_s)
        remaining = give_up - time.monotonic()
        # A window or a day that ends after the wait would: waiting cannot help, say so at once.
        if remaining <= 0 or all(r.retry_after_s > remaining for _, r in refusals):
            raise _capacity_error(refusals, health, wait_s)
        await state.wait_for_release(min(remaining, 0.25))


def pool_ready_in(pool: tuple[Endpoint, ...], health: HealthBook, now: float) -> float | None:
    """Seconds until some enabled endpoint of ``pool`` may be routed to again (0.0: one may now);
    None if that depends only on half-open probes in flight, or nothing is enabled."""
    waits = [w for e in pool if e.enabled and (w := health.ready_in(e.name, now)) is not None]
    return min(waits) if waits else None


def _capacity_error(refusals: list[tuple[Endpoint, Refusal]], health: HealthBook, waited_s: float) -> HearthError:
    if refusals and all(r.limit == "cooldown" for _, r in refusals):
        wait = min(r.retry_after_s for _, r in refusals)  # the state backend's remaining cooldown TTL
        return HearthError("upstream_rate_limited", "Every endpoint of the model is cooling down after 429s.",
                           retry_after=wait)
    waits = [_refusal_wait(ep, r, health, waited_s) for ep, r in refusals]
    limits = sorted({r.limit for _, r in refusals})
    return HearthError("capacity_exhausted", f"All endpoints of the model are at their limits ({', '.join(limits)}).",
                       details={"limits": limits}, retry_after=min(waits) if waits else None)


def _refusal_wait(ep: Endpoint, refusal: Refusal, health: HealthBook, waited_s: float) -> float:
    """When the refused slot can be expected: the backend knows it for windows and cooldowns; a
    concurrency slot frees when a call in flight ends — about the endpoint's usual call latency,
    or, before any is known, no sooner than the wait for a release that just went unanswered."""
    if refusal.retry_after_s > 0:
        return refusal.retry_after_s
    latency_s = health.get(ep.name).latency_ms / 1000
    return latency_s if latency_s > 0 else waited_s


def _nothing_routable(pool: tuple[Endpoint, ...], health: HealthBook, now: float) -> HearthError:
    """No endpoint may be tried now: say whether that is rate limiting (429) or ill health (503),
    and when the first endpoint will be routable again (a cooldown's end, a half-open probe)."""
    enabled = [e for e in pool if e.enabled]
    if not enabled:
        err = HearthError("no_healthy_endpoint", "Every endpoint of the model is disabled.")
        err.retryable = False  # an operator must enable one: a retry cannot help
        return err
    cooling = [health.get(e.name).cooldown_until - now for e in enabled if health.get(e.name).cooldown_until > now]
    if cooling and len(cooling) == len(enabled):
        return HearthError("upstream_rate_limited", "Every endpoint of the model is cooling down after 429s.",
                           retry_after=min(cooling))
    return HearthError("no_healthy_endpoint", retry_after=pool_ready_in(pool, health, now))
