"""The attempt loop of one model: admit an endpoint, call it, classify failures, fail over.

Failure classes (decided before any retry):

* 429 → the endpoint cools down for Retry-After (else 30–120 s), shared via the state backend;
* 401/403 → the endpoint is disabled (registry + alert log), never retried on that endpoint;
* 408/409/5xx, timeouts, network errors, malformed answers → a breaker failure, then failover;
* any other 4xx → returned to the caller as is, never retried.

All attempts share the call's absolute deadline and at most ``max_attempts`` endpoints. Across
models (a scene's fallbacks) :func:`run_with_fallback` moves on only for retryable failures and
only on the default route. The loop holds no resource itself: each attempt's endpoint lease
belongs to the :class:`~hearth.gateway.call.Call`, which gives it back when the attempt fails.

The error that ends the loop steers the client's own retries: once more than one attempt was made
(or a fallback model was used) it is marked ``failed_over`` — ``x-should-retry: false``, since an
SDK retrying on top would multiply the load on a pool Hearth already walked — and its
``Retry-After`` is the real time until an endpoint of the pool is routable again.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from hearth.errors import HearthError, UpstreamHTTPError, UpstreamNetworkError
from hearth.gateway.call import Call
from hearth.gateway.endpoint_admission import Admitted, admit, cooldown_key, pool_ready_in
from hearth.gateway.health import HealthBook
from hearth.gateway.router import order_candidates
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Endpoint, Model
from hearth.state.base import StateUnavailable

log = get_logger("hearth.gateway")
T = TypeVar("T")
AUTH_DISABLE_S = 3600.0
FALLBACK_CODES = frozenset({"upstream_error", "upstream_timeout", "upstream_rate_limited", "upstream_auth_failed",
                            "no_healthy_endpoint", "capacity_exhausted"})
Op = Callable[[Model, Endpoint, float], Awaitable[T]]


@dataclass(slots=True, frozen=True)
class AttemptPolicy:
    max_attempts: int
    admission_wait_s: float
    tokens: int  # the estimate an endpoint's TPM is charged with
    rng: random.Random  # the Gateway's: the router's weighted draws, the jitter of a 429 cooldown
    on_auth_failure: Callable[[Endpoint, int], Awaitable[None]] | None = None


async def run_with_fallback(call: Call, policy: AttemptPolicy, models: list[Model], default_route: bool,
                            *, op: Op[T]) -> T:
    """The first model's attempts, then (default route only) its fallbacks'; the result of the
    attempt that succeeded — whose endpoint lease is then ``call.current``."""
    ctx = call.ctx
    last: HearthError | None = None
    for i, model in enumerate(models):
        if i > 0:
            if not default_route or last is None or last.code not in FALLBACK_CODES:
                break
            if time.monotonic() >= ctx.deadline:
                break
            ctx.fallback_used = True
            log.info("fallback", from_model=models[i - 1].name, to_model=model.name, reason=last.code)
        ctx.attempted_models.append(model.name)
        try:
            return await run_attempts(call, policy, model, op)
        except HearthError as exc:
            last = exc
    assert last is not None
    if ctx.attempts > 1 or ctx.fallback_used:
        last.failed_over = True
    raise last


async def run_attempts(call: Call, policy: AttemptPolicy, model: Model, op: Op[T]) -> T:
    ctx, health, state = call.ctx, call.deps.health, call.deps.state
    ctx.model = model.name
    tried: set[str] = set()
    last: Exception | None = None
    while ctx.attempts < policy.max_attempts:  # one attempt budget per call, fallbacks included
        if time.monotonic() >= ctx.deadline:
            break
        pre = call.grant.take_preadmitted(model) if call.grant is not None else None
        try:
            adm = pre or await admit(state, health, model.endpoints,
                                     lambda: order_candidates(model.endpoints, health, health.clock.now(), tried,
                                                              rng=policy.rng),
                                     tokens=policy.tokens, deadline=ctx.deadline, wait_s=policy.admission_wait_s,
                                     lease_ttl_s=call.deps.limits.lease_ttl_s)
        except HearthError:
            if last is None:
                raise
            break
        ep = adm.endpoint
        tried.add(ep.name)
        call.attempt_started(adm)
        try:
            return await op(model, ep, max(0.001, min(ep.timeout_s, ctx.deadline - time.monotonic())))
        except UpstreamHTTPError as exc:
            retryable = await _retryable_http(call, policy, ep, exc)
            await call.attempt_ended(verdict_given=retryable, failure=exc)
            if not retryable:
                raise
            last = exc
        except UpstreamNetworkError as exc:
            if health.failed(ep.name, health.clock.now()):
                log.warning("circuit_opened", endpoint=ep.name, reason=str(exc))
            await call.attempt_ended(verdict_given=True, failure=exc)
            last = exc
    raise final_error(last, health, model.endpoints, health.clock.now())


async def _retryable_http(call: Call, policy: AttemptPolicy, ep: Endpoint, exc: UpstreamHTTPError) -> bool:
    health = call.deps.health
    now = health.clock.now()
    if exc.status == 429:
        seconds = exc.retry_after if exc.retry_after is not None else policy.rng.uniform(30, 120)
        health.cool_down(ep.name, now + seconds)
        await _shared_cooldown(call, ep, seconds)
        log.warning("endpoint_cooldown", endpoint=ep.name, seconds=round(seconds, 3))
        return True
    if exc.status in (401, 403):
        health.cool_down(ep.name, now + AUTH_DISABLE_S)
        await _shared_cooldown(call, ep, AUTH_DISABLE_S)
        log.error("endpoint_disabled_alert", endpoint=ep.name, upstream_status=exc.status,
                  reason="upstream rejected the endpoint's credentials", alert=True)
        if policy.on_auth_failure is not None:
            await policy.on_auth_failure(ep, exc.status)
        return True
    if exc.status in (408, 409) or exc.status >= 500:
        if health.failed(ep.name, now):
            log.warning("circuit_opened", endpoint=ep.name, upstream_status=exc.status)
        return True
    return False


async def _shared_cooldown(call: Call, ep: Endpoint, seconds: float) -> None:
    try:
        await call.deps.state.set_cooldown(cooldown_key(ep), seconds)
    except StateUnavailable:
        log.warning("cooldown_not_shared", endpoint=ep.name)


def final_error(last: Exception | None, health: HealthBook, pool: tuple[Endpoint, ...], now: float) -> HearthError:
    """The caller's error once the attempts ran out, with the truth about when to come back."""
    if isinstance(last, UpstreamHTTPError):
        if last.status == 429:  # the endpoints' cooldowns are set by now: when does the first end?
            wait = pool_ready_in(pool, health, now)
            return HearthError("upstream_rate_limited", retry_after=wait if wait is not None else last.retry_after)
        if last.status in (401, 403):  # this endpoint is out for AUTH_DISABLE_S; maybe not the others
            return HearthError("upstream_auth_failed", retry_after=pool_ready_in(pool, health, now))
        return HearthError("upstream_error", f"The upstream provider failed with status {last.status}.",
                           retry_after=last.retry_after)  # e.g. a 503's own Retry-After
    if isinstance(last, UpstreamNetworkError):
        if last.timeout:
            return HearthError("upstream_timeout")
        return HearthError("upstream_error", f"The upstream provider failed: {last}.")
    return HearthError("upstream_timeout", "The call's deadline passed before an endpoint answered.")


__all__ = ["Admitted", "AttemptPolicy", "run_with_fallback"]
