"""``workflow.fail``: a built-in task type that always fails, with the message its payload gives.

A workflow ends as failed, with a reason a person can read, when a branch says the work cannot go on — the
lesson-preparation example's ``generation_failed`` step runs when no generation passed the quality gate. The
failure is ``workflow_failed`` (a 4xx class: never retried); ``details`` carries the payload's ``details``.

Payload ``{"message": "...", "details": {...}?}``.
"""

from __future__ import annotations

from typing import Any, NoReturn

from pydantic import BaseModel, ConfigDict, Field

from hearth.errors import HearthError
from hearth.tasks.types import TaskContext, TaskType, TaskTypes
from hearth.validation import parse_model

__all__ = ["WORKFLOW_FAIL", "register_fail_task"]

WORKFLOW_FAIL = "workflow.fail"


class _FailPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, max_length=2000)
    details: dict[str, Any] = Field(default_factory=dict)


def _validate(payload: dict[str, Any]) -> dict[str, Any]:
    parse_model(_FailPayload, payload, "payload")
    return payload


async def _fail(ctx: TaskContext) -> NoReturn:
    body = parse_model(_FailPayload, ctx.payload, "payload")
    raise HearthError("workflow_failed", body.message, details=body.details)


def register_fail_task(types: TaskTypes, *, queue: str = "ai.default") -> None:
    types.register(TaskType(WORKFLOW_FAIL, _fail, queue=queue, validate=_validate,
                            description="end a workflow as failed, with the payload's message"))
