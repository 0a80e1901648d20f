"""One pass over one run: from the rows read at its start, move every step as far as it can go now.

A pass works on copies of the rows in memory, in topological order, again until nothing changes (a step that
ends makes the next one ready in the same pass; a loop that starts its next iteration makes its body ready).
What it decided is written at the end in one transaction (:func:`hearth.workflows.run_store.apply`) whose
compare-and-sets are on the rows as they were read, so a pass costs a handful of queries for the whole run
(none per step) and two processes passing over the same run at once write one outcome.

The pass then ends the run: ``failed`` at the first failure nothing handles (see
:func:`hearth.workflows.run_plan.is_fatal`: every step not ended is cancelled, their tasks and child runs are
stopped), ``succeeded`` once every step has ended otherwise, with the outputs of its final steps as its output.
Side effects that must not happen unless the pass is written — cancelling a task, stopping a child run — are
collected in :attr:`Pass.after` and done by the caller once the write committed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hearth.workflows.definitions import Step
from hearth.workflows.run_plan import ENDED, RunPlan, edge_state, is_fatal, readiness
from hearth.workflows.run_store import Changes

MUTABLE = ("state", "task_id", "review_id", "output", "error", "started_at", "finished_at", "detail", "round")
MAX_ROUNDS = 200  # traversals per pass: an instant loop body of 100 iterations still ends in one pass


@dataclass(slots=True)
class AfterCommit:
    """What to do once the pass's changes are committed."""

    cancel_tasks: list[str] = field(default_factory=list)
    stop_runs: list[str] = field(default_factory=list)  # child runs to cancel (their parent step stopped)
    advance_runs: list[str] = field(default_factory=list)  # child runs just created, and a parent to wake


@dataclass(slots=True)
class Pass:
    """A run's rows during one pass, and what the pass has decided so far."""

    plan: RunPlan
    run: dict[str, Any]
    rows: dict[str, dict[str, Any]]
    signals: list[dict[str, Any]]  # not yet taken, oldest first
    tasks: Mapping[str, Mapping[str, Any]]  # the tasks of the steps running when the pass began
    reviews: Mapping[str, Mapping[str, Any]]
    children: Mapping[str, Mapping[str, Any]]  # child runs of the steps running when the pass began
    now: float
    changes: Changes = field(default_factory=Changes)
    after: AfterCommit = field(default_factory=AfterCommit)
    _read: dict[str, tuple[str, int]] = field(default_factory=dict)  # step → (state, round) as read
    started: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)  # (step, round, values) begun

    def set(self, step_id: str, **values: Any) -> None:
        row = self.rows[step_id]
        self._read.setdefault(step_id, (row["state"], row["round"]))
        row.update(values)

    def start(self, step_id: str, **values: Any) -> bool:
        """The step runs; what it runs (``task_id``, ``review_id``, ``detail``) is also kept in :attr:`started`,
        for the run service to let go of if the pass's write loses and nothing will adopt it."""
        self.started.append((step_id, self.rows[step_id]["round"], values))
        self.set(step_id, state="running", started_at=self.now, **values)
        return True

    def adopt(self, step_id: str, values: dict[str, Any]) -> None:
        """Fill in what a started step runs, once it is known (its tasks were submitted after it started)."""
        self.rows[step_id].update(values)
        for i in range(len(self.started) - 1, -1, -1):
            if self.started[i][0] == step_id:
                self.started[i][2].update(values)
                break

    def end(self, step_id: str, state: str, *, output: Any = None, error: Any = None) -> bool:
        """End a step (from waiting or running); always a change."""
        started = self.rows[step_id]["started_at"] or (self.now if state != "skipped" else None)
        self.set(step_id, state=state, output=output, error=error, started_at=started, finished_at=self.now)
        return True

    def fail(self, step_id: str, code: str, message: str | None = None, **details: Any) -> bool:
        error = {"code": code, **({"message": message} if message else {}), **details}
        return self.end(step_id, "failed", error=error)

    def scope(self, **extra: Any) -> dict[str, Any]:
        """What expressions read: ``$.input`` and the outputs of the steps that ended succeeded or failed."""
        steps = {sid: {"output": r["output"]} for sid, r in self.rows.items() if r["state"] in ("succeeded", "failed")}
        return {"input": self.run["input"], "steps": steps, **extra}

    def stop_work(self, step_id: str) -> None:
        """Schedule the cancel of whatever the step runs: its task, its fan-out's tasks, its child runs."""
        row, detail = self.rows[step_id], self.rows[step_id]["detail"] or {}
        self.after.cancel_tasks += [t for t in [row["task_id"], *detail.get("tasks", ())] if t]
        self.after.stop_runs += [r for r in [detail.get("run_id"), *detail.get("runs", ())] if r]

    @property
    def changed(self) -> bool:
        """Whether the pass decided anything to write."""
        return bool(self._read) or bool(self.changes)

    def written(self) -> Changes:
        """The changes, with every row touched as one compare-and-set on the (state, round) read."""
        self.changes.steps = [(sid, state, round_, {k: self.rows[sid][k] for k in MUTABLE})
                              for sid, (state, round_) in self._read.items()]
        return self.changes


class StepKinds(Protocol):
    async def begin(self, p: Pass, step: Step) -> bool:
        """Start a ready step (or end it at once); whether anything changed."""
        ...

    async def observe(self, p: Pass, step: Step) -> bool:
        """Look at a running step and end it if its work ended or its time ran out; whether anything changed."""
        ...


async def drive(p: Pass, kinds: StepKinds) -> None:
    """Move the run's steps on, then end the run if it is over (see the module's docstring)."""
    for _ in range(MAX_ROUNDS):
        changed = False
        for step_id in p.plan.order:
            step, row = p.plan.steps[step_id], p.rows[step_id]
            if row["state"] == "running":
                changed |= await kinds.observe(p, step)
                if is_fatal(step, row):
                    return _fail_run(p, step_id)
            if row["state"] == "waiting":
                verdict = readiness(p.plan, step_id, p.rows)
                if verdict == "skip":
                    changed |= p.end(step_id, "skipped", error={"code": _skip_reason(p, step_id)})
                elif verdict == "ready":
                    _cancel_losers(p, step)
                    changed |= await kinds.begin(p, step)
                    if is_fatal(step, row):
                        return _fail_run(p, step_id)
        if not changed:
            break
    if all(r["state"] in ENDED for r in p.rows.values()):
        output = {s: p.rows[s]["output"] for s in p.plan.sinks if p.rows[s]["state"] == "succeeded"}
        p.changes.run = {"state": "succeeded", "output": output, "error": None}
        _wake_parent(p)


def _skip_reason(p: Pass, step_id: str) -> str:
    loop = p.plan.loop_of.get(step_id)
    if loop is not None and p.rows[loop]["state"] in ENDED:
        return "loop_not_run"
    for source, kind in p.plan.incoming[step_id]:
        if edge_state(p.plan.steps[source], p.rows[source], kind) == "dead":
            if kind in ("then", "else"):
                return "branch_not_taken" if p.rows[source]["state"] == "succeeded" else "upstream_not_succeeded"
            if kind in ("on_error", "on_timeout"):
                return "no_error" if kind == "on_error" else "no_timeout"
            return "upstream_failed" if p.rows[source]["state"] in ("failed", "cancelled") else "upstream_skipped"
    return "not_reached"


def _cancel_losers(p: Pass, step: Step) -> None:
    """An OR join is ready: its needs still running lost the race — cancelled, a late result never used."""
    if step.join != "any":
        return
    for need in step.needs:
        if p.rows[need]["state"] == "running":
            p.stop_work(need)
            p.set(need, state="cancelled", finished_at=p.now, error={"code": "lost_the_race"})


def _fail_run(p: Pass, step_id: str) -> None:
    """Steps that can no longer run are skipped (as they would be anyway); the others are cancelled."""
    for sid in p.plan.order:
        row = p.rows[sid]
        if row["state"] == "running":
            p.stop_work(sid)
        if row["state"] == "waiting" and readiness(p.plan, sid, p.rows) == "skip":
            p.end(sid, "skipped", error={"code": _skip_reason(p, sid)})
        elif row["state"] in ("waiting", "running"):
            p.set(sid, state="cancelled", finished_at=p.now)
    p.changes.run = {"state": "failed", "error": {"step": step_id, **(p.rows[step_id]["error"] or {})}}
    _wake_parent(p)


def _wake_parent(p: Pass) -> None:
    if p.run["parent"]:
        p.after.advance_runs.append(p.run["parent"]["run_id"])
