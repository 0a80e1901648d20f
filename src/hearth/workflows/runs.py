"""Workflow runs: a registered definition executed as tasks, review items, timers, signals and child runs,
each step checkpointed.

A run is rows: the run, and one row per step holding its state and, once it ends, its output — the
checkpoint. Nothing lives in a process: :meth:`RunService.advance_all` (every process's scheduler pass) and
:meth:`RunService.advance` (after a start, a signal, a child's end) read the rows and move the run on, so a run
survives any restart and a step that finished never runs again. A pass reads a batch of runs with their steps,
tasks, review items, child runs and signals in a few queries and writes each run's outcome in one
compare-and-set transaction (:mod:`hearth.workflows.run_pass`, :mod:`hearth.workflows.run_store`); passes in
several processes at once start each step's work once (:mod:`hearth.workflows.run_steps` keys it).

Operators act on runs through :mod:`hearth.workflows.run_actions` (pause, resume, terminate; rerun, skip or
mark a step succeeded). Each action moves the run's ``epoch`` on, and a pass's write needs the run still
``running`` at the epoch it read (:func:`hearth.workflows.run_store.apply`): a pass that read the rows before an
action commits nothing after it. A rerun moves the step's ``round`` on, as a loop iteration does, so its work is
keyed anew. What a pass that lost its write had started and nothing will adopt is let go of
(:meth:`RunService._drop_unadopted`).

When a step is ready and how a run ends: :mod:`hearth.workflows.run_plan`, :mod:`hearth.workflows.run_pass`.
**Signals** (:meth:`RunService.signal`) are stored: a wait step takes the oldest one of its event, whether it
was sent before the step began waiting or after. A signal is refused (409 ``workflow_signal_unexpected``) when
no step of the run can take it: the run is over, no wait step for the event is left to run, or every one of
them already has a signal kept for it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.observability import tracing
from hearth.observability.logging import get_logger
from hearth.tasks.service import TaskService
from hearth.workflows import run_store
from hearth.workflows.definition_store import DefinitionStore
from hearth.workflows.definitions import WaitStep, WorkflowDefinition
from hearth.workflows.reviews import ReviewService
from hearth.workflows.run_pass import Pass, drive
from hearth.workflows.run_plan import ENDED, RunPlan
from hearth.workflows.run_steps import RunSteps

log = get_logger("hearth.workflow_runs")

RUNS_PER_PASS = 5_000  # a scheduler pass looks at this many running runs at most; the next goes on from there
_BATCH = 500
_PLANS_KEPT = 256


@dataclass(slots=True)
class RunService:
    engine: AsyncEngine
    definitions: DefinitionStore
    tasks: TaskService
    reviews: ReviewService
    clock: Clock = SYSTEM_CLOCK
    _plans: OrderedDict[tuple[str, int], RunPlan] = field(default_factory=OrderedDict)
    _cursor: str = ""  # where the next scheduler pass goes on among the running runs
    _passing: asyncio.Lock = field(default_factory=asyncio.Lock)  # background passes of this process, one at a time

    async def start(self, name: str, *, caller: str, run_input: dict[str, Any],
                    version: int | None = None, run_id: str | None = None) -> Mapping[str, Any]:
        """Start a run (``run_id``: chosen by the caller — a job that records its run before starting it)."""
        found, plan = await self._plan(name, version)
        run_id = run_id or "wfr_" + new_id()
        await run_store.create_run(self.engine, run_store.NewRun(
            id=run_id, workflow=name, version=found, caller=caller, input=run_input,
            step_ids=[s.id for s in plan.definition.steps]), now=self.clock.now())
        await self.advance(run_id)
        return await self.get(run_id)

    async def get(self, run_id: str) -> dict[str, Any]:
        """The run and every step (state, task, review or child run, output, error, timings, detail), in
        declaration order."""
        loaded = (await run_store.load(self.engine, [run_id])).get(run_id)
        if loaded is None:
            raise HearthError("workflow_run_not_found", f"No workflow run `{run_id}`.", param="run_id")
        run, rows, _ = loaded
        _, plan = await self._plan(run["workflow"], run["version"])
        return {**run, "steps": [{**{k: v for k, v in rows[s.id].items() if k != "run_id"}, "kind": s.kind,
                                  "needs": list(s.needs), "join": s.join} for s in plan.definition.steps]}

    async def signal(self, run_id: str, *, event: str, payload: Any) -> dict[str, Any]:
        """Deliver an external event to the run (see the module's docstring for when it is refused)."""
        run = await self.get(run_id)
        _, plan = await self._plan(run["workflow"], run["version"])
        waits = {sid for sid, s in plan.steps.items() if isinstance(s, WaitStep) and s.event == event}
        room = await run_store.add_signal(self.engine, run_id, event=event, payload=payload, waits=waits,
                                          now=self.clock.now())
        if room.signal_id is None:
            state = room.run_state or "gone"
            reason = ("the run is " + state if state not in ("running", "paused") else
                      f"no wait step of the run is left for event `{event}`" if not room.open_waits else
                      f"every wait step for event `{event}` already has a signal kept for it")
            raise HearthError("workflow_signal_unexpected", f"No step can take this signal: {reason}.",
                              param="event", details={"run_state": state, "waiting_steps": room.open_waits,
                                                      "kept_signals": room.kept})
        await self.advance(run_id)
        row = await run_store.signal_row(self.engine, room.signal_id)
        taker = row["consumed_by"].rpartition("#")[0] if row["consumed_by"] else None
        return {"id": room.signal_id, "run_id": run_id, "event": event, "created_at": row["created_at"],
                "taken_by": taker}

    async def advance_all(self) -> int:
        """Move running runs on (the scheduler pass), up to :data:`RUNS_PER_PASS` of them, going on next time
        where this pass stopped; how many runs were looked at."""
        seen = 0
        while seen < RUNS_PER_PASS:
            ids = await run_store.running_runs(self.engine, after=self._cursor, limit=_BATCH)
            self._cursor = ids[-1] if len(ids) == _BATCH else ""
            async with self._passing:
                await self._advance_many(ids)
            seen += len(ids)
            if not self._cursor:
                break
        return seen

    async def advance_runs(self, run_ids: Sequence[str]) -> None:
        """Move these runs on (one pass each, together), e.g. because a task of one of their steps ended."""
        if run_ids:
            async with self._passing:
                await self._advance_many(run_ids)

    async def advance(self, run_id: str) -> None:
        """Move one run on as far as it can go now."""
        await self._advance_many([run_id])

    async def _advance_many(self, run_ids: Sequence[str], depth: int = 0, *, batched: bool = True) -> None:
        """One pass over each run, in a handful of queries for all of them: read their rows (and their tasks,
        review items, child runs), drive each pass in memory, submit every task they start in one call
        (``batched``), write every pass in one transaction (:func:`hearth.workflows.run_store.apply_many`), then do
        what the written passes asked for. A batch of tasks that is refused (one of them is) sends its runs
        through a pass of their own each, where the refusal fails only its step."""
        loaded = await run_store.load(self.engine, run_ids)
        running = {rid: v for rid, v in loaded.items() if v[0]["state"] == "running"}
        work = [r for _, rows, _ in running.values() for r in rows.values() if r["state"] == "running"]
        task_ids = [t for r in work for t in [r["task_id"], *(r["detail"] or {}).get("tasks", ())] if t]
        child_ids = [c for r in work for c in [(r["detail"] or {}).get("run_id"), *(r["detail"] or {}).get("runs", ())]
                     if c]
        tasks = await self.tasks.get_many(task_ids) if task_ids else {}
        review_ids = [r["review_id"] for r in work if r["review_id"]]
        reviews = await self.reviews.get_many(review_ids) if review_ids else {}
        children = await run_store.runs_by_id(self.engine, child_ids)
        steps = RunSteps(self.tasks, self.reviews, self._plan, batch=[] if batched and len(running) > 1 else None)
        passes: list[Pass] = []
        for run_id, (run, rows, signals) in running.items():
            p: Pass | None = None
            try:
                _, plan = await self._plan(run["workflow"], run["version"])
                p = Pass(plan=plan, run=run, rows=rows, signals=signals, tasks=tasks, reviews=reviews,
                         children=children, now=self.clock.now())
                await (drive(p, steps) if tracing.active is None else _traced_drive(p, steps))
            except Exception as exc:  # one run's trouble never stops the others
                if p is not None:
                    steps.drop(p)
                log.warning("workflow_run_advance_failed", run_id=run_id, error=type(exc).__name__)
                continue
            if p.changed:
                passes.append(p)
        if steps.batch:
            asked = {x.p.run["id"] for x in steps.batch}
            try:
                await steps.submit_batch()
            except HearthError:
                passes = [p for p in passes if p.run["id"] not in asked]
                await self._advance_many(sorted(asked), depth, batched=False)
        await self._write(passes, depth)

    async def _write(self, passes: Sequence[Pass], depth: int) -> None:
        writes = [run_store.PassWrite(p.run["id"], p.run["epoch"], p.written()) for p in passes]
        try:
            lost = await run_store.apply_many(self.engine, writes, now=self.clock.now())
        except Exception as exc:  # the database: nothing written; what the passes started is keyed, and adopted
            log.warning("workflow_run_write_failed", runs=len(writes), error=type(exc).__name__)  # by the next one
            return
        woken: list[str] = []
        for p in passes:
            if p.run["id"] in lost:  # another process or an operator moved it first: the next pass decides
                await self._drop_unadopted(p.run["id"], p)
                continue
            for task_id in p.after.cancel_tasks:
                await self._cancel_task(task_id)
            for run_id in p.after.stop_runs:
                await self.stop_run(run_id)
            woken += p.after.advance_runs
        if woken and depth < 16:  # new child runs, and parents whose child ended
            await self._advance_many(woken, depth + 1)

    async def _drop_unadopted(self, run_id: str, p: Pass) -> None:
        """The pass lost its write, but it may have submitted tasks or raised review items already. One that the
        step now holds — or that a later pass will name again, because the step still waits at the same round in
        a run that goes on — is kept; nothing will ever adopt the others (an operator reset the step or ended the
        run, a loop moved on): their tasks are cancelled, their items withdrawn. (Child runs are inserted with
        the pass's write, so a lost pass leaves none.)"""
        if not p.started:
            return
        loaded = (await run_store.load(self.engine, [run_id])).get(run_id)
        if loaded is None:
            return
        run, rows, _ = loaded
        for step_id, round_, values in p.started:
            row = rows[step_id]
            if run["state"] in ("running", "paused") and row["state"] == "waiting" and row["round"] == round_:
                continue
            held = {row["task_id"], row["review_id"], *(row["detail"] or {}).get("tasks", ())}
            for task_id in [values.get("task_id"), *(values.get("detail") or {}).get("tasks", ())]:
                if task_id and task_id not in held:
                    await self._cancel_task(task_id)
            review_id = values.get("review_id")
            if review_id and review_id not in held:
                with contextlib.suppress(HearthError):
                    await self.reviews.withdraw(review_id, operator="hearth", reason="its workflow step was reset")

    async def stop_run(self, run_id: str) -> None:
        """Cancel a child run whose parent step stopped, and everything it runs, down its own children."""
        running = await run_store.cancel_run(self.engine, run_id, error={"code": "parent_step_stopped"},
                                             now=self.clock.now())
        for row in running or ():
            detail = row["detail"] or {}
            for task_id in [row["task_id"], *detail.get("tasks", ())]:
                if task_id:
                    await self._cancel_task(task_id)
            for child in [detail.get("run_id"), *detail.get("runs", ())]:
                if child:
                    await self.stop_run(child)

    async def _cancel_task(self, task_id: str) -> None:
        with contextlib.suppress(HearthError):  # it ended meanwhile: nothing to cancel
            await self.tasks.cancel(task_id, caller=None)

    async def plan_of(self, name: str, version: int) -> RunPlan:
        """The :class:`RunPlan` of a stored definition version (what operator actions decide against)."""
        return (await self._plan(name, version))[1]

    async def _plan(self, name: str, version: int | None) -> tuple[int, RunPlan]:
        """The definition version (the newest when None) as a :class:`RunPlan`; versions never change, so the
        plans of the last few hundred are kept."""
        if version is not None and (name, version) in self._plans:
            self._plans.move_to_end((name, version))
            return version, self._plans[(name, version)]
        stored = await self.definitions.get(name, version)
        key = (name, int(stored["version"]))
        if key not in self._plans:
            self._plans[key] = RunPlan.of(WorkflowDefinition.model_validate(stored["spec"]))
            while len(self._plans) > _PLANS_KEPT:
                self._plans.popitem(last=False)
        return key[1], self._plans[key]


async def _traced_drive(p: Pass, steps: RunSteps) -> None:
    """:func:`drive` in a span of its own (tracing on): the pass's span, under the request or scheduler pass that
    moved the run on, is the parent of what the pass submits (its tasks link to it) and of one span per step
    that ended in it, timed from the step's start to its end."""
    t = tracing.active
    assert t is not None
    run = p.run
    before = {sid: row["state"] for sid, row in p.rows.items()}
    span = t.start("workflow pass", under=tracing.parent.get(), attributes={
        "hearth.workflow.name": run["workflow"], "hearth.workflow.version": run["version"],
        "hearth.workflow.run_id": run["id"]})
    token = tracing.parent.set(span)
    failed: str | None = None
    try:
        await drive(p, steps)
    except Exception as exc:
        failed = type(exc).__name__
        raise
    finally:
        tracing.parent.reset(token)
        ended = [sid for sid, row in p.rows.items() if row["state"] in ENDED and before.get(sid) not in ENDED]
        for sid in ended:
            row, step = p.rows[sid], p.plan.steps[sid]
            error = row["error"].get("code") if isinstance(row["error"], dict) else None
            begun = row["started_at"] if row["started_at"] is not None else p.now
            tracing.end(t.start("workflow step", under=span, start_time=begun, attributes={
                "hearth.workflow.name": run["workflow"], "hearth.workflow.step": sid,
                "hearth.workflow.step_kind": step.kind, "hearth.workflow.step_state": row["state"]}),
                error=error if row["state"] == "failed" else None, end_time=row["finished_at"] or p.now)
        tracing.end(span, error=failed, attributes={"hearth.workflow.steps_ended": len(ended),
                                                    "hearth.workflow.run_state": (p.changes.run or {}).get("state")})
