"""The task type that runs a batch: ``openai_batch`` (one task per batch, on ``ai.default``).

An attempt reads the batch and continues from wherever it is, so a new attempt after a crash (the reaper
requeues the task of a worker that died; the type is safe to repeat) resumes the batch:

* ``validating`` → ``in_progress`` (the input file was checked when the batch was created);
* ``in_progress``: the lines without an answer in ``batch_items`` run through :class:`BatchExecutor`; then
  ``finalizing`` — or, at the completion window's end, the lines not sent are answered ``batch_expired`` and
  the batch finalizes as ``expired`` (``expired_at`` set when that was decided);
* ``finalizing`` / ``cancelling``: the output and error files are assembled from ``batch_items`` in input order,
  stored in the blob store, and recorded with the final status (``completed``, ``expired`` or ``cancelled``) in
  one transaction — a crash before it commits leaves the batch where it was and the next attempt assembles again.

A failure the task cannot get past (the input file or the caller gone, or the last attempt failing) fails the
batch with the cause in its ``errors``; lines answered before stay recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.batches.batch_store import TERMINAL, Batch, BatchStore
from hearth.batches.executor import BatchExecutor, ExecutorLimits
from hearth.batches.file_store import FileStore
from hearth.batches.finalize import fail, finalize
from hearth.batches.input_file import InputLine, parse_input
from hearth.batches.output_lines import not_sent
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.gateway.service import Gateway
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Caller
from hearth.tasks.retry import RetryPolicy
from hearth.tasks.types import TaskCancelled, TaskContext, TaskLeaseLost, TaskType, TaskTypes

log = get_logger("hearth.batches")

BATCH_TASK = "openai_batch"
BATCH_QUEUE = "ai.default"
# Each crash of a worker running the batch costs an attempt; every attempt resumes where the last one stopped.
BATCH_RETRY = RetryPolicy(max_attempts=10, base_delay_s=1.0, max_delay_s=60.0)


@dataclass(frozen=True, slots=True)
class BatchTasks:
    engine: AsyncEngine
    files: FileStore
    store: BatchStore
    limits: ExecutorLimits
    clock: Clock = SYSTEM_CLOCK

    def register(self, types: TaskTypes) -> None:
        types.register(TaskType(BATCH_TASK, self.run, queue=BATCH_QUEUE, retry=BATCH_RETRY, repeat_safe=True,
                                validate=_payload,
                                description="an OpenAI batch: its lines through the gateway, then its output files"))

    async def run(self, ctx: TaskContext) -> dict[str, Any]:
        batch_id = str(ctx.payload.get("batch_id"))
        batch = await self.store.get(batch_id)
        if batch is None or batch.row["task_id"] != ctx.task.id:  # submitted through the task API: not this batch's
            raise HearthError("invalid_request", "An openai_batch task runs the batch that created it only.",
                              param="payload.batch_id")
        try:
            return await self._run(ctx, batch_id)
        except (TaskCancelled, TaskLeaseLost):
            raise
        except Exception as exc:
            error = exc if isinstance(exc, HearthError) else HearthError("internal_error")
            if not error.retryable or ctx.task.attempt >= ctx.task.max_attempts:
                await fail(self.store, batch_id, error, clock=self.clock)
            if error is exc:
                raise
            log.error("batch_attempt_failed", batch_id=batch_id, error=type(exc).__name__, exc_info=exc)
            raise error from exc

    async def _run(self, ctx: TaskContext, batch_id: str) -> dict[str, Any]:
        batch = await self.store.get(batch_id)
        if batch is None or batch.status in TERMINAL:
            return {"batch_id": batch_id, "status": batch.status if batch else None}
        gateway: Gateway = ctx.services.gateway
        caller = gateway.registry.callers_by_name.get(batch.caller)
        if caller is None or not caller.enabled:
            raise HearthError("caller_disabled", f"The caller `{batch.caller}` that created the batch is disabled "
                              "or gone.")
        if batch.status == "validating":
            await self.store.move(batch_id, "in_progress", only_from=frozenset({"validating"}),
                                  values={"in_progress_at": self.clock.now()})
            batch = await self._reread(batch_id)
        if batch.status == "in_progress":
            lines = await self._lines(batch)
            await self._execute(ctx, batch, caller=caller, gateway=gateway, lines=lines)
            batch = await self._reread(batch_id)
        if batch.status == "finalizing":
            final = "expired" if batch.row["expired_at"] is not None else "completed"
        elif batch.status == "cancelling":
            final = "cancelled"
        else:
            return {"batch_id": batch_id, "status": batch.status}
        await finalize(self.engine, self.files, self.store, batch, final=final, clock=self.clock)
        log.info("batch_finished", batch_id=batch_id, status=final, task_id=ctx.task.id)
        return {"batch_id": batch_id, "status": final}

    async def _execute(self, ctx: TaskContext, batch: Batch, *, caller: Caller, gateway: Gateway,
                       lines: list[InputLine]) -> None:
        """Run what is left; then move to ``finalizing`` (a cancel meanwhile keeps ``cancelling``)."""
        answered = await self.store.answered(batch.id)
        todo = [i for i in range(len(lines)) if i not in answered]
        ctx.progress(_percent(len(lines) - len(todo), len(lines)), "running")
        executor = BatchExecutor(gateway, self.store, limits=self.limits, clock=self.clock)
        stop = await executor.run(batch, caller, lines=lines, todo=todo, task=ctx)
        values: dict[str, Any] = {"finalizing_at": self.clock.now()}
        left = sorted(set(range(len(lines))) - await self.store.answered(batch.id)) if stop.reason == "expired" else []
        if left:  # the window ended with lines not sent (a batch whose lines were all answered just completes)
            for start in range(0, len(left), 1000):
                await self.store.record_many(batch.id, [(i, False, not_sent(lines[i].custom_id, "batch_expired"))
                                                        for i in left[start:start + 1000]], now=self.clock.now())
            values["expired_at"] = self.clock.now()
        if stop.reason != "cancelling":
            await self.store.move(batch.id, "finalizing", only_from=frozenset({"in_progress"}), values=values)

    async def _lines(self, batch: Batch) -> list[InputLine]:
        stored = await self.files.get(str(batch.row["input_file_id"]), batch.caller)
        parsed = parse_input(await self.files.read(stored), endpoint=str(batch.row["endpoint"]),
                             max_lines=int(batch.row["total"]))
        if parsed.problem_count or len(parsed.lines) != batch.row["total"]:  # equal bytes, equal lines: never
            raise HearthError("internal_error", "The batch's input file no longer reads as it did at creation.")
        return parsed.lines

    async def _reread(self, batch_id: str) -> Batch:
        batch = await self.store.get(batch_id)
        if batch is None:
            raise HearthError("batch_not_found")
        return batch


def _payload(payload: dict[str, Any]) -> dict[str, Any]:
    """``{"batch_id": ...}`` and nothing else (the service writes it; a task submitted by hand is refused at run)."""
    if set(payload) != {"batch_id"} or not isinstance(payload["batch_id"], str):
        raise HearthError("invalid_request", "An openai_batch task's payload is `{\"batch_id\": ...}`; create "
                          "batches with POST /v1/batches.", param="payload")
    return payload


def _percent(done: int, total: int) -> int:
    return 100 * done // total if total else 100
