"""The Batch API's operations as the routers call them: create, retrieve, cancel, list.

Creation reads and checks the whole input file (:mod:`hearth.batches.input_file`) before anything is written:

* a wrong file makes a batch that is ``failed`` at once, its problems in ``errors`` (as OpenAI reports them);
* otherwise the batch row (``validating``), the answers of lines whose body the route's validation refused
  (400s for the error file) and the task that runs it are written in **one transaction**: a batch is never
  recorded without its task, nor a task without its batch.

Callers see their own batches; another caller's batch is ``batch_not_found``, as one that does not exist.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.batches.batch_store import ACTIVE, Batch, BatchStore
from hearth.batches.batch_task import BATCH_TASK
from hearth.batches.file_store import FileStore
from hearth.batches.finalize import fail, finalize
from hearth.batches.input_file import ENDPOINTS, BodyCheck, parse_input
from hearth.batches.output_lines import refused, request_id
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.observability.logging import get_logger
from hearth.store.db import write_transaction
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.states import TERMINAL as TASK_TERMINAL

log = get_logger("hearth.batches")

COMPLETION_WINDOWS = {"24h": 24 * 3600.0}
MAX_METADATA_PAIRS = 16
MAX_METADATA_KEY = 64
MAX_METADATA_VALUE = 512
MAX_PAGE = 100


@dataclass(frozen=True, slots=True)
class BatchRequest:
    """Who creates the batch (the request's caller, tenant and request id) and what it asked for."""

    caller: str
    tenant: str | None
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None


def batch_request(body: dict[str, Any], *, caller: str, tenant: str | None) -> BatchRequest:
    """``POST /v1/batches``'s body checked as OpenAI checks it (400 ``invalid_request`` naming ``param``)."""
    file_id = body.get("input_file_id")
    if not isinstance(file_id, str) or not file_id:
        raise HearthError("invalid_request", "`input_file_id` is required.", param="input_file_id")
    endpoint = body.get("endpoint")
    if endpoint not in ENDPOINTS:
        raise HearthError("invalid_request", f"`endpoint` must be one of {', '.join(ENDPOINTS)}.", param="endpoint")
    window = body.get("completion_window")
    if window not in COMPLETION_WINDOWS:
        raise HearthError("invalid_request", "`completion_window` must be 24h.", param="completion_window")
    metadata = body.get("metadata")
    if metadata is not None and not _valid_metadata(metadata):
        raise HearthError("invalid_request", f"`metadata` must be an object of at most {MAX_METADATA_PAIRS} "
                          f"string values (keys up to {MAX_METADATA_KEY} characters, values up to "
                          f"{MAX_METADATA_VALUE}).", param="metadata")
    return BatchRequest(caller=caller, tenant=tenant, input_file_id=file_id, endpoint=str(endpoint),
                        completion_window=str(window), metadata=metadata)


def _valid_metadata(value: Any) -> bool:
    return isinstance(value, dict) and len(value) <= MAX_METADATA_PAIRS and all(
        isinstance(k, str) and len(k) <= MAX_METADATA_KEY and isinstance(v, str) and len(v) <= MAX_METADATA_VALUE
        for k, v in value.items())


class BatchService:
    def __init__(self, engine: AsyncEngine, files: FileStore, tasks: TaskService, *, max_lines: int,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.engine = engine
        self.files = files
        self.store = BatchStore(engine)
        self.tasks = tasks
        self.max_lines = max_lines
        self.clock = clock

    async def create(self, req: BatchRequest, *, check_body: BodyCheck, request_id_: str | None) -> Batch:
        """Check the input file, then record the batch and queue its task (see the module docstring)."""
        stored = await self.files.get(req.input_file_id, req.caller)
        if stored.purpose != "batch":
            raise HearthError("invalid_request", "The input file's purpose must be `batch`.", param="input_file_id")
        data = await self.files.read(stored)
        parsed = await asyncio.to_thread(parse_input, data, endpoint=req.endpoint, max_lines=self.max_lines,
                                         check_body=check_body)
        now = self.clock.now()
        batch_id = "batch_" + new_id()
        row: dict[str, Any] = {
            "id": batch_id, "caller": req.caller, "tenant": req.tenant, "endpoint": req.endpoint,
            "input_file_id": stored.id, "completion_window": req.completion_window, "status": "validating",
            "output_file_id": None, "error_file_id": None, "errors": None, "batch_metadata": req.metadata,
            "total": len(parsed.lines), "completed": 0, "failed": len(parsed.refused), "task_id": None,
            "created_at": now, "expires_at": now + COMPLETION_WINDOWS[req.completion_window]}
        errors = parsed.errors_object()
        if errors is not None:
            row.update(status="failed", failed_at=now, errors=errors, total=0, failed=0)
        refused_items = [(index, False, refused(request_id(), parsed.lines[index].custom_id, exc))
                         for index, exc in sorted(parsed.refused.items())] if errors is None else []
        task: dict[str, Any] | None = None
        async with write_transaction(self.engine) as conn:
            if errors is None:
                task = await self.tasks.submit_in(conn, Submission(
                    task_type=BATCH_TASK, payload={"batch_id": batch_id}, caller=req.caller, tenant=req.tenant,
                    request_id=request_id_))
                row["task_id"] = task["id"]
            await self.store.insert(conn, row)
            await self.store.insert_items(conn, batch_id, refused_items, now)
            # The answer is the batch as created (`validating`, as OpenAI answers): read after the commit, a worker
            # woken by the task's notification may already show it `in_progress`.
            created = await self.store.get_in(conn, batch_id)
        assert created is not None
        if task is not None:
            self.tasks.wakeups.poke(task["queue"])
        log.info("batch_created", batch_id=batch_id, caller=req.caller, status=row["status"], lines=row["total"],
                 refused=len(refused_items), problems=parsed.problem_count)
        return created

    async def get(self, batch_id: str, caller: str) -> Batch:
        """The caller's batch; one still running whose task already ended is ended first (:meth:`_orphaned`)."""
        batch = await self.store.get(batch_id)
        if batch is None or batch.caller != caller:
            raise HearthError("batch_not_found", f"No batch found with id '{batch_id}'.", param="batch_id")
        if batch.status in ACTIVE and batch.row["task_id"] is not None and await self._orphaned(batch):
            batch = await self.store.get(batch_id) or batch
        return batch

    async def _orphaned(self, batch: Batch) -> bool:
        """A batch whose task ended without ending it — an operator or the caller killed the task through the task
        API (before it ran, or while it ran), or its last attempt was lost — is ended now: ``cancelled`` with the
        answers so far for a killed task, else ``failed``. Whether it was."""
        task = await self.tasks.get(str(batch.row["task_id"]), caller=None)
        if task["state"] not in TASK_TERMINAL:
            return False
        if task["state"] == "killed":
            await self.store.move(batch.id, "cancelling", only_from=frozenset({"validating", "in_progress"}),
                                  values={"cancelling_at": self.clock.now()})
            current = await self.store.get(batch.id)
            if current is not None and current.status == "cancelling":
                await finalize(self.engine, self.files, self.store, current, final="cancelled", clock=self.clock)
        else:
            await fail(self.store, batch.id, HearthError("internal_error", f"The batch's task ended {task['state']} "
                                                         "without finishing it."), clock=self.clock)
        log.warning("batch_task_ended_first", batch_id=batch.id, task_id=task["id"], task_state=task["state"])
        return True

    async def cancel(self, batch_id: str, caller: str) -> Batch:
        """``validating`` / ``in_progress`` → ``cancelling``; the task stops sending, finishes the calls in flight
        and finalizes as ``cancelled``. Cancelling again is a no-op; a finished batch is 409."""
        batch = await self.get(batch_id, caller)
        moved = await self.store.move(batch.id, "cancelling", only_from=frozenset({"validating", "in_progress"}),
                                      values={"cancelling_at": self.clock.now()})
        batch = await self.get(batch_id, caller)
        if not moved and batch.status not in ("cancelling", "cancelled"):
            raise HearthError("batch_state_conflict", f"Cannot cancel a batch with status '{batch.status}'.",
                              param="batch_id", details={"status": batch.status})
        if moved:
            log.info("batch_cancelling", batch_id=batch.id, caller=caller)
        return batch

    async def page(self, caller: str, *, after: str | None, limit: int) -> dict[str, Any]:
        """OpenAI's list: newest first, ``after`` the last id of the previous page."""
        found = await self.store.page(caller, after=after, limit=limit)
        if found is None:
            raise HearthError("batch_not_found", f"No batch found with id '{after}'.", param="after")
        batches, more = found
        data = [b.view() for b in batches]
        return {"object": "list", "data": data, "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None, "has_more": more}
