"""Request and answer models of the task API (``/api/v1/ai/tasks``, ``/api/v1/ai/dead-letters``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hearth.api.admin_schemas import ErrorEnvelope
from hearth.tasks.service import MAX_BATCH

TASK_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{code: {"model": ErrorEnvelope} for code in (400, 401, 403, 404, 409, 413, 429, 503)},
    "4XX": {"model": ErrorEnvelope, "description": "Another client error"},
}


class TaskCreate(BaseModel):
    """One task. ``payload`` is the body the matching synchronous capability takes (``summarize_async`` →
    the body of ``POST /api/v1/ai/summarize``), checked now so bad input is a 400, not a dead letter."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "task_type": "summarize_async", "payload": {"text": "Hearth is a self-hosted AI service. ..."},
        "idempotency_key": "order-42-summary", "priority": 0}]})

    task_type: str = Field(max_length=64, description="summarize_async, bill_extract_async, extract_async, "
                           "text_generate_async, chat_async (or a type a plugin registered)")
    payload: dict[str, Any] = Field(default_factory=dict)
    priority: int = Field(default=0, ge=-100, le=100, description="higher runs first; below 0 is refused first "
                          "when the queue passes its watermark")
    queue: str | None = Field(default=None, max_length=64, description="default: the task type's queue")
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=128, description="the same key "
                                        "(per caller) always names the same task, whatever its state")
    callback_url: str | None = Field(default=None, max_length=2048, description="POSTed (signed) when the task "
                                     "ends; see docs/tasks.md")
    run_after: datetime | float | None = Field(default=None, description="not before this instant (ISO 8601 or "
                                               "epoch seconds); the task is `waiting` until then")
    tenant: str | None = Field(default=None, max_length=256)
    user: str | None = Field(default=None, max_length=256, description="the end user: fairness and per-user bounds")


class TaskBatch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: list[TaskCreate] = Field(min_length=1, max_length=MAX_BATCH, description="queued in one transaction: "
                                    "all or none")


class OperatorAction(BaseModel):
    """Who decides and why; both are kept with the time in the audit history."""

    model_config = ConfigDict(extra="forbid")

    operator: str = Field(default="", max_length=128)
    reason: str = Field(default="", max_length=2000)


class TaskAccepted(BaseModel):
    task_id: str
    state: str
    created: bool = Field(description="false: an earlier submission with this idempotency key (the same task)")
    task_type: str
    queue: str


class TaskAcceptedEnvelope(BaseModel):
    success: Literal[True]
    data: TaskAccepted
    error: None
    request_id: str


class TaskBatchAccepted(BaseModel):
    tasks: list[TaskAccepted]


class TaskBatchEnvelope(BaseModel):
    success: Literal[True]
    data: TaskBatchAccepted
    error: None
    request_id: str
