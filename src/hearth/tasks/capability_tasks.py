"""The capability tasks: ``summarize_async``, ``bill_extract_async``, ``extract_async``, ``text_generate_async``
and ``chat_async`` — the synchronous capabilities, run by a worker, with the same semantics and envelope.

A task's payload is the body the synchronous route takes (:mod:`hearth.capabilities.requests`), checked
when the task is submitted; its result is the ``data`` of the synchronous answer. The call goes through
:class:`hearth.capabilities.service.Capabilities` in the worker's process, so the caller's scenes, limits
and budgets apply per model call, a model lease is held only while a call runs, and each call's request
log row names the task (``task_id``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp

from hearth.capabilities.requests import REQUEST_MODELS, ChatRequest, ExtractRequest, GenerateRequest, call_from_body
from hearth.capabilities.service import Capabilities
from hearth.capabilities.sources import FIELDS, SourceLimits, read_input
from hearth.capabilities.structured import check_schema
from hearth.errors import HearthError
from hearth.gateway.service import Gateway
from hearth.prompts.catalog import PromptCatalog
from hearth.tasks.types import TaskContext, TaskType, TaskTypes
from hearth.validation import parse_model

# task type → (capability, default queue)
CAPABILITY_TASKS: dict[str, tuple[str, str]] = {
    "summarize_async": ("summarize", "ai.summary"),
    "bill_extract_async": ("extract_bill", "ai.bill_extract"),
    "extract_async": ("extract", "ai.default"),
    "text_generate_async": ("generate", "ai.default"),
    "chat_async": ("chat", "ai.default"),
}
_READS_INPUT = frozenset({"summarize", "extract_bill", "extract"})


@dataclass(frozen=True, slots=True)
class CapabilityServices:
    """What capability tasks use in a worker's process."""

    gateway: Gateway
    prompts: PromptCatalog
    session: aiohttp.ClientSession | None
    limits: SourceLimits
    offline_fallback: bool = True


def register_capability_tasks(types: TaskTypes) -> None:
    for name, (capability, queue) in CAPABILITY_TASKS.items():
        types.register(TaskType(name, _handler(capability), queue=queue, validate=_validator(capability),
                                description=f"the {capability} capability, run as a task"))


def _validator(capability: str) -> Any:
    def validate(payload: dict[str, Any]) -> dict[str, Any]:
        body = parse_model(REQUEST_MODELS[capability], payload, "payload")
        if capability in _READS_INPUT and not any(isinstance(payload.get(f), str) and payload[f].strip()
                                                  for f in FIELDS):
            raise HearthError("input_missing", param="payload.text")
        if isinstance(body, ExtractRequest) and body.schema_ is not None:
            check_schema(body.schema_)
        if isinstance(body, ExtractRequest) and body.schema_ is None and body.schema_code is None:
            raise HearthError("invalid_request", "`schema` or `schema_code` is required.", param="payload.schema")
        if isinstance(body, GenerateRequest) and body.prompt_code is None and body.role is None:
            raise HearthError("invalid_request", "`prompt_code` or `role` is required.", param="payload.prompt_code")
        if isinstance(body, ChatRequest) and body.stream:
            raise HearthError("invalid_request", "A chat task cannot stream: follow it with "
                              "GET /api/v1/ai/tasks/{id}/events.", param="payload.stream")
        return payload

    return validate


def _handler(capability: str) -> Any:
    async def run(ctx: TaskContext) -> dict[str, Any]:
        svc: CapabilityServices = ctx.services
        body = parse_model(REQUEST_MODELS[capability], ctx.payload, "payload")
        caller = svc.gateway.registry.callers_by_name.get(ctx.task.caller)
        if caller is None or not caller.enabled:
            raise HearthError("caller_disabled", f"The caller `{ctx.task.caller}` that submitted the task is "
                              "disabled or gone.")
        snapshot = svc.prompts.snapshot
        call = call_from_body(capability, body, caller=caller, request_id=f"{ctx.task.id}.{ctx.task.attempt}",
                              snapshot=snapshot, tenant=ctx.task.tenant, user=ctx.task.end_user)
        call.task_id = ctx.task.id
        if capability in _READS_INPUT:
            ctx.progress(5, "reading_input")
            source = await read_input(ctx.payload, svc.limits, session=svc.session)
            call.text, call.source = source.text, source.source
        ctx.check_cancel()
        ctx.progress(20, "calling_model")
        result = await Capabilities(svc.gateway, offline_fallback=svc.offline_fallback).run(call, snapshot)
        ctx.check_cancel()
        data = result.data
        ctx.record_versions(model=data.get("model"), prompt_code=data.get("prompt_code"),
                            prompt_version=data.get("prompt_version"))
        ctx.progress(95, "finishing")
        return data

    return run
