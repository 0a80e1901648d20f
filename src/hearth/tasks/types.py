"""The public API for task handlers: register a task type, then report progress and check for cancel.

A *task type* names a handler (an async function of a :class:`TaskContext`), the queue it runs on, its
retry policy, whether an attempt cut short by a dead worker may simply run again (``repeat_safe``) and
its soft and hard time limits. Capability tasks (:mod:`hearth.tasks.capability_tasks`) are registered
this way, and so will be workflow steps and document stages::

    async def resize(ctx: TaskContext) -> dict[str, Any]:
        ctx.progress(10, "downloading")
        ...
        ctx.check_cancel()          # raises TaskCancelled once an operator or the caller cancelled
        return {"width": 640}       # the task's result (JSON)

    types.register(TaskType("image_resize", resize, queue="ai.default", repeat_safe=True))

A handler's return value is the result; a :class:`hearth.errors.HearthError` it raises is classified by
:mod:`hearth.tasks.retry` (retry later, fail now, hold); any other exception fails the task without retry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hearth.errors import HearthError

if TYPE_CHECKING:
    from hearth.tasks.retry import RetryPolicy


class TaskCancelled(Exception):
    """Raised by :meth:`TaskContext.check_cancel` once the task was cancelled: unwinds the handler."""


class TaskLeaseLost(Exception):
    """Raised by :meth:`TaskContext.check_cancel` once another attempt owns the task (this one went stale)."""


class SoftTimeLimitExceeded(HearthError):
    """Raised by :meth:`TaskContext.check_cancel` after the type's soft time limit: wrap up and stop."""

    def __init__(self, limit_s: float) -> None:
        super().__init__("task_soft_time_limit", f"The task ran past its soft time limit of {limit_s:g} s.",
                         details={"soft_time_limit_s": limit_s})


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """What a handler knows about the task it runs (the claimed row)."""

    id: str
    task_type: str
    queue: str
    attempt: int
    max_attempts: int
    payload: dict[str, Any]
    caller: str
    tenant: str | None
    end_user: str | None
    request_id: str | None
    priority: int
    callback_url: str | None = None
    trace_parent: str | None = None  # the submitting span's W3C traceparent (tracing on): the task's span links it
    idempotency_key: str | None = None


class TaskContext:
    """One attempt of one task, as its handler sees it.

    ``progress`` and ``step`` are buffered and written by the worker's next transaction (several
    reports between two writes cost one row update); ``check_cancel`` reads flags the worker keeps
    current from heartbeats and notifications, so it costs no database round trip.
    """

    __slots__ = (
        "_cancelled",
        "_lost",
        "_report",
        "_soft_deadline",
        "_soft_limit_s",
        "percent",
        "services",
        "step",
        "task",
        "versions",
    )

    def __init__(self, task: TaskRecord, services: Any, *, report: Callable[[TaskContext], None],
                 soft_deadline: float | None = None, soft_limit_s: float | None = None) -> None:
        self.task = task
        self.services = services  # what the handler's process offers (hearth.tasks.worker.TaskServices)
        self._cancelled = False
        self._lost = False
        self._soft_deadline = soft_deadline
        self._soft_limit_s = soft_limit_s
        self._report = report
        self.versions: dict[str, Any] = {}
        self.step: str | None = None
        self.percent: int | None = None

    @property
    def payload(self) -> dict[str, Any]:
        return self.task.payload

    def progress(self, percent: int | None = None, step: str | None = None) -> None:
        """Report progress (0–100) and/or the current step; both appear on the task and in its events."""
        if percent is not None:
            self.percent = max(0, min(100, int(percent)))
        if step is not None:
            self.step = step[:128]
        self._report(self)

    def record_versions(self, **values: Any) -> None:
        """Note which model and prompt version the task's calls used (shown on the task)."""
        self.versions.update({k: v for k, v in values.items() if v is not None})

    def cancel(self) -> None:
        self._cancelled = True

    def lose_lease(self) -> None:
        self._lost = True

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    @property
    def lease_lost(self) -> bool:
        return self._lost

    def check_cancel(self, *, soft_limit: bool = True) -> None:
        """Call before and after each model call and each step: raises if the attempt must stop
        (cancelled, superseded, or — unless ``soft_limit`` is False — past the soft time limit)."""
        if self._lost:
            raise TaskLeaseLost(self.task.id)
        if self._cancelled:
            raise TaskCancelled(self.task.id)
        if soft_limit and self._soft_deadline is not None and asyncio.get_running_loop().time() >= self._soft_deadline:
            raise SoftTimeLimitExceeded(self._soft_limit_s or 0.0)


Handler = Callable[[TaskContext], Awaitable[dict[str, Any] | None]]
Validator = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class TaskType:
    """A kind of task: its handler and how the engine treats it.

    ``validate`` checks (and may normalise) a payload when the task is submitted, so bad input is a
    400 at submission, not a dead letter later. ``repeat_safe=False`` marks a call that must not
    silently run twice (a paid image generation): an attempt in flight when its worker died is held
    for an operator instead of being retried.
    """

    name: str
    handler: Handler
    queue: str = "ai.default"
    retry: RetryPolicy | None = None  # None: the engine's default policy
    repeat_safe: bool = True
    soft_time_limit_s: float | None = None
    time_limit_s: float | None = None  # hard limit: the attempt is stopped and fails
    validate: Validator | None = None
    description: str = ""


@dataclass(slots=True)
class TaskTypes:
    """The task types this process knows (an API process accepts them; a worker runs them)."""

    _types: dict[str, TaskType] = field(default_factory=dict)

    def register(self, task_type: TaskType) -> None:
        if task_type.name in self._types:
            raise ValueError(f"task type {task_type.name!r} is already registered")
        self._types[task_type.name] = task_type

    def get(self, name: str) -> TaskType | None:
        return self._types.get(name)

    def names(self) -> list[str]:
        return sorted(self._types)

    def on_queues(self, queues: Iterable[str]) -> dict[str, list[str]]:
        """The type names each of ``queues`` runs (a queue no type uses maps to an empty list)."""
        wanted = set(queues)
        out: dict[str, list[str]] = {q: [] for q in wanted}
        for t in self._types.values():
            if t.queue in wanted:
                out[t.queue].append(t.name)
        return out
