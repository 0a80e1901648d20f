"""Operator actions on workflow runs: pause, resume, terminate; rerun, skip or mark a step succeeded — each audited.

Every action names an ``operator`` and a ``reason`` (both required: 400 ``operator_reason_required``) and is one
transaction that

1. locks the run row (``SELECT … FOR UPDATE``; on SQLite the process's write lane does it),
2. reads the steps and decides (a 409 when the run's or the step's state does not allow the action),
3. writes the steps it changes, each a compare-and-set on the state and generation it read,
4. moves the run (state, and ``epoch`` + 1 — the fence), and
5. appends a row to ``workflow_run_actions`` with what the changed rows were before and after.

A scheduler pass (:mod:`hearth.workflows.runs`) writes the run row first too, and only while the run is
``running`` at the epoch it read; so a pass that read the rows before an action commits nothing after it, and
an action never meets a half-applied pass. After the commit the action cancels the tasks of the steps it took
back (cooperatively, as ``POST /tasks/{id}/cancel``) and withdraws their open review items (they expire; they
are never approved); a run left ``running`` is advanced at once.

What each action means:

* **pause** (``running`` → ``paused``): nothing new starts; what runs keeps running, and its result is
  recorded when the run resumes. **resume** (``paused`` → ``running``).
* **terminate** (``running`` | ``paused`` → ``terminated``, final): waiting and running steps end
  ``cancelled`` (``run_terminated``), running tasks are cancelled, open review items withdrawn.
* **rerun** a step (not ``waiting``): the step and every step that depends on it, transitively, go back to
  ``waiting`` with a new generation, so they run afresh (new tasks, new review items); their old checkpoints
  stay in this audit, unused. A finished run (``succeeded`` or ``failed``) is reopened.
* **skip** a ``waiting`` or ``failed`` step: it ends ``skipped`` (``override: skipped``) and the steps after it
  see it as skipped by their join rules — under an AND join they are skipped too; an OR join waits for another
  branch.
* **mark_succeeded** a step not ``succeeded``: it counts as succeeded, with the operator's ``output`` (or null),
  so the steps after it run. This changes *execution state only* (``override: mark_succeeded``): no task ran,
  no business outcome was decided or verified, and the output is whatever the operator said it is.

Skip and mark_succeeded also reopen a failed run, and put back to ``waiting`` what ended only because of the
failure (steps ``skipped`` as ``upstream_failed``, steps ``cancelled`` when the run failed), to be decided again.
Neither re-runs what already ran: use rerun for that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from hearth.errors import HearthError
from hearth.store.db import write_transaction
from hearth.store.tables import workflow_run_actions, workflow_runs, workflow_steps
from hearth.workflows.definitions import WorkflowDefinition
from hearth.workflows.runs import RunService

_AUDITED = ("state", "generation", "task_id", "review_id", "output", "error", "override", "started_at",
            "finished_at")
_Planner = Callable[[Mapping[str, Any], Mapping[str, Mapping[str, Any]], WorkflowDefinition], "_Plan"]
_runs = workflow_runs.c
_steps = workflow_steps.c
_actions = workflow_run_actions.c


@dataclass(frozen=True, slots=True)
class Audit:
    """Who acts and why; both kept with the time in ``workflow_run_actions``."""

    operator: str
    reason: str

    def check(self) -> None:
        for name, value in (("operator", self.operator), ("reason", self.reason)):
            if not value.strip():
                raise HearthError("operator_reason_required", param=name)


@dataclass(slots=True)
class _Plan:
    """What an action changes: the run's new values, each step's new values, and what to stop after the commit."""

    run: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    cancel_tasks: list[str] = field(default_factory=list)
    withdraw_reviews: list[str] = field(default_factory=list)

    def stop(self, row: Mapping[str, Any]) -> None:
        """What the step holds while it runs is let go of: its task cancelled, its review item withdrawn."""
        if row["state"] == "running" and row["task_id"]:
            self.cancel_tasks.append(row["task_id"])
        if row["state"] == "running" and row["review_id"]:
            self.withdraw_reviews.append(row["review_id"])


def _reset(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"state": "waiting", "generation": row["generation"] + 1, "task_id": None, "review_id": None,
            "output": None, "error": None, "override": None, "started_at": None, "finished_at": None}


def _ended_by_failure(row: Mapping[str, Any]) -> bool:
    """Ended only because something upstream (or the run) failed — not by its own work or an operator."""
    code = (row["error"] or {}).get("code")
    return row["override"] is None and ((row["state"] == "skipped" and code == "upstream_failed")
                                        or (row["state"] == "cancelled" and code != "lost_the_race"))


def dependents(defn: WorkflowDefinition, step_id: str) -> list[str]:
    """Every step that needs ``step_id``, transitively (declaration order)."""
    found: set[str] = {step_id}
    changed = True
    while changed:
        changed = False
        for s in defn.steps:
            if s.id not in found and any(n in found for n in s.needs):
                found.add(s.id)
                changed = True
    return [s.id for s in defn.steps if s.id in found and s.id != step_id]


@dataclass(slots=True)
class RunActions:
    runs: RunService

    # ------------------------------------------------------------------ the whole run

    async def pause(self, run_id: str, audit: Audit) -> dict[str, Any]:
        def plan(run: Mapping[str, Any], _: Mapping[str, Mapping[str, Any]], __: WorkflowDefinition) -> _Plan:
            _require_run(run, ("running",), "pause")
            return _Plan(run={"state": "paused"})

        return await self._act(run_id, None, "pause", audit, plan=plan)

    async def resume(self, run_id: str, audit: Audit) -> dict[str, Any]:
        def plan(run: Mapping[str, Any], _: Mapping[str, Mapping[str, Any]], __: WorkflowDefinition) -> _Plan:
            _require_run(run, ("paused",), "resume")
            return _Plan(run={"state": "running"})

        return await self._act(run_id, None, "resume", audit, plan=plan)

    async def terminate(self, run_id: str, audit: Audit) -> dict[str, Any]:
        now = self.runs.clock.now()

        def plan(run: Mapping[str, Any], rows: Mapping[str, Mapping[str, Any]], _: WorkflowDefinition) -> _Plan:
            _require_run(run, ("running", "paused"), "terminate")
            p = _Plan(run={"state": "terminated", "finished_at": now,
                           "error": {"code": "run_terminated", "operator": audit.operator, "reason": audit.reason}})
            for sid, row in rows.items():
                if row["state"] in ("waiting", "running"):
                    p.stop(row)
                    p.steps[sid] = {"state": "cancelled", "finished_at": now, "error": {"code": "run_terminated"}}
            return p

        return await self._act(run_id, None, "terminate", audit, plan=plan)

    # ------------------------------------------------------------------ one step

    async def rerun(self, run_id: str, step_id: str, audit: Audit) -> dict[str, Any]:
        def plan(run: Mapping[str, Any], rows: Mapping[str, Mapping[str, Any]], defn: WorkflowDefinition) -> _Plan:
            _require_run(run, ("running", "paused", "succeeded", "failed"), "rerun a step of")
            _require_step(rows[step_id], ("running", "succeeded", "failed", "skipped", "cancelled"), "rerun")
            p = _reopen(run, rows, defn)
            for sid in (step_id, *dependents(defn, step_id)):
                if rows[sid]["state"] != "waiting":
                    p.stop(rows[sid])
                    p.steps[sid] = _reset(rows[sid])
            return p

        return await self._act(run_id, step_id, "rerun", audit, plan=plan)

    async def skip(self, run_id: str, step_id: str, audit: Audit) -> dict[str, Any]:
        now = self.runs.clock.now()

        def plan(run: Mapping[str, Any], rows: Mapping[str, Mapping[str, Any]], defn: WorkflowDefinition) -> _Plan:
            _require_run(run, ("running", "paused", "failed"), "skip a step of")
            _require_step(rows[step_id], ("waiting", "failed"), "skip")
            p = _reopen(run, rows, defn, after=step_id)
            p.steps[step_id] = {"state": "skipped", "override": "skipped", "output": None, "finished_at": now,
                                "error": {"code": "operator_skipped"}}
            return p

        return await self._act(run_id, step_id, "skip", audit, plan=plan)

    async def mark_succeeded(self, run_id: str, step_id: str, audit: Audit, *, output: Any = None) -> dict[str, Any]:
        now = self.runs.clock.now()

        def plan(run: Mapping[str, Any], rows: Mapping[str, Mapping[str, Any]], defn: WorkflowDefinition) -> _Plan:
            _require_run(run, ("running", "paused", "failed"), "mark a step succeeded in")
            row = rows[step_id]
            _require_step(row, ("waiting", "running", "failed", "skipped", "cancelled"), "mark succeeded")
            p = _reopen(run, rows, defn, after=step_id)
            p.stop(row)
            p.steps[step_id] = {"state": "succeeded", "override": "mark_succeeded", "output": output, "error": None,
                                "started_at": row["started_at"] or now, "finished_at": now}
            return p

        return await self._act(run_id, step_id, "mark_succeeded", audit, plan=plan)

    # ------------------------------------------------------------------ reading

    async def history(self, run_id: str) -> list[dict[str, Any]]:
        """The run's audited actions, oldest first."""
        async with self.runs.engine.connect() as conn:
            rows = (await conn.execute(select(workflow_run_actions).where(_actions.run_id == run_id)
                                       .order_by(_actions.id))).mappings().all()
        return [{k: v for k, v in r.items() if k != "run_id"} for r in rows]

    async def view(self, run_id: str) -> dict[str, Any]:
        """The run as :meth:`RunService.get` shows it, with its audited ``actions``."""
        return {**await self.runs.get(run_id), "actions": await self.history(run_id)}

    # ------------------------------------------------------------------ the one writer

    async def _act(self, run_id: str, step_id: str | None, action: str, audit: Audit, *,
                   plan: _Planner) -> dict[str, Any]:
        audit.check()
        head = await self.runs.get(run_id)  # 404, and the definition version (immutable) to plan against
        defn = WorkflowDefinition.model_validate(
            (await self.runs.definitions.get(head["workflow"], head["version"]))["spec"])
        if step_id is not None and step_id not in {s.id for s in defn.steps}:
            raise HearthError("workflow_step_not_found", f"Run `{run_id}` has no step `{step_id}`.", param="step_id")
        now = self.runs.clock.now()
        async with write_transaction(self.runs.engine) as conn:
            locked = select(workflow_runs).where(_runs.id == run_id).with_for_update()
            run = dict((await conn.execute(locked)).mappings().one())
            rows = {r["step_id"]: dict(r) for r in (await conn.execute(
                select(workflow_steps).where(_steps.run_id == run_id))).mappings()}
            decided = plan(run, rows, defn)
            await _write_steps(conn, run_id, rows, decided.steps)
            await conn.execute(update(workflow_runs).where(_runs.id == run_id).values(
                **decided.run, epoch=run["epoch"] + 1, updated_at=now))
            before = {"run": {"state": run["state"], "epoch": run["epoch"]},
                      "steps": {sid: {k: rows[sid][k] for k in _AUDITED} for sid in decided.steps}}
            after = {"run": {"state": decided.run.get("state", run["state"]), "epoch": run["epoch"] + 1},
                     "steps": {sid: {k: v.get(k, rows[sid][k]) for k in _AUDITED} for sid, v in decided.steps.items()}}
            await conn.execute(workflow_run_actions.insert().values(
                run_id=run_id, step_id=step_id, action=action, operator=audit.operator, reason=audit.reason, at=now,
                before=before, after=after))
        await self._let_go(decided.cancel_tasks, decided.withdraw_reviews, audit)
        if after["run"]["state"] == "running":
            await self.runs.advance(run_id)
        return await self.view(run_id)

    async def _let_go(self, task_ids: Sequence[str], review_ids: Sequence[str], audit: Audit) -> None:
        for task_id in task_ids:
            with contextlib.suppress(HearthError):  # it ended meanwhile: nothing to cancel, its result unused
                await self.runs.tasks.cancel(task_id, caller=None)
        for review_id in review_ids:
            await self.runs.reviews.withdraw(review_id, operator=audit.operator, reason=audit.reason)


async def _write_steps(conn: AsyncConnection, run_id: str, rows: Mapping[str, Mapping[str, Any]],
                       changes: Mapping[str, dict[str, Any]]) -> None:
    """Each a compare-and-set on what was read; under the run's lock none can miss (else: a bug, rolled back)."""
    for sid, values in changes.items():
        moved = await conn.execute(update(workflow_steps).where(
            _steps.run_id == run_id, _steps.step_id == sid, _steps.state == rows[sid]["state"],
            _steps.generation == rows[sid]["generation"]).values(**values))
        if moved.rowcount != 1:
            raise HearthError("conflict", f"Step `{sid}` changed during the action; nothing was written.")


def _reopen(run: Mapping[str, Any], rows: Mapping[str, Mapping[str, Any]], defn: WorkflowDefinition, *,
            after: str | None = None) -> _Plan:
    """A failed or succeeded run goes back to ``running``; what ended only because of a failure — everywhere when
    reopening, else among the steps after ``after`` — is put back to ``waiting`` to be decided again."""
    p = _Plan()
    reopening = run["state"] in ("failed", "succeeded")
    if reopening:
        p.run = {"state": "running", "finished_at": None, "error": None}
    scope = [s.id for s in defn.steps] if reopening else dependents(defn, after) if after else []
    for sid in scope:
        if sid != after and _ended_by_failure(rows[sid]):
            p.steps[sid] = _reset(rows[sid])
    return p


def _require_run(run: Mapping[str, Any], allowed: tuple[str, ...], what: str) -> None:
    if run["state"] not in allowed:
        raise HearthError("workflow_run_state_conflict", f"Cannot {what} a {run['state']} run.",
                          details={"state": run["state"], "allowed": list(allowed)})


def _require_step(row: Mapping[str, Any], allowed: tuple[str, ...], what: str) -> None:
    if row["state"] not in allowed:
        raise HearthError("workflow_step_state_conflict", f"Cannot {what} a {row['state']} step.",
                          details={"step": row["step_id"], "state": row["state"], "allowed": list(allowed)})
