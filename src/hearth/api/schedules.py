"""Schedules (admin): define, list, pause, resume, trigger, backfill and delete; see each occurrence.

A schedule belongs to a caller (whose task each occurrence submits: its queue bounds, fairness and
visibility apply) and is managed with the admin token, like the registry. Times in requests and
answers are epoch seconds (UTC); the cron expression is read in the schedule's ``time_zone``.
"""

from __future__ import annotations

from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES
from hearth.api.deps import read_json_object, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_model
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.registry.names import RegistryName
from hearth.workflows.cron import CronError, CronSpec
from hearth.workflows.schedules import ScheduleDefinition, ScheduleService

router = api_router(prefix="/api/v1/schedules", tags=["schedules"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)


class ScheduleTarget(BaseModel):
    """The task each occurrence submits (checked when the schedule is defined, as a submission would be)."""

    model_config = ConfigDict(extra="forbid")

    task_type: str = Field(min_length=1, max_length=64)
    payload: dict[str, Any] = Field(default_factory=dict)
    queue: str | None = Field(default=None, max_length=64)
    priority: int = Field(default=0, ge=-100, le=100)


class ScheduleCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "name": "daily-summary", "caller": "report-service", "cron": "0 8 * * *", "time_zone": "Asia/Shanghai",
        "target": {"task_type": "summarize_async", "payload": {"text": "…"}},
        "misfire_policy": "run_once", "overlap_policy": "skip"}]})

    name: RegistryName
    caller: RegistryName = Field(description="whose task each occurrence submits")
    cron: str = Field(min_length=1, max_length=256, description="5 fields (minute hour day month weekday) or 6 "
                      "(seconds first), names, ranges, steps, @daily …")
    time_zone: str = Field(default="UTC", max_length=64, description="IANA zone the cron expression is read in")
    target: ScheduleTarget
    start_at: float | None = Field(default=None, ge=0, description="no occurrence before (epoch seconds)")
    end_at: float | None = Field(default=None, ge=0, description="no occurrence after (epoch seconds)")
    jitter_s: float = Field(default=0.0, ge=0, le=3600, description="each task starts up to this much later, "
                            "fixed per occurrence")
    misfire_policy: Literal["run_once", "run_all", "skip", "prompt"] = "run_once"
    catchup_window_s: float = Field(default=3600.0, ge=0, le=31 * 86400, description="how old a missed "
                                    "occurrence may be and still fire (run_once, run_all)")
    overlap_policy: Literal["skip", "buffer_one", "buffer_all", "cancel_other", "allow_all"] = "skip"
    paused: bool = False

    @field_validator("cron")
    @classmethod
    def _cron(cls, value: str) -> str:
        try:
            CronSpec.parse(value)
        except CronError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"`{value}` is not an IANA time zone (e.g. Asia/Shanghai, UTC)") from None
        return value

    @model_validator(mode="after")
    def _window(self) -> ScheduleCreate:
        if self.start_at is not None and self.end_at is not None and self.end_at <= self.start_at:
            raise ValueError("end_at must be after start_at")
        return self


class Backfill(BaseModel):
    model_config = ConfigDict(extra="forbid")

    start: float = Field(ge=0, description="occurrences planned after this instant (epoch seconds) …")
    end: float = Field(ge=0, description="… and at most this one (not in the future)")


def _service(request: Request) -> ScheduleService:
    return runtime(request).schedules


def schedule_view(row: Any) -> dict[str, Any]:
    return {k: row[k] for k in ("id", "name", "caller", "cron", "time_zone", "target", "start_at", "end_at",
                                "jitter_s", "misfire_policy", "catchup_window_s", "overlap_policy", "paused",
                                "next_at", "planned_through", "created_at", "updated_at")}


def occurrence_view(row: Any) -> dict[str, Any]:
    return {k: row[k] for k in ("schedule_id", "planned_at", "state", "reason", "task_id", "decided_at")}


@router.post("", summary="Define a schedule", openapi_extra=request_body(ScheduleCreate))
async def create_schedule(request: Request) -> Response:
    body = parse_model(ScheduleCreate, await read_json_object(request), "schedule")
    if body.caller not in runtime(request).gateway.registry.callers_by_name:
        raise HearthError("invalid_request", f"No caller `{body.caller}` in the registry.", param="caller")
    row = await _service(request).create(ScheduleDefinition(
        name=body.name, caller=body.caller, cron=body.cron, time_zone=body.time_zone,
        target=body.target.model_dump(), start_at=body.start_at, end_at=body.end_at, jitter_s=body.jitter_s,
        misfire_policy=body.misfire_policy, catchup_window_s=body.catchup_window_s,
        overlap_policy=body.overlap_policy, paused=body.paused))
    return ok(request, schedule_view(row), status=201)


@router.get("", summary="Schedules, by caller and name")
async def list_schedules(request: Request, *, caller: str | None = None, limit: int = 100) -> Response:
    if not 1 <= limit <= 1000:
        raise HearthError("invalid_request", "`limit` is between 1 and 1000.", param="limit")
    rows = await _service(request).page(caller=caller, limit=limit)
    return ok(request, {"schedules": [schedule_view(r) for r in rows]})


@router.get("/{schedule_id}", summary="One schedule")
async def get_schedule(schedule_id: str, request: Request) -> Response:
    return ok(request, schedule_view(await _service(request).get(schedule_id)))


@router.delete("/{schedule_id}", summary="Delete a schedule and its occurrence history (tasks stay)")
async def delete_schedule(schedule_id: str, request: Request) -> Response:
    await _service(request).delete(schedule_id)
    return ok(request, {"deleted": schedule_id})


@router.post("/{schedule_id}/pause", summary="Pause: nothing is decided or fired until resumed")
async def pause_schedule(schedule_id: str, request: Request) -> Response:
    return ok(request, schedule_view(await _service(request).set_paused(schedule_id, True)))


@router.post("/{schedule_id}/resume", summary="Resume: planning starts again from now (the pause is not caught up)")
async def resume_schedule(schedule_id: str, request: Request) -> Response:
    return ok(request, schedule_view(await _service(request).set_paused(schedule_id, False)))


@router.post("/{schedule_id}/trigger", summary="Fire one occurrence now")
async def trigger_schedule(schedule_id: str, request: Request) -> Response:
    return ok(request, occurrence_view(await _service(request).trigger(schedule_id)))


@router.post("/{schedule_id}/backfill", summary="Fire every occurrence of a past range that has none yet (≤ 1,000)",
             openapi_extra=request_body(Backfill))
async def backfill_schedule(schedule_id: str, request: Request) -> Response:
    body = parse_model(Backfill, await read_json_object(request), "backfill")
    if body.end <= body.start:
        raise HearthError("invalid_request", "`end` must be after `start`.", param="end")
    return ok(request, {"added": await _service(request).backfill(schedule_id, body.start, body.end)})


@router.get("/{schedule_id}/occurrences", summary="What became of each occurrence, newest first")
async def list_occurrences(schedule_id: str, request: Request, *, limit: int = 100) -> Response:
    if not 1 <= limit <= 1000:
        raise HearthError("invalid_request", "`limit` is between 1 and 1000.", param="limit")
    rows = await _service(request).occurrences(schedule_id, limit=limit)
    return ok(request, {"occurrences": [occurrence_view(r) for r in rows]})
