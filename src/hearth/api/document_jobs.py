"""Document jobs: run a stored document through the pipeline, and follow it.

``POST /api/v1/documents/{id}/job`` starts a job (``202``), or answers ``200`` with a job already ``completed``
from the result cache (``cache_hit``). ``GET /api/v1/documents/{id}/job`` is the document's newest job, ``GET
/api/v1/documents/jobs/{job_id}`` one job; both show ``state``, ``progress`` (by milestones), ``current_step``,
each stage, the review item when a reviewer is asked, and the result once completed. ``GET
/api/v1/documents/{id}/job/events`` streams the newest job's changes as Server-Sent Events until it ends.
What each field means: :mod:`hearth.documents.jobs`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from fastapi import Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from hearth.api.deps import authenticated_body, claim_nonce, runtime
from hearth.api.documents import DOCUMENT_ERROR_RESPONSES, document_viewer
from hearth.api.envelope import ok
from hearth.api.event_stream import EventStreamResponse
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_json_object, parse_model
from hearth.api.route_defaults import api_router
from hearth.documents.jobs import PIPELINE, TERMINAL_STATES, DocumentJobs

router = api_router(prefix="/api/v1/documents", tags=["documents"], responses=DOCUMENT_ERROR_RESPONSES)
POLL_S = 0.5


class JobStart(BaseModel):
    """How to run the pipeline; everything is optional."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"model": "chat-default",
                                                                               "locale": "zh-CN"}]})

    model: str | None = Field(default=None, max_length=128, description="a public model name (default: the "
                              "scene's or the prompt's)")
    locale: str | None = Field(default=None, max_length=35, description="the prompt's language, e.g. `zh-CN`")
    prompt_code: str | None = Field(default=None, max_length=128, description="the extraction prompt (default "
                                    "`financial_kpi_extraction`); its active version has the output schema")
    review_rules: dict[str, Any] | None = Field(default=None, description="review trigger switches and limits "
                                                "(docs/documents.md); unknown keys are refused")
    pipeline: str = Field(default=PIPELINE, max_length=128, description="a registered copy of the pipeline")


def _jobs(request: Request) -> DocumentJobs:
    return runtime(request).document_jobs


@router.post("/{document_id}/job", summary="Run the document through the pipeline (202), or complete it from the "
             "result cache at once (200, `cache_hit`)", status_code=202, openapi_extra=request_body(JobStart))
async def start_job(document_id: str, request: Request) -> Response:
    caller, raw, nonce = await authenticated_body(request)
    body = parse_model(JobStart, parse_json_object(raw) if raw.strip() else {}, "job")
    await claim_nonce(request, nonce)
    view = await _jobs(request).start(document_id, caller=caller.name, model=body.model, locale=body.locale,
                                      prompt_code=body.prompt_code, review_rules=body.review_rules,
                                      pipeline=body.pipeline)
    return ok(request, view, status=200 if view["cache_hit"] else 202)


@router.get("/{document_id}/job", summary="The document's newest job: state, progress, current step, stages, "
            "review item, result")
async def get_job(document_id: str, request: Request) -> Response:
    return ok(request, await _jobs(request).latest(document_id, caller=await document_viewer(request)))


@router.get("/jobs/{job_id}", summary="One job (as the document's newest job shows it)")
async def get_job_by_id(job_id: str, request: Request) -> Response:
    jobs = _jobs(request)
    view = await jobs.view(job_id)
    await jobs.documents.get(view["document_id"], await document_viewer(request))  # another caller's: 404
    return ok(request, view)


@router.get("/{document_id}/job/events", summary="The newest job's progress as Server-Sent Events (`progress` on "
            "every change of state, progress or step) until it is completed or failed")
async def job_events(document_id: str, request: Request) -> Response:
    jobs = _jobs(request)
    view = await jobs.latest(document_id, caller=await document_viewer(request))  # 404 before the stream starts
    return EventStreamResponse(JobEventFrames(jobs, view["id"], heartbeat_s=runtime(request).settings.sse_heartbeat_s))


class JobEventFrames:
    """``id: n`` / ``event: progress`` / ``data: {state, progress, current_step, ...}`` each time the job moves,
    read from the database every :data:`POLL_S`; ``: heartbeat`` after ``heartbeat_s`` of silence; ends after the
    event of a completed or failed job. The sleep and the time source are injectable."""

    def __init__(self, jobs: DocumentJobs, job_id: str, *, heartbeat_s: float, poll_s: float = POLL_S,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._jobs = jobs
        self._job_id = job_id
        self._heartbeat_s = heartbeat_s
        self._poll_s = poll_s
        self._sleep = sleep
        self._monotonic = monotonic
        self._next_id = 1

    def _frame(self, view: dict[str, Any]) -> bytes:
        data = {k: view[k] for k in ("id", "state", "progress", "current_step", "review_item_id", "error")}
        if view["state"] == "completed":
            data["result"] = view["result"]
        frame = f"id: {self._next_id}\nevent: progress\n".encode() + b"data: " + orjson.dumps(data) + b"\n\n"
        self._next_id += 1
        return frame

    async def frames(self) -> AsyncIterator[bytes]:
        view = await self._jobs.view(self._job_id)
        yield self._frame(view)
        seen = (view["state"], view["progress"], view["current_step"])
        quiet_since = self._monotonic()
        while view["state"] not in TERMINAL_STATES:
            await self._sleep(self._poll_s)
            view = await self._jobs.view(self._job_id)
            now = (view["state"], view["progress"], view["current_step"])
            if now != seen:
                seen = now
                quiet_since = self._monotonic()
                yield self._frame(view)
            elif self._monotonic() - quiet_since >= self._heartbeat_s:
                quiet_since = self._monotonic()
                yield b": heartbeat\n\n"

    async def close(self) -> None:
        return None
