"""The gateway's front door: one logical model call, read top to bottom.

Every face of Hearth (OpenAI routes, capabilities, task steps) calls :class:`Gateway`, so the same
steps hold everywhere:

1. plan the route — scene rules, caller allowlists, the effective ``max_tokens``;
2. caller admission — rate limits, the nonce and budget reservations in one atomic step, the
   reservation committed to the ledger before anything is sent upstream;
3. endpoint attempts with failover (and scene fallbacks on the default route), all inside the
   call's absolute deadline;
4. finish — leases released, budgets settled with the real usage, the request log written: by the
   :class:`~hearth.gateway.call.Call`, which owns every resource and releases it exactly once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any, TypeVar

from hearth.errors import HearthError, UpstreamOutcomeUnknown
from hearth.gateway.attempts import AttemptPolicy, run_attempts, run_with_fallback
from hearth.gateway.budget import micro_cost, reservation_charges
from hearth.gateway.budget_ledger import BudgetLedger
from hearth.gateway.call import Call, CallDeps
from hearth.gateway.caller_admission import AdmissionLimits, CallerAdmission
from hearth.gateway.caller_plans import AdmissionPlans
from hearth.gateway.context import CallContext
from hearth.gateway.endpoint_admission import first_choice
from hearth.gateway.endpoint_capabilities import capable_models, required_capabilities
from hearth.gateway.health import HealthBook
from hearth.gateway.image_calls import (
    image_count,
    models_for_size,
    outcome_unknown,
    prompt_bound,
    prompt_estimate,
)
from hearth.gateway.relay import RelayStream
from hearth.gateway.scenes import Route, plan_route, resolve_scene
from hearth.gateway.state_recovery import StateRecovery
from hearth.observability.metrics import CALLS
from hearth.observability.request_log import RequestLogWriter
from hearth.providers.base import NativeCall, Provider, UpstreamReply, Usage, image_provider
from hearth.registry.snapshot import MICRO, Caller, Endpoint, Model, Registry
from hearth.settings import Settings
from hearth.state.base import StateBackend
from hearth.wire.tokens import (
    estimate_messages,
    output_reservation,
    prompt_upper_bound,
    requested_max_tokens,
)
from hearth.wire.usage import with_estimated_usage

T = TypeVar("T")
Op = Callable[[Model, Endpoint, float], Awaitable[T]]

__all__ = ["CallContext", "Gateway"]


class Gateway:
    def __init__(self, settings: Settings, state: StateBackend, providers: dict[str, Provider], *,
                 log_writer: RequestLogWriter, registry: Registry, ledger: BudgetLedger, recovery: StateRecovery,
                 on_auth_failure: Callable[[Endpoint, int], Awaitable[None]] | None = None,
                 rng: random.Random | None = None) -> None:
        self.settings = settings
        self.state = state
        self.providers = providers
        self.log_writer = log_writer
        self.ledger = ledger
        self.recovery = recovery
        self.registry = registry
        self.health = HealthBook(settings.breaker_failures, settings.breaker_open_s)
        self.rng = rng or random.Random()  # the router's draws and cooldown jitter (tests pass a seeded one)
        self.on_auth_failure = on_auth_failure
        self.limits = AdmissionLimits(settings.limit_wait_s, settings.lease_ttl_s, settings.state_timeout_s,
                                      settings.reservation_window_s)
        self.plans = AdmissionPlans()

    def resolve_model(self, name: Any, kind: str) -> Model:
        if not isinstance(name, str) or not name:
            raise HearthError("invalid_request", "`model` is required and must be a string.", param="model")
        model = self.registry.models.get(name)
        if model is None or not model.enabled or model.kind != kind:
            raise HearthError("model_not_found", f"The model `{name}` does not exist or you do not have access to it.",
                              param="model")
        return model

    # ---- the three kinds of call ------------------------------------------------------------------------
    async def complete(self, ctx: CallContext, body: dict[str, Any], *,
                       native: NativeCall | None = None) -> UpstreamReply:
        """``native``: a door's own request, sent instead of ``body`` to the endpoints it :meth:`serves
        <hearth.providers.base.NativeCall.serves>` (the reply is then in that format)."""
        call = self._call(ctx)
        async with call:
            route, models, body = self._plan(ctx, body, "chat", native)
            estimate = estimate_messages(body.get("messages"))

            async def op(model: Model, ep: Endpoint, timeout_s: float) -> UpstreamReply:
                if native is not None and native.serves(ep):
                    return await native.chat(ep, timeout_s, headers=ctx.headers)
                return await self.providers[ep.kind].chat(ep, body, timeout_s, headers=ctx.headers)

            completion = self._output(body, route)
            reply = await self._run(call, route, models, estimate, bound=self._bound(body), op=op,
                                    completion=completion, if_answered=Usage(estimate, completion))
            await self._succeed(call, reply, estimate)
        if reply.usage is None:  # the caller sees the usage it was charged, as a stream's usage chunk shows it
            reply = replace(reply, body=with_estimated_usage(reply.body, estimate, reply.completion_estimate))
        return reply

    async def embed(self, ctx: CallContext, body: dict[str, Any]) -> UpstreamReply:
        call = self._call(ctx)
        async with call:
            route, models, body = self._plan(ctx, body, "embedding")
            inputs = body.get("input")
            estimate = estimate_messages([{"content": inputs if isinstance(inputs, str) else str(inputs)}])

            async def op(model: Model, ep: Endpoint, timeout_s: float) -> UpstreamReply:
                return await self.providers[ep.kind].embeddings(ep, body, timeout_s, headers=ctx.headers)

            reply = await self._run(call, route, models, estimate, bound=self._bound(body), op=op, completion=0,
                                    if_answered=Usage(estimate, 0))
            await self._succeed(call, reply, estimate)
        return reply

    async def generate_images(self, ctx: CallContext, body: dict[str, Any]) -> UpstreamReply:
        """An image generation (``body`` in OpenAI's ``/v1/images/generations`` format, already checked):
        routed by capability and size, ``n`` images reserved at the per-image price and settled on the
        images returned (:mod:`hearth.gateway.image_calls`)."""
        call = self._call(ctx)
        async with call:
            route, models, body = self._plan(ctx, body, "image")
            models = models_for_size(models, body.get("size"))
            estimate = prompt_estimate(body)

            async def op(model: Model, ep: Endpoint, timeout_s: float) -> UpstreamReply:
                try:
                    return await image_provider(self.providers[ep.kind], ep).images(ep, body, timeout_s,
                                                                                    headers=ctx.headers)
                except UpstreamOutcomeUnknown as exc:  # it may be drawing (and billing): no second endpoint
                    self.health.failed(ep.name, self.health.clock.now())
                    raise outcome_unknown(exc) from exc

            drawn = Usage(estimate, 0, images=image_count(body))  # a request it took and may be drawing
            reply = await self._run(call, route, models, estimate, bound=prompt_bound(body), op=op, completion=0,
                                    images=image_count(body), if_answered=drawn)
            await self._succeed(call, reply, estimate)
        return reply

    async def open_stream(self, ctx: CallContext, body: dict[str, Any], *,
                          native: NativeCall | None = None) -> RelayStream:
        """Admit and open the stream; the returned relay owns the call from here on (``native``: as in
        :meth:`complete`; the relay then carries that format's events as its payloads)."""
        ctx.stream = True
        options = body.get("stream_options")
        ctx.include_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        call = self._call(ctx)
        try:
            route, models, body = self._plan(ctx, body, "chat", native)
            estimate = estimate_messages(body.get("messages"))
            idle_s = self.settings.stream_idle_timeout_s

            async def op(model: Model, ep: Endpoint, timeout_s: float) -> Any:
                if native is not None and native.serves(ep):
                    return await native.chat_stream(ep, timeout_s, idle_s, headers=ctx.headers)
                return await self.providers[ep.kind].chat_stream(ep, body, timeout_s, idle_s, headers=ctx.headers)

            upstream = await self._run(call, route, models, estimate, bound=self._bound(body), op=op,
                                       completion=self._output(body, route), if_answered=None)
        except BaseException as exc:
            await call.fail(exc)
            raise
        ctx.ttft_ms = (time.perf_counter() - ctx.started) * 1000
        return RelayStream(call, upstream, estimate)

    # ---- steps ----------------------------------------------------------------------------------------
    def _bound(self, body: dict[str, Any]) -> int:
        return prompt_upper_bound(body, self.settings.budget_image_tokens)

    def _call(self, ctx: CallContext) -> Call:
        timeout = self.settings.request_timeout_s
        if ctx.timeout_s is not None:
            timeout = min(timeout, ctx.timeout_s)
        ctx.deadline = time.monotonic() + timeout
        CALLS.in_flight += 1  # down again when its request-log record is counted
        return Call(CallDeps(self.state, self.ledger, self.recovery, self.health, self.log_writer, self.registry,
                             self.limits), ctx)

    def _plan(self, ctx: CallContext, body: dict[str, Any], kind: str,
              native: NativeCall | None = None) -> tuple[Route, list[Model], dict[str, Any]]:
        """Scene and allowlist rules → the models to try; the body gets the effective max_tokens."""
        caller = ctx.caller
        if caller is None:
            route = Route((body.get("model"),), None, False, requested_max_tokens(body))  # type: ignore[arg-type]
        else:
            scene = resolve_scene(self.registry, caller, ctx.requested_scene) if kind == "chat" else None
            ctx.scene = scene.name if scene is not None else None
            route = plan_route(self.registry, caller, scene, body)
            if kind == "chat" and route.effective_max_tokens is None and self._budgeted(ctx, caller, route):
                # a strict budget reserves a constrained output (seed 004): the reserved limit is sent upstream
                route = replace(route, effective_max_tokens=self.settings.default_max_tokens)
        first = self.resolve_model(route.models[0], kind)
        models = [first] + [m for name in route.models[1:]
                            if (m := self.registry.models.get(name)) is not None and m.enabled and m.kind == kind]
        # only endpoints that can serve this request are routed to (400 unsupported_feature if none can)
        models = capable_models(models, required_capabilities(body, kind=kind, stream=ctx.stream))
        if native is not None and native.required:
            models = native_models(models, native)
        if models[0].name != first.name:
            ctx.fallback_used = True  # the requested model has no endpoint for it: its fallbacks serve it
        ctx.scene = route.scene
        ctx.effective_max_tokens = route.effective_max_tokens
        if route.effective_max_tokens is not None and body.get("max_tokens") is None \
                and body.get("max_completion_tokens") is None:
            # the limit always reaches the upstream under a name it reads; the provider renames it to the
            # endpoint's ``max_tokens_field`` (the endpoint is chosen after planning)
            body = {**body, "max_tokens": route.effective_max_tokens}
        return route, models, body

    def _output(self, body: dict[str, Any], route: Route) -> int:
        """What a chat call reserves for its output (``HEARTH_DEFAULT_MAX_TOKENS`` when it names no limit)."""
        return output_reservation(body, route.effective_max_tokens or self.settings.default_max_tokens)

    def _budgeted(self, ctx: CallContext, caller: Caller, route: Route) -> bool:
        """Whether a budget applies to this call (the plan is cached, and read again at admission)."""
        return bool(self.plans.get(self.registry, caller, ctx.tenant, ctx.end_user, ip=ctx.client_ip,
                                   stream=ctx.stream, models=route.models).budgets)

    async def _run(self, call: Call, route: Route, models: list[Model], estimate: int, *, bound: int, op: Op[T],
                   completion: int, if_answered: Usage | None, images: int = 0) -> T:
        """Caller admission, then the attempts (the successful one's lease stays with ``call``); ``completion``:
        the output tokens the call may be billed (0 for embeddings and images). A call that fails is refunded,
        or — a non-stream call an upstream may still finish and bill (:meth:`Call.in_doubt`) — charged
        ``if_answered`` (None for streams: their upstream stops when they end)."""
        try:
            await self._admit_caller(call, route, estimate, bound, reserve=completion, first=models[0],
                                     images=images)
            attempts = self.settings.max_attempts
            if call.ctx.max_attempts is not None:
                attempts = min(attempts, call.ctx.max_attempts)
            policy = AttemptPolicy(attempts, self.settings.admission_wait_s, estimate + completion, self.rng,
                                   self.on_auth_failure)
            return await run_with_fallback(call, policy, models, route.default_route, op=op)
        except BaseException as exc:
            await call.fail(exc, if_answered=if_answered)
            raise

    async def _admit_caller(self, call: Call, route: Route, estimate: int, bound: int, *, reserve: int,
                            first: Model, images: int = 0) -> None:
        """Limits are charged the estimate; budgets the upper bound of what the call can cost (``images``:
        the images asked for, at the highest per-image price)."""
        ctx = call.ctx
        caller = ctx.caller
        if caller is None:
            return
        plan = self.plans.get(self.registry, caller, ctx.tenant, ctx.end_user, ip=ctx.client_ip, stream=ctx.stream,
                              models=route.models)
        money = micro_cost(plan.price, bound, reserve, images)
        ctx.estimated_cost = money / MICRO  # what a budget reserves: the most this call can cost
        if not plan.scopes and not plan.budgets and ctx.pending_nonce is None:
            return
        approx = (estimate + reserve, micro_cost(plan.price, estimate, reserve, images))
        charges = reservation_charges(plan.budgets, bound + reserve, money, approx)
        await call.admit_caller(CallerAdmission(plan.scopes, plan.budgets, charges, estimate + reserve,
                                                ctx.pending_nonce, first_choice(first, self.health, self.rng)))

    async def _succeed(self, call: Call, reply: UpstreamReply, estimate: int) -> None:
        assert call.current is not None
        self.health.succeeded(call.current.endpoint.name, (time.perf_counter() - call.ctx.started) * 1000)
        await call.finish(200, None, reply.usage or Usage(estimate, reply.completion_estimate), reply.usage is None)

    # ---- an operator's test call ------------------------------------------------------------------------
    async def operator_test_call(self, ctx: CallContext, model: Model, body: dict[str, Any]) -> UpstreamReply:
        """One chat request to the single endpoint of ``model``: an operator's test call
        (:mod:`hearth.gateway.endpoint_test_call` builds the pool and the body and keeps the once-a-minute limit).

        It goes through the same call object and attempt code as every call, so the endpoint's own rules
        hold — its concurrency, RPM/TPM and cooldown are charged and checked, and the outcome is judged like
        any call's (a 5xx counts toward its breaker, a 429 cools it down, a 401 disables it) — but at low
        priority: no caller (no caller limit, no budget reserved), one attempt, and no wait for a free slot
        (a full endpoint refuses the test at once instead of queueing it beside callers' requests)."""
        call = self._call(ctx)
        async with call:
            estimate = estimate_messages(body.get("messages"))
            reserve = int(body.get("max_tokens") or self.settings.default_max_tokens)
            policy = AttemptPolicy(1, 0.0, estimate + reserve, self.rng, self.on_auth_failure)

            async def op(model: Model, ep: Endpoint, timeout_s: float) -> UpstreamReply:
                return await self.providers[ep.kind].chat(ep, body, timeout_s, headers=None)

            reply = await run_attempts(call, policy, model, op)
            await self._succeed(call, reply, estimate)
        return reply


def native_models(models: list[Model], native: NativeCall) -> list[Model]:
    """Each model narrowed to the endpoints that take the door's request natively (a request with features
    only they can serve); 400 ``unsupported_feature`` when no model of the route has one."""
    out = [m if all(native.serves(ep) for ep in m.endpoints) else replace(m, endpoints=eps)
           for m in models if (eps := tuple(ep for ep in m.endpoints if native.serves(ep)))]
    if not out:
        raise HearthError("unsupported_feature", f"No endpoint of `{models[0].name}` can serve this request: parts "
                          "of it are understood only by endpoints of its own API (see the door's documentation).",
                          param="model", details={"needs": "native"})
    return out
