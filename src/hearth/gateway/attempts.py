"""The attempt loop of one model: admit an endpoint, call it, classify failures, fail over.

Failure classes (decided before any retry):

* 429 → the endpoint cools down for Retry-After (else 30–120 s), shared via the state backend;
* 401/403 → the endpoint is disabled (registry + alert log), never retried on that endpoint;
* 408/409/5xx, timeouts, network errors, malformed answers → a breaker failure, then failover;
* any other 4xx → returned to the caller as is, never retried.

All attempts share the call's absolute deadline and at most ``max_attempts`` endpoints. Across
models (a scene's fallbacks) :func:`run_with_fallback` moves on only for retryable failures and
only on the default route.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from hearth.errors import HearthError, UpstreamHTTPError, UpstreamNetworkError
from hearth.gateway.admission import Admitted, admit, cooldown_key
from hearth.gateway.context import CallContext
from hearth.gateway.router import order_candidates
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Endpoint, Model
from hearth.state.base import StateUnavailable

if TYPE_CHECKING:
    from hearth.gateway.call import Gateway

log = get_logger("hearth.gateway")
T = TypeVar("T")
AUTH_DISABLE_S = 3600.0
FALLBACK_CODES = frozenset({"upstream_error", "upstream_timeout", "upstream_rate_limited", "upstream_auth_failed",
                            "no_healthy_endpoint", "capacity_exhausted"})
Op = Callable[[Model, Endpoint, float], Awaitable[T]]


async def run_with_fallback(gw: Gateway, ctx: CallContext, models: list[Model], default_route: bool,
                            tokens: int, op: Op[T]) -> tuple[T, Admitted]:
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
            return await run_attempts(gw, ctx, model, tokens, op)
        except HearthError as exc:
            last = exc
    assert last is not None
    raise last


async def run_attempts(gw: Gateway, ctx: CallContext, model: Model, tokens: int, op: Op[T]) -> tuple[T, Admitted]:
    ctx.model = model.name
    settings = gw.settings
    tried: set[str] = set()
    last: Exception | None = None
    while ctx.attempts < settings.max_attempts:  # one attempt budget per call, fallbacks included
        if time.monotonic() >= ctx.deadline:
            break
        pre = ctx.grant.take_preadmitted(model) if ctx.grant is not None else None
        try:
            adm = pre or await admit(gw.state, gw.health, model.endpoints,
                                     lambda: order_candidates(model.endpoints, gw.health, time.time(), tried),
                                     tokens, ctx.deadline, settings.admission_wait_s, gw.lease_ttl_s)
        except HearthError:
            if last is None:
                raise
            break
        ep = adm.endpoint
        tried.add(ep.name)
        ctx.attempts += 1
        ctx.endpoint = ep
        gw.health.started(ep.name, time.time())
        try:
            result = await op(model, ep, max(0.001, min(ep.timeout_s, ctx.deadline - time.monotonic())))
        except UpstreamHTTPError as exc:
            gw.health.finished(ep.name)
            await gw.release(adm.lease, None)
            if not await _retryable_http(gw, ep, exc):
                gw.health.released_probe(ep.name)
                raise
            last = exc
        except UpstreamNetworkError as exc:
            gw.health.finished(ep.name)
            await gw.release(adm.lease, None)
            if gw.health.failed(ep.name, time.time()):
                log.warning("circuit_opened", endpoint=ep.name, reason=str(exc))
            last = exc
        except BaseException:
            gw.health.finished(ep.name)
            gw.health.released_probe(ep.name)
            await gw.release(adm.lease, None)
            raise
        else:
            return result, adm
    raise final_error(last)


async def _retryable_http(gw: Gateway, ep: Endpoint, exc: UpstreamHTTPError) -> bool:
    now = time.time()
    if exc.status == 429:
        seconds = exc.retry_after if exc.retry_after is not None else random.uniform(30, 120)
        gw.health.cool_down(ep.name, now + seconds)
        await _shared_cooldown(gw, ep, seconds)
        log.warning("endpoint_cooldown", endpoint=ep.name, seconds=round(seconds, 3))
        return True
    if exc.status in (401, 403):
        gw.health.cool_down(ep.name, now + AUTH_DISABLE_S)
        await _shared_cooldown(gw, ep, AUTH_DISABLE_S)
        log.error("endpoint_disabled_alert", endpoint=ep.name, upstream_status=exc.status,
                  reason="upstream rejected the endpoint's credentials", alert=True)
        if gw.on_auth_failure is not None:
            await gw.on_auth_failure(ep, exc.status)
        return True
    if exc.status in (408, 409) or exc.status >= 500:
        if gw.health.failed(ep.name, now):
            log.warning("circuit_opened", endpoint=ep.name, upstream_status=exc.status)
        return True
    return False


async def _shared_cooldown(gw: Gateway, ep: Endpoint, seconds: float) -> None:
    try:
        await gw.state.set_cooldown(cooldown_key(ep), seconds)
    except StateUnavailable:
        log.warning("cooldown_not_shared", endpoint=ep.name)


def final_error(last: Exception | None) -> HearthError:
    if isinstance(last, UpstreamHTTPError):
        if last.status == 429:
            return HearthError("upstream_rate_limited", retry_after=last.retry_after or 1)
        if last.status in (401, 403):
            return HearthError("upstream_auth_failed")
        return HearthError("upstream_error", f"The upstream provider failed with status {last.status}.")
    if isinstance(last, UpstreamNetworkError):
        if last.timeout:
            return HearthError("upstream_timeout")
        return HearthError("upstream_error", f"The upstream provider failed: {last}.")
    return HearthError("upstream_timeout", "The call's deadline passed before an endpoint answered.")
