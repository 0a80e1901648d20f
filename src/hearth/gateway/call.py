"""One logical gateway call, end to end.

Every face of Hearth (OpenAI routes, capabilities, task steps) calls :class:`Gateway`, so the same
steps hold everywhere: plan the route (scene rules, caller allowlists) → caller admission (rate
limits and budget reservations, atomically) → endpoint attempts with failover (and scene
fallbacks on the default route) → settle (release slots, charge real usage once) → request log.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from hearth.errors import HearthError, UpstreamHTTPError
from hearth.gateway.admission import Admitted, first_choice
from hearth.gateway.admission_plan import AdmissionPlans
from hearth.gateway.attempts import run_with_fallback
from hearth.gateway.budget import (
    actual_amounts,
    micro_cost,
    reservation_charges,
)
from hearth.gateway.budget_ledger import BudgetLedger
from hearth.gateway.caller_admission import admit_caller, finish_caller
from hearth.gateway.context import CallContext
from hearth.gateway.health import HealthBook
from hearth.gateway.relay import RelayStream
from hearth.gateway.scenes import Route, plan_route, resolve_scene
from hearth.gateway.tokens import DEFAULT_COMPLETION_RESERVATION, estimate_messages, requested_max_tokens
from hearth.observability.logging import get_logger
from hearth.observability.request_log import RequestLogRecord, RequestLogWriter
from hearth.providers.base import Provider, UpstreamReply, Usage
from hearth.registry.snapshot import MICRO, Endpoint, Model, Registry
from hearth.settings import Settings
from hearth.state.base import Lease, StateBackend, StateUnavailable

log = get_logger("hearth.gateway")

__all__ = ["CallContext", "Gateway"]


class Gateway:
    def __init__(self, settings: Settings, state: StateBackend, providers: dict[str, Provider],
                 log_writer: RequestLogWriter, registry: Registry, ledger: BudgetLedger,
                 on_auth_failure: Callable[[Endpoint, int], Awaitable[None]] | None = None) -> None:
        self.settings = settings
        self.state = state
        self.providers = providers
        self.log_writer = log_writer
        self.ledger = ledger
        self.registry = registry
        self.health = HealthBook(settings.breaker_failures, settings.breaker_open_s)
        self.on_auth_failure = on_auth_failure
        self.lease_ttl_s = settings.request_timeout_s + settings.stream_idle_timeout_s + 60
        self.plans = AdmissionPlans()

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
        route, models, body = self._plan(ctx, body, "chat")
        prompt = estimate_messages(body.get("messages"))

        async def op(model: Model, ep: Endpoint, timeout_s: float) -> UpstreamReply:
            return await self._provider(ep).chat(ep, body, timeout_s)

        return await self._unary(ctx, route, models, prompt, op)

    async def embed(self, ctx: CallContext, body: dict[str, Any]) -> UpstreamReply:
        route, models, body = self._plan(ctx, body, "embedding")
        inputs = body.get("input")
        prompt = estimate_messages([{"content": inputs if isinstance(inputs, str) else str(inputs)}])

        async def op(model: Model, ep: Endpoint, timeout_s: float) -> UpstreamReply:
            return await self._provider(ep).embeddings(ep, body, timeout_s)

        return await self._unary(ctx, route, models, prompt, op, completion_reserve=0)

    async def open_stream(self, ctx: CallContext, body: dict[str, Any]) -> RelayStream:
        ctx.stream = True
        route, models, body = self._plan(ctx, body, "chat")
        prompt = estimate_messages(body.get("messages"))

        async def op(model: Model, ep: Endpoint, timeout_s: float) -> Any:
            if "streaming" not in ep.capabilities:
                raise HearthError("unsupported_feature", f"Endpoint of `{model.name}` cannot stream.")
            return await self._provider(ep).chat_stream(ep, body, timeout_s, self.settings.stream_idle_timeout_s)

        upstream, adm = await self._run(ctx, route, models, prompt, op, None)
        ctx.ttft_ms = (time.perf_counter() - ctx.started) * 1000
        return RelayStream(self, ctx, adm, upstream, prompt)

    # ---- steps ---------------------------------------------------------------------------------
    def _plan(self, ctx: CallContext, body: dict[str, Any], kind: str) -> tuple[Route, list[Model], dict[str, Any]]:
        """Scene and allowlist rules → the models to try; the body gets the effective max_tokens."""
        try:
            caller = ctx.caller
            if caller is None:
                route = Route((body.get("model"),), None, False, requested_max_tokens(body))  # type: ignore[arg-type]
            else:
                scene = resolve_scene(self.registry, caller, ctx.requested_scene) if kind == "chat" else None
                ctx.scene = scene.name if scene is not None else None
                route = plan_route(self.registry, caller, scene, body)
            first = self.resolve_model(route.models[0], kind)
            models = [first] + [m for name in route.models[1:]
                                if (m := self.registry.models.get(name)) is not None and m.enabled and m.kind == kind]
        except HearthError as exc:
            self.record(ctx, exc.status, exc.code, None, False)
            raise
        ctx.scene = route.scene
        ctx.effective_max_tokens = route.effective_max_tokens
        if route.effective_max_tokens is not None and requested_max_tokens(body) is None:
            body = {**body, "max_tokens": route.effective_max_tokens}
        return route, models, body

    async def _unary(self, ctx: CallContext, route: Route, models: list[Model], prompt: int,
                     op: Callable[[Model, Endpoint, float], Awaitable[UpstreamReply]],
                     completion_reserve: int | None = None) -> UpstreamReply:
        result, adm = await self._run(ctx, route, models, prompt, op, completion_reserve)
        reply: UpstreamReply = result
        ep = adm.endpoint
        self.health.finished(ep.name)
        self.health.succeeded(ep.name, (time.perf_counter() - ctx.started) * 1000)
        estimated = reply.usage is None
        usage = reply.usage or Usage(prompt, 0)
        await self.finish(ctx, usage, adm.lease)
        self.record(ctx, 200, None, usage, estimated)
        return reply

    async def _run(self, ctx: CallContext, route: Route, models: list[Model], prompt: int,
                   op: Callable[[Model, Endpoint, float], Awaitable[Any]],
                   completion_reserve: int | None) -> tuple[Any, Admitted]:
        """Caller admission, then attempts; on failure everything taken is given back and logged."""
        reserve = completion_reserve if completion_reserve is not None else (
            route.effective_max_tokens or DEFAULT_COMPLETION_RESERVATION)
        tokens = prompt + reserve
        ctx.deadline = time.monotonic() + self.settings.request_timeout_s
        try:
            await self._admit_caller(ctx, route, prompt, reserve, models[0])
            try:
                return await run_with_fallback(self, ctx, models, route.default_route, tokens, op)
            except BaseException:
                await self.finish(ctx, None)
                raise
        except HearthError as exc:
            self.record(ctx, exc.status, exc.code, None, False)
            raise
        except UpstreamHTTPError as exc:
            self.record(ctx, exc.status, "upstream_rejected_request", None, False)
            raise

    async def _admit_caller(self, ctx: CallContext, route: Route, prompt: int, reserve: int, first: Model) -> None:
        caller = ctx.caller
        if caller is None:
            return
        plan = self.plans.get(self.registry, caller, ctx.tenant, ctx.end_user, ctx.client_ip, ctx.stream, route.models)
        scopes, budgets = plan.scopes, plan.budgets
        money = micro_cost(plan.price, prompt, reserve)
        ctx.estimated_cost = money / MICRO
        if not scopes and not budgets and ctx.pending_nonce is None:
            return
        ctx.grant = await admit_caller(self.state, self.ledger, scopes, budgets,
                                       reservation_charges(budgets, prompt + reserve, money), prompt + reserve,
                                       self.settings.limit_wait_s, self.lease_ttl_s, ctx.pending_nonce,
                                       first_choice(first, self.health))

    async def finish(self, ctx: CallContext, usage: Usage | None, endpoint_lease: Lease | None = None) -> None:
        """Release the endpoint's lease (if given) and the caller's slots, and settle the caller's budgets
        with the real usage (None → refund all) — in one state-backend round trip when governed."""
        tokens = usage.prompt_tokens + usage.completion_tokens if usage else None
        grant = ctx.grant
        if grant is None or grant.finished or grant.lease is None:
            if endpoint_lease is not None:
                await self.release(endpoint_lease, tokens)
            if grant is not None:
                grant.finished = True
            return
        prompt, completion = (usage.prompt_tokens, usage.completion_tokens) if usage else (0, 0)
        amounts = actual_amounts(grant.budgets, self.registry, ctx.endpoint, ctx.model, prompt, completion)
        also = ((endpoint_lease, tokens),) if endpoint_lease is not None else ()
        await finish_caller(self.state, self.ledger, grant, tokens, amounts, also)

    def _provider(self, ep: Endpoint) -> Provider:
        return self.providers[ep.kind]

    # ---- accounting ---------------------------------------------------------------------------
    async def renew(self, ctx: CallContext, endpoint_lease: Lease) -> None:
        """Keep a long call's endpoint and caller slots (and budget reservation) alive for another TTL."""
        leases = (endpoint_lease,) + ((ctx.grant.lease,) if ctx.grant is not None and ctx.grant.lease else ())
        try:
            await self.state.renew(leases, self.lease_ttl_s)
        except StateUnavailable:
            log.warning("lease_renewal_failed", hint="the slots expire by their TTL")

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
            request_id=ctx.request_id, created_at=datetime.now(UTC), caller=ctx.caller_name, route=ctx.route,
            model=ctx.model, endpoint=ep.name if ep else None, upstream_model=ep.upstream_model if ep else None,
            stream=ctx.stream, status=status, error_code=error_code, attempts=ctx.attempts,
            prompt_tokens=usage.prompt_tokens if usage else 0,
            completion_tokens=usage.completion_tokens if usage else 0, usage_estimated=usage_estimated,
            cost=cost, latency_ms=(time.perf_counter() - ctx.started) * 1000, ttft_ms=ctx.ttft_ms,
            end_user=ctx.end_user, tenant=ctx.tenant, client_ip=ctx.client_ip, scene=ctx.scene,
            fallback_used=ctx.fallback_used, attempted_models=ctx.attempted_models or None,
            effective_max_tokens=ctx.effective_max_tokens, estimated_cost=ctx.estimated_cost))
