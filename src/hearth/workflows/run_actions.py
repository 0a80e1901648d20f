"""Operator actions on workflow runs: pause, resume, terminate; rerun, skip or mark a step succeeded — each audited.

Every action names an ``operator`` and a ``reason`` (both required: 400 ``operator_reason_required``) and is one
transaction that

1. locks the run row (``SELECT … FOR UPDATE``; on SQLite the process's write lane does it),
2. reads the steps and decides (a 409 when the run's or the step's state does not allow the action),
3. writes the steps it changes, each a compare-and-set on the state and round it read,
4. moves the run (state, and ``epoch`` + 1 — the fence), and
5. appends a row to ``workflow_run_actions`` with what the changed rows were before and after
   (:func:`hearth.workflows.run_store.act`).

A scheduler pass's write (:func:`hearth.workflows.run_store.apply`) writes the run row first too, and only while
the run is ``running`` at the epoch the pass read; so a pass that read the rows before an action commits nothing
after it, and an action never meets a half-applied pass. After the commit the action lets go of what the steps
it took back were running: their tasks (fan-out items too) are cancelled (cooperatively, as
``POST /tasks/{id}/cancel``), their open review items withdrawn (they expire; never approved), their child runs
cancelled; a run left ``running`` is advanced at once, and a terminated sub-workflow's parent is woken.

What each action means:

* **pause** (``running`` → ``paused``): nothing new starts; what runs keeps running, and its result is
  recorded when the run resumes. **resume** (``paused`` → ``running``).
* **terminate** (``running`` | ``paused`` → ``terminated``, final): waiting and running steps end
  ``cancelled`` (``run_terminated``), running tasks are cancelled, open review items withdrawn.
* **rerun** a step (not ``waiting``): the step and every step after it, transitively, along every edge
  (``needs``, a condition's ``then``/``else``, ``on_error``, ``on_timeout``, and a loop's body: a step of a
  body reruns its loop, and a loop its whole body, from the first iteration) go back to ``waiting`` with their
  ``round`` moved on — as a loop iteration does; waiting ones too, so no work a pass started for one from the
  old checkpoints is ever adopted — and run afresh (new tasks, review items, child runs); their old
  checkpoints stay in this audit, unused. A finished run (``succeeded`` or ``failed``) is reopened.
* **skip** a ``waiting`` or ``failed`` step: it ends ``skipped`` (``override: skipped``) and the steps after it
  see it as skipped by their join rules — under an AND join they are skipped too; an OR join waits for another
  branch.
* **mark_succeeded** a step not ``succeeded``: it counts as succeeded, with the operator's ``output`` (or null),
  so the steps after it run. This changes *execution state only* (``override: mark_succeeded``): no task ran,
  no business outcome was decided or verified, and the output is whatever the operator said it is.

Skip and mark_succeeded also reopen a failed run, and put back to ``waiting`` what ended only because of the
failure (steps the engine ``skipped``, steps ``cancelled`` when the run failed), to be decided again; a loop
cancelled in the middle of an iteration goes on with that iteration. Neither re-runs what already ran: use rerun
for that.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from hearth.errors import HearthError
from hearth.workflows import run_store
from hearth.workflows.definitions import edges
from hearth.workflows.run_plan import RunPlan
from hearth.workflows.run_store import ActionChanges
from hearth.workflows.runs import RunService

Rows = Mapping[str, Mapping[str, Any]]


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
class _LetGo:
    """What the steps an action took back were running, to stop once the action committed."""

    tasks: list[str] = field(default_factory=list)
    reviews: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)

    def stop(self, row: Mapping[str, Any]) -> None:
        if row["state"] != "running":
            return
        detail = row["detail"] or {}
        self.tasks += [t for t in [row["task_id"], *detail.get("tasks", ())] if t]
        self.reviews += [row["review_id"]] if row["review_id"] else []
        self.runs += [r for r in [detail.get("run_id"), *detail.get("runs", ())] if r]


#: The run states each whole-run action takes (any other is a ``workflow_run_state_conflict``).
RUN_ACTION_STATES: Final[dict[str, tuple[str, ...]]] = {
    "pause": ("running",), "resume": ("paused",), "terminate": ("running", "paused")}
#: (run states, step states) each step action takes — what the console offers, and what is enforced here.
STEP_ACTION_STATES: Final[dict[str, tuple[tuple[str, ...], tuple[str, ...]]]] = {
    "rerun": (("running", "paused", "succeeded", "failed"), ("running", "succeeded", "failed", "skipped", "cancelled")),
    "skip": (("running", "paused", "failed"), ("waiting", "failed")),
    "mark_succeeded": (("running", "paused", "failed"), ("waiting", "running", "failed", "skipped", "cancelled")),
}


def _reset(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"state": "waiting", "round": row["round"] + 1, "task_id": None, "review_id": None, "output": None,
            "error": None, "override": None, "detail": None, "started_at": None, "finished_at": None}


def _ended_by_failure(row: Mapping[str, Any]) -> bool:
    """Ended by the engine only because something upstream (or the run) failed — not by its own work or an
    operator: skipped, or cancelled when the run failed."""
    code = (row["error"] or {}).get("code")
    return row["override"] is None and (row["state"] == "skipped" or (
        row["state"] == "cancelled" and code not in ("lost_the_race", "run_terminated")))


def dependents(plan: RunPlan, step_id: str) -> list[str]:
    """Every step after ``step_id``, transitively, along every edge kind — ``needs``, ``then``/``else``,
    ``on_error``, ``on_timeout``, a body step's edge to its loop — and, for a loop, every step of its body
    (nested bodies too); in topological order."""
    targets: dict[str, list[str]] = {s: [] for s in plan.steps}
    for edge in edges(plan.definition):
        targets[edge.source].append(edge.target)
    for loop, body in plan.inside.items():
        targets[loop] += sorted(body)
    found: set[str] = set()
    todo = [step_id]
    while todo:
        for nxt in targets[todo.pop()]:
            if nxt not in found:
                found.add(nxt)
                todo.append(nxt)
    return [s for s in plan.order if s in found and s != step_id]


@dataclass(slots=True)
class RunActions:
    runs: RunService

    # ------------------------------------------------------------------ the whole run

    async def pause(self, run_id: str, audit: Audit) -> dict[str, Any]:
        def decide(run: Mapping[str, Any], _: Rows, __: RunPlan, ___: _LetGo) -> ActionChanges:
            _require_run(run, RUN_ACTION_STATES["pause"], "pause")
            return ActionChanges(run={"state": "paused"})

        return await self._act(run_id, None, "pause", audit, decide=decide)

    async def resume(self, run_id: str, audit: Audit) -> dict[str, Any]:
        def decide(run: Mapping[str, Any], _: Rows, __: RunPlan, ___: _LetGo) -> ActionChanges:
            _require_run(run, RUN_ACTION_STATES["resume"], "resume")
            return ActionChanges(run={"state": "running"})

        return await self._act(run_id, None, "resume", audit, decide=decide)

    async def terminate(self, run_id: str, audit: Audit) -> dict[str, Any]:
        now = self.runs.clock.now()

        def decide(run: Mapping[str, Any], rows: Rows, _: RunPlan, let_go: _LetGo) -> ActionChanges:
            _require_run(run, RUN_ACTION_STATES["terminate"], "terminate")
            c = ActionChanges(run={"state": "terminated", "finished_at": now, "error": {
                "code": "run_terminated", "operator": audit.operator, "reason": audit.reason}})
            for sid, row in rows.items():
                if row["state"] in ("waiting", "running"):
                    let_go.stop(row)
                    c.steps[sid] = {"state": "cancelled", "finished_at": now, "error": {"code": "run_terminated"}}
            return c

        return await self._act(run_id, None, "terminate", audit, decide=decide)

    # ------------------------------------------------------------------ one step

    async def rerun(self, run_id: str, step_id: str, audit: Audit) -> dict[str, Any]:
        def decide(run: Mapping[str, Any], rows: Rows, plan: RunPlan, let_go: _LetGo) -> ActionChanges:
            run_states, step_states = STEP_ACTION_STATES["rerun"]
            _require_run(run, run_states, "rerun a step of")
            _require_step(rows[step_id], step_states, "rerun")
            c = _reopen(run, rows, plan)
            for sid in (step_id, *dependents(plan, step_id)):  # waiting ones too: a pass that read the old
                let_go.stop(rows[sid])                           # checkpoint may have started one under its key
                c.steps[sid] = _reset(rows[sid])
            return c

        return await self._act(run_id, step_id, "rerun", audit, decide=decide)

    async def skip(self, run_id: str, step_id: str, audit: Audit) -> dict[str, Any]:
        now = self.runs.clock.now()

        def decide(run: Mapping[str, Any], rows: Rows, plan: RunPlan, _: _LetGo) -> ActionChanges:
            run_states, step_states = STEP_ACTION_STATES["skip"]
            _require_run(run, run_states, "skip a step of")
            _require_step(rows[step_id], step_states, "skip")
            c = _reopen(run, rows, plan, after=step_id)
            c.steps[step_id] = {"state": "skipped", "override": "skipped", "output": None, "finished_at": now,
                                "error": {"code": "operator_skipped"}}
            return c

        return await self._act(run_id, step_id, "skip", audit, decide=decide)

    async def mark_succeeded(self, run_id: str, step_id: str, audit: Audit, *, output: Any = None) -> dict[str, Any]:
        now = self.runs.clock.now()

        def decide(run: Mapping[str, Any], rows: Rows, plan: RunPlan, let_go: _LetGo) -> ActionChanges:
            run_states, step_states = STEP_ACTION_STATES["mark_succeeded"]
            _require_run(run, run_states, "mark a step succeeded in")
            row = rows[step_id]
            _require_step(row, step_states, "mark succeeded")
            c = _reopen(run, rows, plan, after=step_id)
            let_go.stop(row)
            for member in plan.inside.get(step_id, ()):  # a loop ends: what its body still runs is stopped
                if rows[member]["state"] == "running":
                    let_go.stop(rows[member])
                    c.steps[member] = {"state": "cancelled", "finished_at": now, "error": {"code": "loop_ended"}}
            c.steps[step_id] = {"state": "succeeded", "override": "mark_succeeded", "output": output, "error": None,
                                "started_at": row["started_at"] or now, "finished_at": now}
            return c

        return await self._act(run_id, step_id, "mark_succeeded", audit, decide=decide)

    # ------------------------------------------------------------------ reading

    async def history(self, run_id: str) -> list[dict[str, Any]]:
        """The run's audited actions, oldest first."""
        return await run_store.actions_of(self.runs.engine, run_id)

    async def view(self, run_id: str) -> dict[str, Any]:
        """The run as :meth:`RunService.get` shows it, with its audited ``actions``."""
        return {**await self.runs.get(run_id), "actions": await self.history(run_id)}

    # ------------------------------------------------------------------ the one writer

    async def _act(self, run_id: str, step_id: str | None, action: str, audit: Audit, *,
                   decide: Callable[[Mapping[str, Any], Rows, RunPlan, _LetGo], ActionChanges]) -> dict[str, Any]:
        audit.check()
        head = await self.runs.get(run_id)  # 404, and the definition version (immutable) to plan against
        plan = await self.runs.plan_of(head["workflow"], head["version"])
        if step_id is not None and step_id not in plan.steps:
            raise HearthError("workflow_step_not_found", f"Run `{run_id}` has no step `{step_id}`.", param="step_id")
        let_go = _LetGo()
        done = await run_store.act(self.runs.engine, run_id, lambda run, rows: decide(run, rows, plan, let_go),
                                   step_id=step_id, action=action, operator=audit.operator, reason=audit.reason,
                                   now=self.runs.clock.now())
        await self._let_go(let_go, audit)
        state = done["after"]["run"]["state"]
        if state == "running":
            await self.runs.advance(run_id)
        elif state == "terminated" and head["parent"]:
            await self.runs.advance(head["parent"]["run_id"])  # its sub-workflow step fails now, not at the next pass
        return await self.view(run_id)

    async def _let_go(self, let_go: _LetGo, audit: Audit) -> None:
        for task_id in let_go.tasks:
            with contextlib.suppress(HearthError):  # it ended meanwhile: nothing to cancel, its result unused
                await self.runs.tasks.cancel(task_id, caller=None)
        for review_id in let_go.reviews:
            await self.runs.reviews.withdraw(review_id, operator=audit.operator, reason=audit.reason)
        for child in let_go.runs:
            await self.runs.stop_run(child)


def _reopen(run: Mapping[str, Any], rows: Rows, plan: RunPlan, *, after: str | None = None) -> ActionChanges:
    """A failed or succeeded run goes back to ``running``; what ended only because of a failure — everywhere when
    reopening, else among the steps after ``after`` — is put back to ``waiting`` to be decided again (a step of a
    loop's body only while its loop goes on); a loop cancelled mid-iteration goes on with that iteration."""
    c = ActionChanges()
    reopening = run["state"] in ("failed", "succeeded")
    if reopening:
        c.run = {"state": "running", "finished_at": None, "error": None, "output": None}
    scope = list(plan.order) if reopening else dependents(plan, after) if after else []
    for sid in scope:
        row = rows[sid]
        if sid == after or not _ended_by_failure(row):
            continue
        loop = plan.loop_of.get(sid)
        if loop is not None and rows[loop]["state"] != "running" and not _ended_by_failure(rows[loop]):
            continue
        if sid in plan.inside and row["state"] == "cancelled" and row["detail"]:
            c.steps[sid] = {"state": "running", "finished_at": None, "error": None}
        else:
            c.steps[sid] = _reset(row)
    return c


def _require_run(run: Mapping[str, Any], allowed: tuple[str, ...], what: str) -> None:
    if run["state"] not in allowed:
        raise HearthError("workflow_run_state_conflict", f"Cannot {what} a {run['state']} run.",
                          details={"state": run["state"], "allowed": list(allowed)})


def _require_step(row: Mapping[str, Any], allowed: tuple[str, ...], what: str) -> None:
    if row["state"] not in allowed:
        raise HearthError("workflow_step_state_conflict", f"Cannot {what} a {row['state']} step.",
                          details={"step": row["step_id"], "state": row["state"], "allowed": list(allowed)})
