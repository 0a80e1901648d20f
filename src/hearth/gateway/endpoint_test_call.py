"""An operator's test call to one endpoint (seed 001 §13.3): "does this key, URL and model answer now?".

One tiny chat request (a few tokens) goes to the named endpoint through the gateway core on its low-priority
path (:meth:`hearth.gateway.service.Gateway.operator_test_call`): no caller, so no caller limit and no budget is
charged; one attempt; no waiting for a free slot. The endpoint's own concurrency, RPM/TPM and cooldown hold, and
its outcome is judged like any call's — so a test result moves the endpoint's health only as far as the breaker
and cooldown rules would for any call. A disabled endpoint can be tested (to check a new key before enabling it).

Each endpoint may be tested **once a minute**: the claim is a one-time key in the state backend
(:meth:`~hearth.state.base.StateBackend.claim_once`), so the limit holds across every process; a refused test
says when the next one is allowed (``endpoint_test_too_soon``, 429 with ``Retry-After``). The request log
records the test with route ``endpoint_test`` and the operator as its end user, and its outcome is kept in the
state backend for a day, so the endpoints page of any process shows the last test.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import Any, Final

import orjson

from hearth.errors import HearthError, UpstreamHTTPError
from hearth.gateway.context import CallContext
from hearth.gateway.service import Gateway
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Endpoint, Model
from hearth.state.base import StateBackend, StateUnavailable

log = get_logger("hearth.gateway")

ROUTE: Final = "endpoint_test"  # the request log's route for a test call
INTERVAL_S: Final = 60.0  # one test per endpoint per this many seconds, across processes
KEEP_LAST_S: Final = 24 * 3600.0  # how long the last outcome stays shown
MAX_TOKENS: Final = 5
MAX_TIMEOUT_S: Final = 30.0
PROMPT: Final = "Reply with the single word: ok"
_CLAIM: Final = "endpoint-test:"
_AT: Final = "endpoint-test-at:"
_LAST: Final = "endpoint-test-last:"


@dataclass(frozen=True, slots=True)
class EndpointTestResult:
    """What one test call found. ``status`` is the upstream's HTTP status when the request reached it, else the
    gateway's refusal (e.g. 429 ``capacity_exhausted`` for a full endpoint); ``latency_ms`` is the upstream
    attempt's (None when nothing was sent)."""

    endpoint: str
    operator: str
    request_id: str
    tested_at: float
    status: int
    reached_upstream: bool
    latency_ms: float | None = None
    error_code: str | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.status < 400

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


async def run_endpoint_test(gateway: Gateway, name: str, *, operator: str, request_id: str) -> EndpointTestResult:
    """Test ``name`` once (404 ``not_found``; 400 for an endpoint that does not serve chat; 429
    ``endpoint_test_too_soon`` within a minute of its last test; 503 when the state backend is down)."""
    ep = gateway.registry.endpoints.get(name)
    if ep is None:
        raise HearthError("not_found", f"No endpoint named `{name}`.", param="name")
    if "chat" not in ep.capabilities:
        raise HearthError("invalid_request", f"`{name}` does not serve chat; a test call is a chat request.",
                          param="name")
    now = gateway.health.clock.now()
    await _claim(gateway.state, name, now)
    ctx = CallContext(request_id=request_id, caller=None, route=ROUTE, end_user=operator,
                      timeout_s=min(ep.timeout_s, MAX_TIMEOUT_S))
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": MAX_TOKENS}
    failure: HearthError | UpstreamHTTPError | None = None
    try:
        await gateway.operator_test_call(ctx, _pool_of(gateway, ep), body)
    except (HearthError, UpstreamHTTPError) as exc:  # an upstream 4xx is not retried: it comes back as is
        failure = exc
    result = _result(name, ctx, failure, operator=operator, tested_at=now)
    try:
        await gateway.state.cache_set(_LAST + name, orjson.dumps(result.as_dict()), KEEP_LAST_S)
    except StateUnavailable:
        log.warning("endpoint_test_not_kept", endpoint=name)
    log.info("endpoint_tested", endpoint=name, operator=operator, status=result.status,
             error_code=result.error_code, latency_ms=result.latency_ms, request_id=request_id)
    return result


async def last_test(state: StateBackend, name: str) -> dict[str, Any] | None:
    """The last test of ``name`` within a day (as :meth:`EndpointTestResult.as_dict`), or None."""
    raw = await state.cache_get(_LAST + name)
    if raw is None:
        return None
    found: dict[str, Any] = orjson.loads(raw)
    return found


async def _claim(state: StateBackend, name: str, now: float) -> None:
    try:
        if await state.claim_once(_CLAIM + name, INTERVAL_S):
            await state.cache_set(_AT + name, repr(now).encode(), INTERVAL_S)
            return
        at = await state.cache_get(_AT + name)
    except StateUnavailable as exc:
        raise HearthError("state_backend_unavailable", retry_after=2) from exc
    # the claim's time is written just after the claim: a test in that instant waits the whole interval
    wait = INTERVAL_S if at is None else min(INTERVAL_S, max(1.0, INTERVAL_S - (now - float(at))))
    raise HearthError("endpoint_test_too_soon", f"`{name}` was tested less than a minute ago: next test allowed "
                      f"in {math.ceil(wait)} s.", retry_after=wait, details={"next_test_in_s": math.ceil(wait)})


def _pool_of(gateway: Gateway, ep: Endpoint) -> Model:
    """A pool of just ``ep`` (enabled, so a disabled endpoint can be tested), named after a public model it
    serves — the request log's ``model`` and the price of the test — or its upstream model if none."""
    public = next((m.name for m in gateway.registry.models.values() if any(e.name == ep.name for e in m.endpoints)),
                  ep.upstream_model)
    return Model(public, "chat", (replace(ep, enabled=True),))


def _result(name: str, ctx: CallContext, failure: HearthError | UpstreamHTTPError | None, *, operator: str,
            tested_at: float) -> EndpointTestResult:
    """The attempt's own outcome when one was made (the upstream's status), else the gateway's refusal."""
    message = None if failure is None else failure.message if isinstance(failure, HearthError) else \
        f"The upstream refused the request with status {failure.status}."
    if ctx.attempt_log:
        attempt = ctx.attempt_log[-1]
        return EndpointTestResult(name, operator, ctx.request_id, tested_at, attempt.status, True,
                                  round(attempt.latency_ms, 1), attempt.error_code, message)
    assert isinstance(failure, HearthError)  # nothing was sent: the gateway refused before the upstream
    return EndpointTestResult(name, operator, ctx.request_id, tested_at, failure.status, False, None, failure.code,
                              message)


__all__ = ["INTERVAL_S", "ROUTE", "EndpointTestResult", "last_test", "run_endpoint_test"]
