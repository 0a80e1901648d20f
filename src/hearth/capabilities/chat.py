"""Capability chat with a client ``request_id``: one model call per (caller, user, request id), whether the
request streams or not, and whichever process a duplicate reaches (see :mod:`chat_requests` and
:mod:`chat_stream`). Without a request id a chat is an ordinary call."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities import chat_requests
from hearth.capabilities.chat_requests import ChatKey
from hearth.capabilities.chat_stream import ChatRun, ChatRuns, FollowingChatStream, OwnedChatStream
from hearth.capabilities.service import Capabilities, CapabilityCall, CapabilityResult
from hearth.errors import CATALOG, HearthError
from hearth.gateway.context import CallContext
from hearth.gateway.relay import RelayStream
from hearth.prompts.catalog import CatalogSnapshot
from hearth.providers.base import Usage


@dataclass(frozen=True, slots=True)
class ChatOptions:
    engine: AsyncEngine
    runs: ChatRuns
    heartbeat_s: float
    keep_s: float
    wait_s: float  # how long a duplicate waits for another process's run


def chat_key(call: CapabilityCall, request_id: str | None) -> ChatKey | None:
    return ChatKey(call.caller.name, call.end_user or "", request_id) if request_id else None


async def chat_once(service: Capabilities, call: CapabilityCall, snapshot: CatalogSnapshot, *,
                    key: ChatKey | None, options: ChatOptions) -> CapabilityResult:
    if key is None:
        return await service.run(call, snapshot)
    claim = await chat_requests.claim(options.engine, key, keep_s=options.keep_s, stale_s=options.wait_s)
    if not claim.won:
        return _stored(claim.row)
    try:
        result = await service.run(call, snapshot)
    except HearthError as exc:
        await chat_requests.finish(options.engine, key, status="failed", events=None, result=None,
                                   error={"code": exc.code, "message": exc.message, "status": exc.status})
        raise
    except BaseException:
        await chat_requests.finish(options.engine, key, status="failed", events=None, result=None,
                                   error={"code": "internal_error", "message": "The call failed.", "status": 500})
        raise
    await chat_requests.finish(options.engine, key, status="succeeded", events=None, result=result.data, error=None)
    return result


def _stored(row: dict[str, Any] | None) -> CapabilityResult:
    """A duplicate's answer: the stored result (no model call), its stored error, or "still running"."""
    assert row is not None
    if row["status"] == "running":
        raise HearthError("request_in_progress", details={"status": "running"}, retry_after=1)
    if row["status"] == "failed":
        error = row["error"] or {}
        stored_code = error.get("code")
        code = stored_code if isinstance(stored_code, str) and stored_code in CATALOG else "internal_error"
        raise HearthError(code, error.get("message"), details={"replayed": True})
    return CapabilityResult({**(row["result"] or {}), "replayed": True})


async def chat_stream(service: Capabilities, call: CapabilityCall, snapshot: CatalogSnapshot, *,
                      key: ChatKey | None, last_event_id: int,
                      options: ChatOptions) -> OwnedChatStream | FollowingChatStream:
    if key is not None:
        local = options.runs.get(key)
        if local is not None:
            return FollowingChatStream(run=local, key=key, engine=options.engine, after=last_event_id,
                                       heartbeat_s=options.heartbeat_s, stored=None, wait_s=options.wait_s)
        claim = await chat_requests.claim(options.engine, key, keep_s=options.keep_s, stale_s=options.wait_s)
        if not claim.won:
            row = claim.row or {}
            stored = None if row.get("status") == "running" else _as_events(row)
            return FollowingChatStream(run=None, key=key, engine=options.engine, after=last_event_id,
                                       heartbeat_s=options.heartbeat_s, stored=stored, wait_s=options.wait_s)
    try:
        prepared = service.prepare(call, snapshot)
        guard = service.guard(call, prepared)
        guard.check_inputs(service.inputs_of(call))
    except HearthError as exc:  # refused before any model call: the claim records why, for its duplicates
        if key is not None:
            await chat_requests.finish(options.engine, key, status="failed", events=None, result=None,
                                       error={"code": exc.code, "message": exc.message, "status": exc.status})
        raise
    prepared = replace(prepared, messages=guard.redact_messages(prepared.messages))
    body = service.chat_body(call, prepared.version, prepared.messages, prepared.model)
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    ctx = service.call_context(call, prepared.version, prepared.scene, first=True)
    ctx.guardrails = guard.record or None

    async def opening() -> RelayStream:
        return await service.gateway.open_stream(ctx, body)

    def done(relay_ctx: CallContext, usage: Usage | None, answer: str) -> dict[str, Any]:
        return {"request_id": call.request_id, "client_request_id": key.request_id if key else None,
                "prompt_code": prepared.version.code, "prompt_version": prepared.version.version,
                "model": relay_ctx.model, "locale": prepared.locale,
                "usage": {"prompt_tokens": usage.prompt_tokens if usage else 0,
                          "completion_tokens": usage.completion_tokens if usage else 0},
                "cost": round(service.cost_of(relay_ctx, usage), 8),
                "message": {"role": "assistant", "content": answer}}

    def finished(relay_ctx: CallContext | None, status: int, error_code: str | None, usage: Usage | None) -> None:
        service.log_stream(call, prepared.version, ctx=relay_ctx or ctx, status=status, error_code=error_code,
                           usage=usage)

    run = options.runs.start(key) if key is not None else None
    return OwnedChatStream(opening=opening, run=run or ChatRun(), runs=options.runs, key=key, engine=options.engine,
                           heartbeat_s=options.heartbeat_s, done=done, finished=finished)


def _as_events(row: dict[str, Any]) -> list[dict[str, Any]]:
    """A finished request's events; a non-stream one's answer as the events a stream would have sent."""
    if row.get("events"):
        return list(row["events"])
    if row.get("status") == "succeeded" and row.get("result"):
        result = row["result"]
        message = (result.get("message") or {}).get("content", "")
        return [{"id": 1, "event": "message", "data": {"answer": message}},
                {"id": 2, "event": "done", "data": result}]
    error = row.get("error") or {"code": "internal_error", "message": ""}
    return [{"id": 1, "event": "error", "data": {"code": error.get("code"), "message": error.get("message")}}]
