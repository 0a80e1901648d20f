"""Workflow runs: a registered definition executed as tasks and review items, each step checkpointed.

A run is rows: the run, and one row per step holding its state and, once it ends, its output — the
checkpoint. Nothing lives in a process: :meth:`RunService.advance` (called at start and by every
process's scheduler pass) reads the rows and moves the run on, so a run survives any restart and a step
that finished never runs again. Every move is a compare-and-set on the step's state, and a step's task is
submitted under the idempotency key ``wf:<run>:<step>``, so passes in several processes at once start each
step once.

This first engine runs ``task``, ``approval`` and ``join`` steps:

* a step is ready when its ``needs`` are done by its join rule — ``all`` (AND): every one succeeded;
  ``any`` (OR): the first to succeed wins and the others still running are cancelled (a result that
  arrives after is logged, never used);
* a failed step fails the run (``on_error: fail``, the default: what has not started is skipped, what runs
  is cancelled) or counts as done with no output (``on_error: continue``);
* an ``approval`` raises a review item (:mod:`hearth.workflows.reviews`) with the step's rendered input as
  its payload and waits holding no slot; approved, its output is that payload; modified, the reviewer's
  payload; rejected or expired — never approved by the timer — the step fails. The step after an approval
  is submitted afresh, so its budgets and limits are checked at that moment.

A definition using other kinds (``wait``, ``condition``, ``fanout``, ``loop``, ``subworkflow``) or error
branches to a step is refused when a run is started (400 ``workflow_step_unsupported``), never half-run.
This module owns ``workflow_runs`` and ``workflow_steps``.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.observability.logging import get_logger
from hearth.store.db import write_transaction
from hearth.store.tables import workflow_runs, workflow_steps
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.states import TERMINAL
from hearth.workflows.definition_store import DefinitionStore
from hearth.workflows.definitions import ApprovalStep, JoinStep, TaskStep, WorkflowDefinition, topological_order
from hearth.workflows.expressions import ExpressionError, render
from hearth.workflows.reviews import ReviewRequest, ReviewService

log = get_logger("hearth.workflow_runs")

_SUPPORTED = (TaskStep, ApprovalStep, JoinStep)
_ENDED = ("succeeded", "failed", "skipped", "cancelled")
_runs = workflow_runs.c
_steps = workflow_steps.c


def _check_supported(defn: WorkflowDefinition) -> None:
    for i, step in enumerate(defn.steps):
        if not isinstance(step, _SUPPORTED):
            raise HearthError("workflow_step_unsupported", f"Step `{step.id}` is a `{step.kind}` step, which the run "
                              "engine does not run yet (task, approval and join steps run).", param=f"steps[{i}].kind")
        if step.on_error not in ("fail", "continue"):
            raise HearthError("workflow_step_unsupported", f"Step `{step.id}` names an error branch; runs support "
                              "on_error fail or continue for now.", param=f"steps[{i}].on_error")
        if isinstance(step, ApprovalStep) and step.on_timeout != "fail":
            raise HearthError("workflow_step_unsupported", f"Step `{step.id}` names a timeout branch; runs support "
                              "on_timeout fail for now.", param=f"steps[{i}].on_timeout")


@dataclass(slots=True)
class RunService:
    engine: AsyncEngine
    definitions: DefinitionStore
    tasks: TaskService
    reviews: ReviewService
    clock: Clock = SYSTEM_CLOCK

    async def start(self, name: str, *, caller: str, run_input: dict[str, Any],
                    version: int | None = None) -> Mapping[str, Any]:
        stored = await self.definitions.get(name, version)
        defn = WorkflowDefinition.model_validate(stored["spec"])
        _check_supported(defn)
        now = self.clock.now()
        run_id = "wfr_" + new_id()
        async with write_transaction(self.engine) as conn:
            await conn.execute(workflow_runs.insert().values(
                id=run_id, workflow=name, version=stored["version"], caller=caller, input=run_input, state="running",
                created_at=now, updated_at=now))
            await conn.execute(workflow_steps.insert(), [{"run_id": run_id, "step_id": s.id, "state": "waiting"}
                                                          for s in defn.steps])
        await self.advance(run_id)
        return await self.get(run_id)

    async def get(self, run_id: str) -> dict[str, Any]:
        """The run and every step (state, task or review, output, error, timings), in declaration order."""
        view, _ = await self._load(run_id)
        return view

    async def _load(self, run_id: str) -> tuple[dict[str, Any], WorkflowDefinition]:
        """The run's view (see :meth:`get`) and the definition version it runs, read once."""
        async with self.engine.connect() as conn:
            run = (await conn.execute(select(workflow_runs).where(_runs.id == run_id))).mappings().first()
            if run is None:
                raise HearthError("workflow_run_not_found", f"No workflow run `{run_id}`.", param="run_id")
            steps = {r["step_id"]: dict(r) for r in (await conn.execute(
                select(workflow_steps).where(_steps.run_id == run_id))).mappings()}
        defn = WorkflowDefinition.model_validate((await self.definitions.get(run["workflow"], run["version"]))["spec"])
        view = {**dict(run), "steps": [{**{k: v for k, v in steps[s.id].items() if k != "run_id"}, "kind": s.kind,
                                        "needs": list(s.needs), "join": s.join} for s in defn.steps]}
        return view, defn

    async def advance_all(self) -> int:
        """Move every running run on (the scheduler pass); how many runs were looked at."""
        async with self.engine.connect() as conn:
            ids = (await conn.execute(select(_runs.id).where(_runs.state == "running").order_by(_runs.updated_at)
                                      .limit(100))).scalars().all()
        for run_id in ids:
            try:
                await self.advance(run_id)
            except Exception as exc:  # one run's trouble never stops the others
                log.warning("workflow_run_advance_failed", run_id=run_id, error=type(exc).__name__)
        return len(ids)

    async def advance(self, run_id: str) -> None:
        """Move the run on until nothing more can happen now."""
        while await self._step_once(run_id):
            pass

    async def _step_once(self, run_id: str) -> bool:
        view, defn = await self._load(run_id)
        if view["state"] != "running":
            return False
        rows = {s["step_id"]: s for s in view["steps"]}
        by_id = {s.id: s for s in defn.steps}
        for step_id in topological_order(defn):
            step, row = by_id[step_id], rows[step_id]
            if row["state"] == "running" and await self._observe(run_id, step, row):
                return True
            if row["state"] == "waiting":
                verdict = _readiness(step, [(by_id[n], rows[n]) for n in step.needs])
                if verdict == "skip":
                    return await self._end(run_id, step_id, "skipped", error={"code": "upstream_failed"})
                if verdict == "ready":
                    await self._cancel_losers(run_id, step, rows)
                    return await self._begin(view, step, rows)
        return await self._conclude(view, defn)

    # ------------------------------------------------------------------ starting a step

    async def _begin(self, run: Mapping[str, Any], step: Any, rows: Mapping[str, Mapping[str, Any]]) -> bool:
        scope = {"input": run["input"], "steps": {sid: {"output": r["output"]} for sid, r in rows.items()
                                                  if r["state"] == "succeeded" or r["state"] == "failed"}}
        if isinstance(step, JoinStep):
            output = {n: rows[n]["output"] for n in step.needs if rows[n]["state"] == "succeeded"}
            return await self._end(run["id"], step.id, "succeeded", output=output, started=True)
        try:
            payload = render(step.input, scope)
        except ExpressionError as exc:
            return await self._end(run["id"], step.id, "failed", error={"code": "input_mapping_failed",
                                                                        "message": str(exc)}, started=True)
        values: dict[str, Any] = {"state": "running", "started_at": self.clock.now()}
        if isinstance(step, TaskStep):
            try:
                ((task, _),) = await self.tasks.submit([Submission(
                    task_type=step.task_type, payload=payload, caller=run["caller"],
                    idempotency_key=f"wf:{run['id']}:{step.id}")])
            except HearthError as exc:
                if exc.retryable:
                    return False  # a full queue: the next pass tries again
                return await self._end(run["id"], step.id, "failed", error={"code": exc.code,
                                                                            "message": exc.message}, started=True)
            values["task_id"] = task["id"]
        else:
            item_id = "rv_wf_" + hashlib.sha256(f"{run['id']}:{step.id}".encode()).hexdigest()[:24]
            await self.reviews.raise_item(ReviewRequest(
                title=f"Workflow `{run['workflow']}`: approve step `{step.id}`", payload=payload,
                timeout_s=step.timeout_s, queue="workflows", subject_kind="workflow_step",
                subject_id=f"{run['id']}:{step.id}", form=step.form, caller=run["caller"], item_id=item_id))
            values["review_id"] = item_id
        return await self._move(run["id"], step.id, "waiting", values)

    async def _cancel_losers(self, run_id: str, step: Any, rows: Mapping[str, Mapping[str, Any]]) -> None:
        """An OR join is ready: what its other needs still run is cancelled (a late result is logged, not used)."""
        if step.join != "any":
            return
        for n in step.needs:
            row = rows[n]
            if row["state"] == "running" and row["task_id"]:
                await self._cancel_task(row["task_id"])  # if it ended meanwhile, its result is not used either
                await self._move(run_id, n, "running", {"state": "cancelled", "finished_at": self.clock.now(),
                                                        "error": {"code": "lost_the_race"}})

    # ------------------------------------------------------------------ watching a running step

    async def _observe(self, run_id: str, step: Any, row: Mapping[str, Any]) -> bool:
        if row["task_id"]:
            task = await self.tasks.get(row["task_id"], caller=None)
            if task["state"] not in TERMINAL:
                return False
            if task["state"] in ("succeeded", "mark_succeeded"):
                return await self._end(run_id, step.id, "succeeded", output=task["result"])
            return await self._end(run_id, step.id, "failed", error={"code": task["error_code"] or "task_failed"})
        item = await self.reviews.get(row["review_id"])
        if item["state"] == "approved":
            return await self._end(run_id, step.id, "succeeded", output=item["payload"])
        if item["state"] == "modified":
            return await self._end(run_id, step.id, "succeeded", output=item["decision"])
        if item["state"] in ("rejected", "expired"):
            return await self._end(run_id, step.id, "failed", error={"code": f"review_{item['state']}",
                                                                     "reason": item["reason"]})
        return False

    async def _cancel_task(self, task_id: str) -> None:
        with contextlib.suppress(HearthError):  # it ended meanwhile: nothing to cancel
            await self.tasks.cancel(task_id, caller=None)

    # ------------------------------------------------------------------ the writers

    async def _end(self, run_id: str, step_id: str, state: str, *, output: Any = None, error: Any = None,
                   started: bool = False) -> bool:
        now = self.clock.now()
        values = {"state": state, "output": output, "error": error, "finished_at": now}
        if started:
            values["started_at"] = now
        return await self._move(run_id, step_id, "waiting" if started or state == "skipped" else "running", values)

    async def _move(self, run_id: str, step_id: str, from_state: str, values: dict[str, Any]) -> bool:
        async with write_transaction(self.engine) as conn:
            moved = await conn.execute(update(workflow_steps).where(
                _steps.run_id == run_id, _steps.step_id == step_id, _steps.state == from_state).values(**values))
            if moved.rowcount == 1:
                await conn.execute(update(workflow_runs).where(_runs.id == run_id).values(updated_at=self.clock.now()))
            return moved.rowcount == 1

    async def _conclude(self, run: Mapping[str, Any], defn: WorkflowDefinition) -> bool:
        rows = {s["step_id"]: s for s in run["steps"]}
        fatal = next((s for s in defn.steps if rows[s.id]["state"] == "failed" and s.on_error == "fail"), None)
        if fatal is None and not all(r["state"] in _ENDED for r in rows.values()):
            return False
        if fatal is not None:
            for s in defn.steps:  # stop what is left: nothing more of a failed run starts
                row = rows[s.id]
                if row["state"] == "running" and row["task_id"]:
                    await self._cancel_task(row["task_id"])
                if row["state"] in ("waiting", "running"):
                    await self._move(run["id"], s.id, row["state"], {"state": "cancelled",
                                                                      "finished_at": self.clock.now()})
        now = self.clock.now()
        error = None if fatal is None else {"step": fatal.id, **(rows[fatal.id]["error"] or {})}
        async with write_transaction(self.engine) as conn:
            await conn.execute(update(workflow_runs).where(_runs.id == run["id"], _runs.state == "running").values(
                state="failed" if fatal is not None else "succeeded", error=error, finished_at=now, updated_at=now))
        return False


def _readiness(step: Any, needs: list[tuple[Any, Mapping[str, Any]]]) -> str:
    """``ready``, ``skip`` (it can never run: its needs failed) or ``wait``, by the step's join rule."""
    done = [(s.on_error == "continue" and r["state"] == "failed") or r["state"] == "succeeded" for s, r in needs]
    dead = [r["state"] in ("skipped", "cancelled") or (r["state"] == "failed" and s.on_error != "continue")
            for s, r in needs]
    if not needs or (step.join == "all" and all(done)) or (step.join == "any" and any(done)):
        return "ready"
    if (step.join == "all" and any(dead)) or (step.join == "any" and all(dead)):
        return "skip"
    return "wait"
