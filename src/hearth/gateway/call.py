"""One logical call's resources, owned by one object and released exactly once.

A :class:`Call` holds everything a gateway call takes from shared state — the caller grant (limit
slots, budget reservations, a nonce), the lease of the endpoint being tried or streamed from, the
timer that renews those leases while the call lives — and gives all of it back in :meth:`finish`,
which every exit path reaches: success, an error, a failover that ran out, cancellation when the
client left. ``finish`` also settles budgets with the real usage and writes the request log, once.

Leases are admitted with a short TTL (``lease_ttl_s``, tens of seconds) and renewed every third of
it while the call lives, so a process that dies frees its slots within that TTL.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from hearth.errors import HearthError, UpstreamHTTPError, UpstreamNetworkError, UpstreamOutcomeUnknown
from hearth.gateway.budget import actual_amounts
from hearth.gateway.budget_ledger import BudgetLedger
from hearth.gateway.caller_admission import (
    AdmissionLimits,
    CallerAdmission,
    CallerGrant,
    admit_caller,
    finish_caller,
)
from hearth.gateway.context import AttemptRecord, CallContext
from hearth.gateway.endpoint_admission import Admitted
from hearth.gateway.health import HealthBook
from hearth.gateway.state_recovery import StateRecovery
from hearth.observability import tracing
from hearth.observability.logging import get_logger
from hearth.observability.metrics import observed
from hearth.observability.request_log import RequestLogRecord, RequestLogWriter
from hearth.providers.base import HeaderExchange, Usage
from hearth.registry.snapshot import Registry
from hearth.state.base import Lease, StateBackend, StateUnavailable

if TYPE_CHECKING:
    from opentelemetry.trace import Span

log = get_logger("hearth.gateway")


@dataclass(slots=True)
class CallDeps:
    """The shared parts a call uses (narrow on purpose: no call needs the whole gateway)."""

    state: StateBackend
    ledger: BudgetLedger
    recovery: StateRecovery
    health: HealthBook
    log_writer: RequestLogWriter
    registry: Registry
    limits: AdmissionLimits


class Call:
    def __init__(self, deps: CallDeps, ctx: CallContext) -> None:
        self.deps = deps
        self.ctx = ctx
        self.grant: CallerGrant | None = None
        self.current: Admitted | None = None  # the endpoint lease of the attempt in progress / the stream
        self.outcome_unknown = False  # an attempt's request reached an upstream whose answer was lost
        self._finished = False
        self._renewal: asyncio.TimerHandle | None = None
        self._renewing: asyncio.Task[None] | None = None
        self._attempt_started = 0.0  # perf_counter() when the current attempt began
        # spans (only with tracing on: docs/operations.md "Traces"); the call's, and its current attempt's
        t = tracing.active
        self._span = None if t is None else t.start("hearth.call", under=tracing.parent.get(), attributes={
            "gen_ai.operation.name": ctx.route, "hearth.caller": ctx.caller_name, "hearth.request_id": ctx.request_id,
            "hearth.task_id": ctx.task_id, "hearth.capability": ctx.capability})
        self._attempt_span: Span | None = None

    # ---- taking ----------------------------------------------------------------------------------------
    async def admit_caller(self, want: CallerAdmission) -> None:
        self.grant = await admit_caller(self.deps.state, self.deps.ledger, self.deps.recovery, want,
                                        limits=self.deps.limits)
        self.ctx.budget_left = self.grant.remaining
        self._schedule_renewal()

    def attempt_started(self, adm: Admitted) -> None:
        self.current = adm
        self.ctx.attempts += 1
        self._attempt_started = time.perf_counter()
        self.ctx.endpoint = adm.endpoint
        self.deps.health.started(adm.endpoint.name, self.deps.health.clock.now())
        self._schedule_renewal()
        if self._span is not None:
            self._trace_attempt(adm)

    async def attempt_ended(self, *, verdict_given: bool, failure: BaseException | None = None) -> None:
        """The attempt failed (with ``failure``, recorded in the call's attempt list): its endpoint lease
        goes back now (the next attempt takes another)."""
        adm, self.current = self.current, None
        if adm is None:
            return
        if isinstance(failure, UpstreamOutcomeUnknown):
            self.outcome_unknown = True
        status, code = attempt_outcome(failure)
        self._record_attempt(adm, status, code)
        health = self.deps.health
        health.finished(adm.endpoint.name)
        if not verdict_given:
            health.released_probe(adm.endpoint.name)
        try:
            await self.deps.state.release(adm.lease, None)
        except StateUnavailable:
            log.warning("lease_release_failed", hint="the lease expires by its TTL")

    def _record_attempt(self, adm: Admitted, status: int, error_code: str | None) -> None:
        self.ctx.attempt_log.append(AttemptRecord(adm.endpoint.name, status, error_code,
                                                  round((time.perf_counter() - self._attempt_started) * 1000, 3)))
        if error_code is not None and error_code.startswith("upstream_"):
            self.deps.health.note_error(adm.endpoint.name, status, error_code)
        if self._attempt_span is not None:
            span, self._attempt_span = self._attempt_span, None
            tracing.end(span, error=error_code, attributes={"http.response.status_code": status})

    def _trace_attempt(self, adm: Admitted) -> None:
        """The attempt's span, child of the call's; its ``traceparent`` goes upstream if the operator wants it."""
        t = tracing.active
        if t is None or self._span is None:
            return
        ep = adm.endpoint
        self._attempt_span = span = t.start("hearth.attempt", under=self._span, kind="client", attributes={
            "hearth.endpoint": ep.name, "hearth.attempt": self.ctx.attempts, "gen_ai.request.model": self.ctx.model,
            "gen_ai.provider.name": ep.kind})
        if t.propagate_upstream:
            if self.ctx.headers is None:
                self.ctx.headers = HeaderExchange({})
            self.ctx.headers.traceparent = tracing.traceparent(span)

    # ---- renewing -------------------------------------------------------------------------------------
    def _schedule_renewal(self) -> None:
        if self._renewal is None and not self._finished:
            self._renewal = asyncio.get_running_loop().call_later(self.deps.limits.lease_ttl_s / 3, self._renew)

    def _renew(self) -> None:
        self._renewal = None
        if self._finished:
            return
        leases = self._held()
        if leases:
            self._renewing = asyncio.get_running_loop().create_task(self._renew_now(leases), name="call-lease-renewal")
        self._schedule_renewal()

    async def _renew_now(self, leases: tuple[Lease, ...]) -> None:
        try:
            await self.deps.state.renew(leases, self.deps.limits.lease_ttl_s)
        except StateUnavailable:
            log.warning("lease_renewal_failed", hint="the slots expire by their TTL")

    def _held(self) -> tuple[Lease, ...]:
        leases: list[Lease] = []
        if self.grant is not None and self.grant.lease is not None and not self.grant.finished:
            leases.append(self.grant.lease)
        if self.current is not None:
            leases.append(self.current.lease)
        return tuple(leases)

    # ---- giving back ----------------------------------------------------------------------------------
    async def finish(self, status: int, error_code: str | None, usage: Usage | None = None,
                     usage_estimated: bool = False) -> None:
        """Release everything, settle with ``usage`` (None: nothing was used) and log — exactly once.

        Runs shielded: a second cancellation (the client left while we clean up) cannot leave a
        slot or a reservation behind."""
        if self._finished:
            return
        self._finished = True
        if self._renewal is not None:
            self._renewal.cancel()
        await asyncio.shield(self._release(status, error_code, usage, usage_estimated))

    async def _release(self, status: int, error_code: str | None, usage: Usage | None, estimated: bool) -> None:
        if self._renewing is not None:  # let a renewal in flight land before the release
            with contextlib.suppress(BaseException):
                await self._renewing
        ctx, deps = self.ctx, self.deps
        tokens = usage.prompt_tokens + usage.completion_tokens if usage else None
        adm, self.current = self.current, None
        if adm is not None:
            self._record_attempt(adm, status, error_code)  # the last attempt ends with the call
            deps.health.finished(adm.endpoint.name)
            if status >= 400:  # ended without a verdict on the endpoint (the client left, a 4xx, …)
                deps.health.released_probe(adm.endpoint.name)
        also = ((adm.lease, tokens),) if adm is not None else ()
        grant = self.grant
        try:
            if grant is not None:
                prompt, completion = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
                amounts = actual_amounts(grant.budgets, deps.registry, ctx.endpoint, ctx.model,
                                         prompt_tokens=prompt, completion_tokens=completion,
                                         images=usage.images if usage else 0)
                await finish_caller(deps.state, deps.ledger, grant, tokens, actual_amounts=amounts, also_release=also)
                ctx.budget_left = grant.remaining
            elif also:
                try:
                    await deps.state.release_all(also)
                except StateUnavailable:
                    log.warning("lease_release_failed", hint="the lease expires by its TTL")
        finally:
            self._record(status, error_code, usage, estimated)

    def in_doubt(self, exc: BaseException) -> bool:
        """Whether an upstream may have done the work of this call, which ``exc`` ended: an attempt's request
        reached an upstream whose answer was lost (:class:`~hearth.errors.UpstreamOutcomeUnknown`: a read
        timeout, a cut connection, a malformed body), or the client left while one was at an upstream. The
        provider may then finish it and bill it, so refunding would let a caller — with a short deadline, or by
        hanging up — spend past its budget."""
        if isinstance(exc, asyncio.CancelledError):
            return self.current is not None
        if isinstance(exc, HearthError) and exc.code == "upstream_outcome_unknown":
            return True
        return self.outcome_unknown

    async def fail(self, exc: BaseException, *, if_answered: Usage | None = None) -> None:
        """Finish after ``exc`` ended the call, logging what the caller was told. ``if_answered``: what a
        non-stream call is charged (flagged estimated) when it is :meth:`in doubt <in_doubt>`; else nothing."""
        status, code = failure_outcome(exc)
        if if_answered is not None and self.in_doubt(exc):
            await self.finish(status, code, if_answered, True)
        else:
            await self.finish(status, code)

    async def __aenter__(self) -> Call:
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            await self.fail(exc)
        elif not self._finished:
            await self.finish(500, "internal_error")  # a code path that forgot to finish: never leak

    def _record(self, status: int, error_code: str | None, usage: Usage | None, estimated: bool) -> None:
        ctx = self.ctx
        ep = ctx.endpoint
        cost = call_cost(self.deps.registry, ctx, usage)
        if self._span is not None:
            self._trace_end(status, error_code, usage)
        self.deps.log_writer.submit(observed(RequestLogRecord(
            request_id=ctx.request_id, created_at=datetime.now(UTC), caller=ctx.caller_name, route=ctx.route,
            model=ctx.model, endpoint=ep.name if ep else None, upstream_model=ep.upstream_model if ep else None,
            stream=ctx.stream, status=status, error_code=error_code, attempts=ctx.attempts,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0, usage_estimated=estimated,
            cost=cost, latency_ms=(time.perf_counter() - ctx.started) * 1000, ttft_ms=ctx.ttft_ms,
            end_user=ctx.end_user, tenant=ctx.tenant, client_ip=ctx.client_ip, scene=ctx.scene,
            fallback_used=ctx.fallback_used, attempted_models=ctx.attempted_models or None,
            effective_max_tokens=ctx.effective_max_tokens, estimated_cost=ctx.estimated_cost,
            attempt_log=[{"endpoint": a.endpoint, "status": a.status, "error_code": a.error_code,
                          "latency_ms": a.latency_ms} for a in ctx.attempt_log],
            capability=ctx.capability, prompt_code=ctx.prompt_code, prompt_version=ctx.prompt_version,
            guardrails=ctx.guardrails, task_id=ctx.task_id)))


    def _trace_end(self, status: int, error_code: str | None, usage: Usage | None) -> None:
        assert self._span is not None
        ctx = self.ctx
        tracing.end(self._span, error=error_code, attributes={
            "hearth.status": status, "hearth.attempts": ctx.attempts, "gen_ai.request.model": ctx.model,
            "hearth.endpoint": ctx.endpoint.name if ctx.endpoint else None, "hearth.stream": ctx.stream,
            "hearth.scene": ctx.scene, "hearth.fallback_used": ctx.fallback_used,
            "gen_ai.usage.input_tokens": usage.prompt_tokens if usage else None,
            "gen_ai.usage.output_tokens": usage.completion_tokens if usage else None,
            "hearth.prompt.code": ctx.prompt_code, "hearth.prompt.version": ctx.prompt_version})
        self._span = None


def call_cost(registry: Registry, ctx: CallContext, usage: Usage | None) -> float:
    """What a call's usage costs at its endpoint's price (0 with no usage, endpoint or price): what its
    request-log row says, and what a capability adds up over its calls."""
    if usage is None or ctx.endpoint is None or ctx.model is None:
        return 0.0
    price = registry.price_for(ctx.endpoint, ctx.model)
    return price.cost(usage.prompt_tokens, usage.completion_tokens, usage.images) if price is not None else 0.0


def failure_outcome(exc: BaseException) -> tuple[int, str]:
    """(status, error code) a call that ``exc`` ended is logged with: what its caller was told."""
    if isinstance(exc, HearthError):
        return exc.status, exc.code
    if isinstance(exc, UpstreamHTTPError):
        return exc.status, "upstream_rejected_request"
    if isinstance(exc, asyncio.CancelledError):
        return 499, "client_disconnected"
    return 500, "internal_error"


def attempt_outcome(failure: BaseException | None) -> tuple[int, str | None]:
    """(status, error code) an attempt that ended with ``failure`` is recorded with."""
    if isinstance(failure, UpstreamHTTPError):
        status = failure.status
        if status == 429:
            return status, "upstream_rate_limited"
        if status in (401, 403):
            return status, "upstream_auth_failed"
        if status in (408, 409) or status >= 500:
            return status, "upstream_error"
        return status, "upstream_rejected_request"
    if isinstance(failure, UpstreamNetworkError):
        return (504, "upstream_timeout") if failure.timeout else (502, "upstream_error")
    if isinstance(failure, HearthError):
        return failure.status, failure.code
    if isinstance(failure, asyncio.CancelledError):
        return 499, "client_disconnected"
    return (500, "internal_error") if failure is not None else (502, "upstream_error")
