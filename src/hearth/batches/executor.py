"""Running a batch's lines through the gateway core, a bounded number at a time, each answer recorded once.

Every line is one gateway call with the same :class:`~hearth.gateway.context.CallContext` the chat door builds
(route ``batch``): the batch's caller and tenant, the body's ``user`` as the end user — so scenes, allowlists,
rate limits, budgets, routing, the request log and usage events hold for every line. At most ``concurrency``
lines of one batch are in flight at once.

A retryable refusal (a caller or endpoint limit, capacity, an upstream outage after failover) is tried again
after its ``Retry-After`` (or a short backoff) up to ``retries`` more times, then recorded as that error; any
other error is recorded at once. A line's answer is committed (:class:`AnswerWriter`: the answers arriving
together share a transaction) before its lane takes the next line, so work survives a crash line by line.

Stopping: the executor reads the batch's status every ``poll_s`` and stops sending once it is ``cancelling``,
and stops at the completion window's end (``expires_at``). A task that lost its lease or was cancelled stops at
once (:meth:`TaskContext.check_cancel`). Calls in flight when it stops finish and are recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from hearth.batches.batch_store import AnswerWriter, Batch, BatchStore
from hearth.batches.input_file import InputLine
from hearth.batches.output_lines import answered, refused, request_id
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError, UpstreamHTTPError
from hearth.gateway.context import CallContext
from hearth.gateway.model_name import shown_model
from hearth.gateway.service import Gateway
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Caller
from hearth.tasks.types import TaskContext
from hearth.wire.model_name import public_model_body

log = get_logger("hearth.batches")
MAX_BACKOFF_S = 30.0


@dataclass(frozen=True, slots=True)
class ExecutorLimits:
    concurrency: int = 8  # lines of one batch in flight at once
    retries: int = 3  # further tries of a line refused with a retryable error
    poll_s: float = 0.5  # how often the batch's status is read (a cancel is noticed within this)


@dataclass(slots=True)
class Stop:
    """Why the executor stopped sending (None: it ran out of lines)."""

    reason: str | None = None  # "cancelling" | "expired"
    event: asyncio.Event = field(default_factory=asyncio.Event)

    def set(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.event.set()


class BatchExecutor:
    def __init__(self, gateway: Gateway, store: BatchStore, *, limits: ExecutorLimits,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.gateway = gateway
        self.store = store
        self.limits = limits
        self.clock = clock

    async def run(self, batch: Batch, caller: Caller, *, lines: Sequence[InputLine], todo: Sequence[int],
                  task: TaskContext) -> Stop:
        """Answer the lines ``todo`` (indexes into ``lines``); how it stopped."""
        stop = Stop()
        writer = AnswerWriter(self.store, batch.id, self.clock)
        pending: Iterator[int] = iter(todo)
        done = len(lines) - len(todo)
        watcher = asyncio.create_task(self._watch(batch, stop), name=f"batch-watch-{batch.id}")

        expires_at = float(batch.row["expires_at"])

        async def lane() -> None:
            for index in pending:  # the lanes share one iterator: each takes the next unanswered line
                task.check_cancel(soft_limit=False)
                if self.clock.now() >= expires_at:
                    stop.set("expired")
                if stop.reason is not None:
                    return
                ok, output = await self._answer(batch, caller, lines[index], task=task, stop=stop)
                await writer.record(index, ok, output)
                nonlocal done
                done += 1
                task.progress(100 * done // len(lines))

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(max(1, min(self.limits.concurrency, len(todo)))):
                    group.create_task(lane())
        except BaseExceptionGroup as failed:  # the first lane's failure, as the worker classifies it
            raise failed.exceptions[0] from None
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
        return stop

    async def _watch(self, batch: Batch, stop: Stop) -> None:
        expires_at = float(batch.row["expires_at"])
        while stop.reason is None:
            if self.clock.now() >= expires_at:
                stop.set("expired")
                return
            current = await self.store.get(batch.id)
            if current is None or current.status == "cancelling":
                stop.set("cancelling")
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.event.wait(), self.limits.poll_s)

    async def _answer(self, batch: Batch, caller: Caller, line: InputLine, *, task: TaskContext,
                      stop: Stop) -> tuple[bool, str]:
        """(ok, the output line) of one line, after the retries its errors allow."""
        req_id = request_id()
        for attempt in range(self.limits.retries + 1):
            try:
                body = await self._call(batch, caller, req_id, line=line, task=task)
                output = answered(req_id, line.custom_id, 200, body)
                ok = True
                break
            except HearthError as exc:
                if exc.retryable and attempt < self.limits.retries and stop.reason is None:
                    await self._back_off(exc.retry_after, attempt, stop)
                    continue
                output, ok = refused(req_id, line.custom_id, exc), False
                break
            except UpstreamHTTPError as exc:  # a caller mistake the upstream caught: its error body, as relayed
                output, ok = answered(req_id, line.custom_id, exc.status, exc.body), False
                break
            except Exception as exc:  # a fault of this line's call only: the line says so, the batch goes on
                log.error("batch_line_failed", batch_id=batch.id, custom_id=line.custom_id, error=type(exc).__name__,
                          exc_info=exc)
                output, ok = refused(req_id, line.custom_id, HearthError("internal_error")), False
                break
        else:  # pragma: no cover - the loop always breaks on its last attempt
            raise AssertionError("unreachable")
        return ok, output

    async def _call(self, batch: Batch, caller: Caller, req_id: str, *, line: InputLine, task: TaskContext) -> bytes:
        body = line.body
        user = body.get("user")
        ctx = CallContext(request_id=req_id, caller=caller, route="batch", tenant=batch.row["tenant"],
                          end_user=user[:256] if isinstance(user, str) and user else None, task_id=task.task.id)
        gw = self.gateway
        reply = await (gw.embed(ctx, body) if batch.row["endpoint"] == "/v1/embeddings" else gw.complete(ctx, body))
        public = shown_model(gw.registry, ctx.model, ctx.endpoint)
        return reply.body if public is None else public_model_body(reply.body, public)

    async def _back_off(self, retry_after: float | None, attempt: int, stop: Stop) -> None:
        wait = min(MAX_BACKOFF_S, retry_after if retry_after is not None else 2.0 ** attempt)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.event.wait(), wait)

