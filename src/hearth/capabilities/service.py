"""Running a capability: resolve the prompt (or role), render it, call the governed gateway, check the output.

One capability request may make several model calls — a corrective retry after output that fails its
schema — and **every one is a full gateway call**: admitted, budgeted, charged and logged like any
``/v1/chat/completions`` call, listed in the answer's ``attempts`` with its purpose. The request as a
whole gets one more request-log row (``route = "capability"``) with the outcome the caller saw, the
summed usage and cost, and the prompt version; ``GET /api/v1/prompts/{code}/stats`` reads those rows.

When no model endpoint can serve (none configured, all failing), summarize and bill extraction answer
from the local extractive engine (:mod:`hearth.capabilities.offline`) with ``degraded: true``, unless
``HEARTH_OFFLINE_FALLBACK`` is off. A model the caller named explicitly never degrades: its errors are
the caller's to see.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import orjson

from hearth.capabilities import bill, offline, response_cache
from hearth.capabilities.defaults import BUILTIN
from hearth.capabilities.quality_gate import Evaluation, failed_rules, judge_score
from hearth.capabilities.response_cache import cache_key
from hearth.capabilities.scene_guard import SceneGuard
from hearth.capabilities.structured import NoJson, Problem, correction_message, parse_json_output, validate
from hearth.errors import HearthError
from hearth.gateway.call import call_cost
from hearth.gateway.context import CallContext
from hearth.gateway.service import Gateway
from hearth.observability.metrics import observed
from hearth.observability.request_log import RequestLogRecord
from hearth.prompts.catalog import CatalogSnapshot
from hearth.prompts.rendering import render_messages
from hearth.prompts.spec import JudgeSpec, PromptVersion, QualityGateSpec, Role
from hearth.providers.base import Usage
from hearth.registry.snapshot import Caller, Scene

DEFAULT_PROMPT = {"summarize": "summary", "extract": "extraction", "extract_bill": "bill_extraction",
                  "chat": "chat_assistant", "generate": None}
# Gateway outcomes meaning "no model can serve this now" (not: the caller asked for something wrong).
_RESULT_KEYS = ("summary", "data", "text", "message")  # what the cache keeps of an answer
_UNSERVED = frozenset({"no_healthy_endpoint", "upstream_error", "upstream_timeout", "upstream_auth_failed",
                       "deadline_exceeded", "model_not_found"})


@dataclass(slots=True)
class CapabilityCall:
    """One capability request, parsed and authenticated by the API layer."""

    capability: str
    request_id: str
    caller: Caller
    text: str | None = None  # the resolved input (summarize, extract)
    prompt_code: str | None = None
    role: str | None = None
    variables: dict[str, Any] = field(default_factory=dict)
    locale: str | None = None
    scene: str | None = None
    model: str | None = None
    max_tokens: int | None = None
    end_user: str | None = None
    tenant: str | None = None
    client_ip: str | None = None
    schema: dict[str, Any] | None = None  # extract: the JSON Schema the output must match
    messages: list[dict[str, Any]] | None = None  # chat
    nonce: Any = None  # a signed request's nonce: claimed by the first model call only
    timeout_s: float | None = None
    source: str | None = None
    task_id: str | None = None  # the task this capability runs for (its calls' request-log rows say so)


@dataclass(frozen=True, slots=True)
class Prepared:
    version: PromptVersion
    locale: str
    messages: list[dict[str, Any]]
    schema: dict[str, Any] | None
    model: str | None
    scene: str | None


@dataclass(slots=True)
class CapabilityResult:
    data: dict[str, Any]


@dataclass(slots=True)
class _Run:
    """What the request has done so far (for the answer and its request-log row)."""

    started: float = field(default_factory=time.perf_counter)
    attempts: list[dict[str, Any]] = field(default_factory=list)
    last: CallContext | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    guardrails: dict[str, Any] = field(default_factory=dict)
    cache_hit: bool = False
    snapshot: CatalogSnapshot | None = None
    quality: list[dict[str, Any]] | None = None


class Capabilities:
    def __init__(self, gateway: Gateway, *, offline_fallback: bool = True) -> None:
        self.gateway = gateway
        self.offline_fallback = offline_fallback

    async def run(self, call: CapabilityCall, snapshot: CatalogSnapshot) -> CapabilityResult:
        run = _Run(snapshot=snapshot)
        version: PromptVersion | None = None
        try:
            role = snapshot.role(call.role) if call.role else None
            version = self._prompt(call, snapshot, role)
            result = await self._run(call, version, role, run)
        except HearthError as exc:
            self._log(call, version, run, status=exc.status, error_code=exc.code)
            raise
        self._log(call, version, run, status=200, error_code=None, degraded=result.data.get("degraded"))
        return result

    def _prompt(self, call: CapabilityCall, snapshot: CatalogSnapshot, role: Role | None) -> PromptVersion | None:
        code = call.prompt_code or (role.prompt_code if role else None) or DEFAULT_PROMPT[call.capability]
        if code is None:
            raise HearthError("invalid_request", "`prompt_code` (or a `role` bound to a prompt) is required.",
                              param="prompt_code")
        try:
            return snapshot.prompt(code, call.request_id)
        except HearthError:
            if call.prompt_code is None and code in BUILTIN:
                return BUILTIN[code]
            raise

    def prepare(self, call: CapabilityCall, snapshot: CatalogSnapshot) -> Prepared:
        """The prompt version, locale, messages, model and scene a call runs with (no model call yet)."""
        role = snapshot.role(call.role) if call.role else None
        version = self._prompt(call, snapshot, role)
        assert version is not None
        return self._prepared(call, version, role)

    def _prepared(self, call: CapabilityCall, version: PromptVersion, role: Role | None) -> Prepared:
        persona = None
        if role is not None:
            persona = role.persona.get(call.locale or "", role.persona[role.default_locale])
        builtins: dict[str, Any] = {"text": call.text or "", "role": role.code if role else None,
                                    "today": datetime.now(UTC).date().isoformat()}
        schema = self._schema(call, version)
        if schema is not None:
            builtins["schema"] = orjson.dumps(schema, option=orjson.OPT_INDENT_2).decode()
        variables = dict(call.variables)
        if call.capability == "summarize" and "max_sentences" in {v.name for v in version.variables}:
            variables.setdefault("max_sentences", 3)
        locale, messages = render_messages(version, call.locale, variables, builtins=builtins, system_prefix=persona)
        if call.capability == "chat":
            messages = [m for m in messages if m["role"] == "system" or m["content"]] + list(call.messages or [])
        return Prepared(version=version, locale=locale, messages=messages, schema=schema,
                        model=call.model or version.model or (role.model if role else None),
                        scene=call.scene or version.scene or (role.scene if role else None))

    def scene_of(self, call: CapabilityCall, prepared: Prepared) -> Scene | None:
        """The scene the call runs in (its rules: guardrails, cache), None when it has none."""
        name = prepared.scene or call.caller.default_scene
        return self.gateway.registry.scenes.get(name) if name else None

    def guard(self, call: CapabilityCall, prepared: Prepared) -> SceneGuard:
        """The guardrails of the scene the call runs in (off when it has none)."""
        scene = self.scene_of(call, prepared)
        return SceneGuard.for_scene(scene.guardrails if scene is not None else None)

    @staticmethod
    def inputs_of(call: CapabilityCall) -> list[str]:
        """What the caller supplied (checked for injection): the input text, string variables, user turns."""
        inputs = [call.text or ""] + [v for v in call.variables.values() if isinstance(v, str)]
        return inputs + [m["content"] for m in call.messages or []
                         if m.get("role") == "user" and isinstance(m.get("content"), str)]

    @staticmethod
    def chat_body(call: CapabilityCall, version: PromptVersion, messages: list[dict[str, Any]],
                  model: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {**version.params, "messages": messages}
        if model is not None:
            body["model"] = model
        if call.max_tokens is not None:
            body["max_tokens"] = call.max_tokens
        return body

    @staticmethod
    def call_context(call: CapabilityCall, version: PromptVersion, scene: str | None, *, first: bool) -> CallContext:
        """One model call's context: the nonce goes with the request's ``first`` call only."""
        return CallContext(request_id=call.request_id, caller=call.caller, route="chat", end_user=call.end_user,
                           tenant=call.tenant, client_ip=call.client_ip, requested_scene=scene,
                           pending_nonce=call.nonce if first else None, timeout_s=call.timeout_s,
                           capability=call.capability, prompt_code=version.code, prompt_version=version.version,
                           task_id=call.task_id)

    def cost_of(self, ctx: CallContext, usage: Usage | None) -> float:
        return call_cost(self.gateway.registry, ctx, usage)

    async def _run(self, call: CapabilityCall, version: PromptVersion | None, role: Role | None,
                   run: _Run) -> CapabilityResult:
        assert version is not None
        prepared = self._prepared(call, version, role)
        locale, messages, schema, model, scene = (prepared.locale, prepared.messages, prepared.schema,
                                                  prepared.model, prepared.scene)
        if model is None and scene is None and call.caller.default_scene is None:
            return self._degraded_or(call, version, locale, run, reason="no_model_configured", exc=HearthError(
                "invalid_request", "No model: name one, or a scene with a default model.", param="model"))
        guard = self.guard(call, prepared)
        run.guardrails = guard.record
        guard.check_inputs(self.inputs_of(call))
        ttl = self._cache_ttl(call, prepared)
        key = None
        if ttl:  # keyed on the messages as the caller's data made them: two texts redacted alike never share
            key = cache_key({"caller": call.caller.name, "tenant": call.tenant, "capability": call.capability,
                             "model": model, "scene": scene, "prompt": [version.code, version.version,
                                                                         version.content_hash],
                             "messages": messages, "params": version.params, "max_tokens": call.max_tokens,
                             "schema": schema})
        messages = guard.redact_messages(messages)
        if key is not None:
            cached = await response_cache.lookup(self.gateway.state, key)
            if cached is not None:
                run.cache_hit = True
                return self._answer(call, version, locale, run, result=cached)
        result = await self._generate(call, version, run, guard=guard, prepared=replace(prepared, messages=messages))
        if key is not None and ttl and not result.data.get("degraded"):
            await response_cache.store(self.gateway.state, key, {k: result.data[k] for k in _RESULT_KEYS
                                                                 if k in result.data}, ttl)
        return result

    def _cache_ttl(self, call: CapabilityCall, prepared: Prepared) -> float | None:
        scene = self.scene_of(call, prepared)
        return scene.cache_ttl_s if scene is not None else None

    async def _generate(self, call: CapabilityCall, version: PromptVersion, run: _Run, *, guard: SceneGuard,
                        prepared: Prepared) -> CapabilityResult:
        locale, messages, schema, model, scene = (prepared.locale, prepared.messages, prepared.schema,
                                                  prepared.model, prepared.scene)
        try:
            content = await self._model_call(call, version, run, messages=messages, model=model, scene=scene,
                                             purpose="initial")
        except HearthError as exc:
            if exc.code in _UNSERVED and call.model is None:
                return self._degraded_or(call, version, locale, run, exc=exc)
            raise
        if guard.moderation_matches(content):
            if guard.policy.moderation_action != "regenerate":
                raise HearthError("content_moderation_rejected", details={"guardrails": guard.record})
            content = await self._model_call(call, version, run, messages=messages, model=model, scene=scene,
                                             purpose="moderation_retry")
            if guard.moderation_matches(content):
                raise HearthError("content_moderation_rejected", details={"guardrails": guard.record})
        if schema is None:
            if version.quality_gate:
                content = await self._through_gate(call, version, run, QualityGateSpec.model_validate(
                    version.quality_gate), content=content, guard=guard, prepared=prepared)
            return self._answer(call, version, locale, run, result=self._plain_result(call, guard.answer(content)))
        document, problems = _checked(guard.answer(content), schema, call.capability)
        if problems:  # the model sees its own answer again, with placeholders: never a restored value
            messages = [*messages, {"role": "assistant", "content": content},
                        {"role": "user", "content": correction_message(problems)}]
            content = await self._model_call(call, version, run, messages=messages, model=model, scene=scene,
                                             purpose="corrective_retry")
            document, problems = _checked(guard.answer(content), schema, call.capability)
            if problems:
                raise HearthError("schema_validation_failed", details={
                    "errors": [p.as_dict() for p in problems], "attempts": run.attempts})
        return self._answer(call, version, locale, run, result={"data": document})

    async def _through_gate(self, call: CapabilityCall, version: PromptVersion, run: _Run, gate: QualityGateSpec, *,
                            content: str, guard: SceneGuard, prepared: Prepared) -> str:
        """The first answer that passes the gate (regenerating up to its limit), else 422 with the report."""
        report: list[dict[str, Any]] = []
        for attempt in range(gate.max_regenerations + 1):
            failed = failed_rules(guard.answer(content), gate.rules)
            score = reason = None
            if not failed and gate.judge is not None:
                score, reason = await self._judge(call, run, gate.judge, content=content, prepared=prepared)
            passed = not failed and (gate.judge is None or (score or 0.0) >= gate.judge.threshold)
            report.append(Evaluation(attempt + 1, passed, failed, score, reason).as_dict())
            run.quality = report
            if passed:
                return content
            if attempt == gate.max_regenerations:
                raise HearthError("quality_gate_failed", details={"report": report, "attempts": run.attempts})
            content = await self._model_call(call, version, run, messages=prepared.messages, model=prepared.model,
                                             scene=prepared.scene, purpose="quality_regeneration")
        raise AssertionError("unreachable")

    async def _judge(self, call: CapabilityCall, run: _Run, judge: JudgeSpec, *, content: str,
                     prepared: Prepared) -> tuple[float, str | None]:
        """Score ``content`` (as the model wrote it: placeholders, never restored values) with the judge prompt."""
        assert run.snapshot is not None
        version = run.snapshot.prompt(judge.prompt_code, call.request_id)
        source = call.text or next((m["content"] for m in reversed(call.messages or []) if m.get("role") == "user"), "")
        _, messages = render_messages(version, call.locale, {}, builtins={"text": content, "source": source})
        answer = await self._model_call(call, version, run, messages=messages,
                                        model=judge.model or version.model or prepared.model,
                                        scene=version.scene or prepared.scene, purpose="quality_judge")
        return judge_score(answer)

    def _schema(self, call: CapabilityCall, version: PromptVersion) -> dict[str, Any] | None:
        if call.capability == "extract_bill":
            return bill.BILL_SCHEMA
        if call.capability == "extract":
            schema = call.schema or (dict(version.output_schema) if version.output_schema else None)
            if schema is None:
                raise HearthError("invalid_request", "Extraction needs `schema` or `schema_code`.", param="schema")
            return schema
        return dict(version.output_schema) if version.output_schema else None

    def _plain_result(self, call: CapabilityCall, content: str) -> dict[str, Any]:
        if call.capability == "summarize":
            return {"summary": content}
        if call.capability == "chat":
            return {"message": {"role": "assistant", "content": content}}
        return {"text": content}

    async def _model_call(self, call: CapabilityCall, version: PromptVersion, run: _Run, *,
                          messages: list[dict[str, Any]], model: str | None, scene: str | None, purpose: str) -> str:
        ctx = self.call_context(call, version, scene, first=not run.attempts)
        ctx.guardrails = run.guardrails or None
        body = self.chat_body(call, version, messages, model)
        started = time.perf_counter()
        run.last = ctx
        attempt: dict[str, Any] = {"purpose": purpose, "model": None, "endpoint": None, "status": 0,
                                   "error_code": None, "prompt_tokens": 0, "completion_tokens": 0, "cost": 0.0}
        run.attempts.append(attempt)
        try:
            reply = await self.gateway.complete(ctx, body)
        except HearthError as exc:
            attempt.update(status=exc.status, error_code=exc.code)
            raise
        finally:
            attempt.update(model=ctx.model, endpoint=ctx.endpoint.name if ctx.endpoint else None,
                           latency_ms=round((time.perf_counter() - started) * 1000, 3))
        usage = reply.usage
        cost = self.cost_of(ctx, usage)
        attempt.update(status=200, prompt_tokens=usage.prompt_tokens if usage else 0,
                       completion_tokens=usage.completion_tokens if usage else 0, cost=cost)
        run.prompt_tokens += attempt["prompt_tokens"]
        run.completion_tokens += attempt["completion_tokens"]
        run.cost += cost
        try:
            content = orjson.loads(reply.body)["choices"][0]["message"]["content"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise HearthError("upstream_error", "The model's answer had no message content.") from None
        return content if isinstance(content, str) else ""

    def _degraded_or(self, call: CapabilityCall, version: PromptVersion, locale: str, run: _Run, *,
                     exc: HearthError, reason: str | None = None) -> CapabilityResult:
        """The offline engine's answer (``degraded``, with why: the gateway's error code, or
        ``no_model_configured``), or ``exc`` for capabilities it cannot serve or when it is turned off."""
        if not self.offline_fallback or call.capability not in ("summarize", "extract_bill"):
            raise exc
        text = call.text or ""
        if call.capability == "summarize":
            sentences = call.variables.get("max_sentences", 3)
            result: dict[str, Any] = {"summary": offline.summarize(
                text, max_sentences=sentences if isinstance(sentences, int) and sentences > 0 else 3)}
        else:
            result = {"data": offline.extract_bill(text)}
        return self._answer(call, version, locale, run, result=result, degraded=True, reason=reason or exc.code)

    def _answer(self, call: CapabilityCall, version: PromptVersion, locale: str, run: _Run, *,
                result: dict[str, Any], degraded: bool = False, reason: str | None = None) -> CapabilityResult:
        ctx = run.last
        data: dict[str, Any] = {
            **result, "usage": {"prompt_tokens": run.prompt_tokens, "completion_tokens": run.completion_tokens,
                                "total_tokens": run.prompt_tokens + run.completion_tokens},
            "cost": round(run.cost, 8), "model": ctx.model if ctx else None,
            "prompt_code": version.code, "prompt_version": version.version, "locale": locale,
            "scene": ctx.scene if ctx else None, "fallback_used": bool(ctx and ctx.fallback_used),
            "attempted_models": list(ctx.attempted_models) if ctx else [],
            "effective_max_tokens": ctx.effective_max_tokens if ctx else None,
            "degraded": degraded, "cache_hit": run.cache_hit, "attempts": run.attempts}
        if reason is not None:
            data["degraded_reason"] = reason
        if run.quality is not None:
            data["quality"] = run.quality
        if call.source is not None:
            data["input_source"] = call.source
        return CapabilityResult(data)

    def _log(self, call: CapabilityCall, version: PromptVersion | None, run: _Run, *, status: int,
             error_code: str | None, degraded: Any = None) -> None:
        ctx = run.last
        ep = ctx.endpoint if ctx else None
        self.gateway.log_writer.submit(observed(RequestLogRecord(
            request_id=call.request_id, created_at=datetime.now(UTC), caller=call.caller.name, route="capability",
            model=ctx.model if ctx else None, endpoint=ep.name if ep else None,
            upstream_model=ep.upstream_model if ep else None, stream=False, status=status, error_code=error_code,
            attempts=len(run.attempts), prompt_tokens=run.prompt_tokens, completion_tokens=run.completion_tokens,
            usage_estimated=False, cost=run.cost, latency_ms=(time.perf_counter() - run.started) * 1000,
            ttft_ms=None, end_user=call.end_user, tenant=call.tenant, client_ip=call.client_ip,
            scene=ctx.scene if ctx else call.scene, capability=call.capability,
            prompt_code=version.code if version else call.prompt_code,
            prompt_version=version.version if version else None, degraded=bool(degraded) if degraded else None,
            guardrails=run.guardrails or None,
            cache_hit=run.cache_hit, task_id=call.task_id)))


    def log_stream(self, call: CapabilityCall, version: PromptVersion, *, ctx: CallContext | None, status: int,
                   error_code: str | None, usage: Usage | None) -> None:
        """The ``route = "capability"`` row of a streamed chat, once its stream ended (however it ended)."""
        run = _Run(last=ctx, prompt_tokens=usage.prompt_tokens if usage else 0,
                   completion_tokens=usage.completion_tokens if usage else 0,
                   cost=self.cost_of(ctx, usage) if ctx is not None else 0.0,
                   guardrails=dict(ctx.guardrails) if ctx is not None and ctx.guardrails else {})
        if ctx is not None and ctx.attempts:
            run.attempts.append({"purpose": "initial"})
        run.started = ctx.started if ctx is not None else run.started
        self._log(call, version, run, status=status, error_code=error_code)


def _checked(content: str, schema: dict[str, Any], capability: str) -> tuple[Any, list[Problem]]:
    try:
        document = parse_json_output(content)
    except NoJson:
        return None, [Problem("", "the answer is not a JSON document")]
    problems = validate(document, schema)
    if not problems and capability == "extract_bill" and isinstance(document, dict):
        problems = [Problem(p.path, p.message) for p in bill.check_bill(document)]
    return document, problems
