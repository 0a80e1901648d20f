"""One logical gateway call: resolve the model, admit, call, classify failures, fail over, account.

Every face of Hearth (OpenAI routes, capabilities, task steps) calls :class:`Gateway`, so limits,
routing, failover and accounting are the same everywhere.

Failure classes (decided before any retry):

* 429 → the endpoint cools down for Retry-After (else 30–120 s), shared via the state backend;
* 401/403 → the endpoint is disabled (registry + alert log), never retried on that endpoint;
* 408/409/5xx, timeouts, network errors, malformed answers → a breaker failure, then failover;
* any other 4xx → returned to the caller as is, never retried.

All attempts share one absolute deadline and at most ``max_attempts`` endpoints.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from hearth.errors import HearthError, UpstreamHTTPError, UpstreamNetworkError
from hearth.gateway.admission import Admitted, admit, cooldown_key
from hearth.gateway.health import HealthBook
from hearth.gateway.relay import RelayStream
from hearth.gateway.router import order_candidates
from hearth.gateway.tokens import DEFAULT_COMPLETION_RESERVATION, estimate_messages, requested_max_tokens
from hearth.observability.logging import get_logger
from hearth.observability.request_log import RequestLogRecord, RequestLogWriter
from hearth.providers.base import Provider, UpstreamReply, Usage
from hearth.registry.snapshot import Endpoint, Model, Registry
from hearth.settings import Settings
from hearth.state.base import Lease, StateBackend, StateUnavailable

log = get_logger("hearth.gateway")
T = TypeVar("T")
AUTH_DISABLE_S = 3600.0


@dataclass(slots=True)
class CallContext:
    """Who is calling and the call's clock; filled in as the call proceeds, then logged."""

    request_id: str
    caller: str | None
    route: str
    end_user: str | None = None
    started: float = field(default_factory=time.perf_counter)
    deadline: float = 0.0
    attempts: int = 0
    model: str | None = None
    endpoint: Endpoint | None = None
    stream: bool = False
    ttft_ms: float | None = None


class Gateway:
    def __init__(self, settings: Settings, state: StateBackend, providers: dict[str, Provider],
                 log_writer: RequestLogWriter, registry: Registry,
                 on_auth_failure: Callable[[Endpoint, int], Awaitable[None]] | None = None) -> None:
        self.settings = settings
        self.state = state
        self.providers = providers
        self.log_writer = log_writer
        self.registry = registry
        self.health = HealthBook(settings.breaker_failures, settings.breaker_open_s)
        self._on_auth_failure = on_auth_failure
        self.lease_ttl_s = settings.request_timeout_s + settings.stream_idle_timeout_s + 60

    # ---- public operations -------------------------------------------------------------------
    def resolve_model(self, name: Any, kind: str) -> Model:
        if not isinstance(name, str) or not name:
            raise HearthError("invalid_request", "`model` is required and must be a string.", param="model")
        model = self.registry.models.get(name)
        if model is None or not model.enabled or model.kind != kind:
            raise HearthError("model_not_found", f"The model `{name}` does not exist or you do not have access to it.",
                              param="model")
        return model

    async def complete(self, ctx: CallContext, body: dict[str, Any]) -> UpstreamReply:
        model = self.resolve_model(body.get("model"), "chat")
        reserve = requested_max_tokens(body) or DEFAULT_COMPLETION_RESERVATION
        tokens = estimate_messages(body.get("messages")) + reserve
        return await self._unary(ctx, model, body, tokens, "chat")

    async def embed(self, ctx: CallContext, body: dict[str, Any]) -> UpstreamReply:
        model = self.resolve_model(body.get("model"), "embedding")
        inputs = body.get("input")
        tokens = estimate_messages([{"content": inputs if isinstance(inputs, str) else str(inputs)}])
        return await self._unary(ctx, model, body, tokens, "embeddings")

    async def open_stream(self, ctx: CallContext, body: dict[str, Any]) -> RelayStream:
        model = self.resolve_model(body.get("model"), "chat")
        prompt_est = estimate_messages(body.get("messages"))
        tokens = prompt_est + (requested_max_tokens(body) or DEFAULT_COMPLETION_RESERVATION)
        ctx.stream = True

        async def op(ep: Endpoint, timeout_s: float) -> Any:
            if "streaming" not in ep.capabilities:
                raise HearthError("unsupported_feature", f"Endpoint of `{model.name}` cannot stream.")
            return await self._provider(ep).chat_stream(ep, body, timeout_s, self.settings.stream_idle_timeout_s)

        upstream, adm = await self._recorded_attempts(ctx, model, tokens, op)
        ctx.ttft_ms = (time.perf_counter() - ctx.started) * 1000
        return RelayStream(self, ctx, model, adm, upstream, prompt_est)

    # ---- the attempt loop ---------------------------------------------------------------------
    async def _unary(self, ctx: CallContext, model: Model, body: dict[str, Any], tokens: int,
                     what: str) -> UpstreamReply:
        async def op(ep: Endpoint, timeout_s: float) -> UpstreamReply:
            p = self._provider(ep)
            return await (p.chat(ep, body, timeout_s) if what == "chat" else p.embeddings(ep, body, timeout_s))

        reply, adm = await self._recorded_attempts(ctx, model, tokens, op)
        ep = adm.endpoint
        self.health.finished(ep.name)
        self.health.succeeded(ep.name, (time.perf_counter() - ctx.started) * 1000)
        estimated = reply.usage is None
        usage = reply.usage or Usage(estimate_messages(body.get("messages")), 0)
        await self.release(adm.lease, usage.prompt_tokens + usage.completion_tokens)
        self.record(ctx, 200, None, usage, estimated)
        return reply

    def _provider(self, ep: Endpoint) -> Provider:
        return self.providers[ep.kind]

    async def _recorded_attempts(self, ctx: CallContext, model: Model, tokens: int,
                                 op: Callable[[Endpoint, float], Awaitable[T]]) -> tuple[T, Admitted]:
        """:meth:`_attempts`, with a request log for a call that ends in an error."""
        try:
            return await self._attempts(ctx, model, tokens, op)
        except HearthError as exc:
            self.record(ctx, exc.status, exc.code, None, False)
            raise
        except UpstreamHTTPError as exc:
            self.record(ctx, exc.status, "upstream_rejected_request", None, False)
            raise

    async def _attempts(self, ctx: CallContext, model: Model, tokens: int,
                        op: Callable[[Endpoint, float], Awaitable[T]]) -> tuple[T, Admitted]:
        ctx.model = model.name
        ctx.deadline = time.monotonic() + self.settings.request_timeout_s
        tried: set[str] = set()
        last: Exception | None = None
        for attempt in range(1, self.settings.max_attempts + 1):
            if time.monotonic() >= ctx.deadline:
                break
            try:
                adm = await admit(self.state, self.health, model.endpoints,
                                  lambda: order_candidates(model.endpoints, self.health, time.time(), tried),
                                  tokens, ctx.deadline, self.settings.admission_wait_s, self.lease_ttl_s)
            except HearthError:
                if last is None:
                    raise
                break
            ep = adm.endpoint
            tried.add(ep.name)
            ctx.attempts = attempt
            ctx.endpoint = ep
            self.health.started(ep.name, time.time())
            try:
                result = await op(ep, max(0.001, min(ep.timeout_s, ctx.deadline - time.monotonic())))
            except UpstreamHTTPError as exc:
                self.health.finished(ep.name)
                await self.release(adm.lease, None)
                if not await self._retryable_http(ep, exc):
                    self.health.released_probe(ep.name)
                    raise
                last = exc
            except UpstreamNetworkError as exc:
                self.health.finished(ep.name)
                await self.release(adm.lease, None)
                if self.health.failed(ep.name, time.time()):
                    log.warning("circuit_opened", endpoint=ep.name, reason=str(exc))
                last = exc
            except BaseException:
                self.health.finished(ep.name)
                self.health.released_probe(ep.name)
                await self.release(adm.lease, None)
                raise
            else:
                return result, adm
        raise self._final_error(last)

    async def _retryable_http(self, ep: Endpoint, exc: UpstreamHTTPError) -> bool:
        now = time.time()
        if exc.status == 429:
            seconds = exc.retry_after if exc.retry_after is not None else random.uniform(30, 120)
            self.health.cool_down(ep.name, now + seconds)
            await self._shared_cooldown(ep, seconds)
            log.warning("endpoint_cooldown", endpoint=ep.name, seconds=round(seconds, 3))
            return True
        if exc.status in (401, 403):
            self.health.cool_down(ep.name, now + AUTH_DISABLE_S)
            await self._shared_cooldown(ep, AUTH_DISABLE_S)
            log.error("endpoint_disabled_alert", endpoint=ep.name, upstream_status=exc.status,
                      reason="upstream rejected the endpoint's credentials", alert=True)
            if self._on_auth_failure is not None:
                await self._on_auth_failure(ep, exc.status)
            return True
        if exc.status in (408, 409) or exc.status >= 500:
            if self.health.failed(ep.name, now):
                log.warning("circuit_opened", endpoint=ep.name, upstream_status=exc.status)
            return True
        return False

    async def _shared_cooldown(self, ep: Endpoint, seconds: float) -> None:
        try:
            await self.state.set_cooldown(cooldown_key(ep), seconds)
        except StateUnavailable:
            log.warning("cooldown_not_shared", endpoint=ep.name)

    @staticmethod
    def _final_error(last: Exception | None) -> HearthError:
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

    # ---- accounting ---------------------------------------------------------------------------
    async def release(self, lease: Lease, actual_tokens: int | None) -> None:
        try:
            await self.state.release(lease, actual_tokens)
        except StateUnavailable:
            log.warning("lease_release_failed", hint="the lease expires by its TTL")

    def record(self, ctx: CallContext, status: int, error_code: str | None, usage: Usage | None,
               usage_estimated: bool) -> None:
        ep = ctx.endpoint
        cost = 0.0
        if usage is not None and ep is not None and ctx.model is not None:
            price = self.registry.price_for(ep, ctx.model)
            if price is not None:
                cost = price.cost(usage.prompt_tokens, usage.completion_tokens)
        self.log_writer.submit(RequestLogRecord(
            request_id=ctx.request_id, created_at=datetime.now(UTC), caller=ctx.caller, route=ctx.route,
            model=ctx.model, endpoint=ep.name if ep else None, upstream_model=ep.upstream_model if ep else None,
            stream=ctx.stream, status=status, error_code=error_code, attempts=ctx.attempts,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0, usage_estimated=usage_estimated,
            cost=cost, latency_ms=(time.perf_counter() - ctx.started) * 1000, ttft_ms=ctx.ttft_ms,
            end_user=ctx.end_user))

