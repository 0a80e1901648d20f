"""How each kind of step starts and how a running one is watched, within a pass (:mod:`hearth.workflows.run_pass`).

What a step runs is keyed by the run, the step and the step's *round* (how many times a loop reset it), so a
pass that is repeated — another process, a crash before its write — names the same work again: a task's
idempotency key ``wf:<run>:<step>`` (``…:<round>`` after a reset, ``…:i<index>`` for a fan-out item), a review
item's and a child run's id derived from the same. Per kind:

* ``task`` — a task of its type; the step ends with it. ``timeout_s``: past it the step fails
  ``step_timeout`` and the task is cancelled.
* ``approval`` — a review item; approved → its payload, modified → the reviewer's, rejected or expired → fails
  (``review_expired`` goes to ``on_timeout`` when it names a step). A timer never approves.
* ``wait`` — ``seconds``: succeeds once the clock passes its due time (output ``{waited_s}``); ``event``: takes
  the oldest signal of that event sent to the run (kept since before the step waited, if so) and succeeds with
  its payload; with ``timeout_s`` it fails ``step_timeout`` if none came in time.
* ``condition`` — succeeds at once with ``{branch: then|else, value}``; ``when`` must be a boolean.
* ``fanout`` — one task (or child run) per element of ``over``, all submitted at once; more than ``max_items``
  elements fails the step ``fanout_too_many_items`` (never truncated); the output is the items' outputs in order;
  the first item that fails fails the step (``fanout_item_failed`` with its index) and the others are cancelled.
* ``loop`` — iterates its body (see :meth:`RunSteps._observe_loop`).
* ``subworkflow`` — a child run of the named workflow (its ``detail.run_id``); the step ends as the child does.
* ``join`` — succeeds at once with the outputs of its needs that succeeded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hearth.errors import HearthError
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.states import TERMINAL
from hearth.workflows.definitions import (
    ApprovalStep,
    ConditionStep,
    FanoutStep,
    JoinStep,
    LoopStep,
    Step,
    SubworkflowStep,
    SubworkflowTemplate,
    TaskStep,
    TaskTemplate,
    WaitStep,
)
from hearth.workflows.expressions import ExpressionError, render
from hearth.workflows.reviews import ReviewRequest, ReviewService
from hearth.workflows.run_pass import Pass
from hearth.workflows.run_plan import ENDED, RunPlan, is_fatal
from hearth.workflows.run_store import NewRun

MAX_DEPTH = 8  # sub-workflows inside sub-workflows: deeper fails the step (a → b → a would never end)
PlanLoader = Callable[[str, int | None], Awaitable[tuple[int, RunPlan]]]


def _key(p: Pass, step_id: str, suffix: str = "") -> str:
    rnd = p.rows[step_id]["round"]
    return f"wf:{p.run['id']}:{step_id}" + (f":{rnd}" if rnd else "") + suffix


def _derived_id(prefix: str, key: str) -> str:
    return prefix + hashlib.sha256(key.encode()).hexdigest()[:24]


def run_of_key(idempotency_key: str | None) -> str | None:
    """The run whose step submitted a task with this idempotency key (see :func:`_key`), else None."""
    if not idempotency_key or not idempotency_key.startswith("wf:"):
        return None
    return idempotency_key.split(":", 2)[1] or None


@dataclass(slots=True)
class _Pending:
    p: Pass
    step_id: str
    subs: list[Submission]
    many: bool


@dataclass(slots=True)
class RunSteps:
    """The :class:`hearth.workflows.run_pass.StepKinds` of the engine: starts and watches every kind.

    With ``batch`` (a list), a step's tasks are not submitted when it starts: the step is started with its task
    ids left open, and :meth:`submit_batch` then submits the tasks of every pass in one transaction and fills the
    ids in — before any pass is written, so a pass never records a task that was not submitted."""

    tasks: TaskService
    reviews: ReviewService
    plans: PlanLoader
    batch: list[_Pending] | None = None

    async def submit_batch(self) -> None:
        """Submit the tasks the passes asked for in one call; a :class:`HearthError` (one of them refused) leaves
        the passes with their ids open: they must not be written (the caller passes those runs again, one by
        one). Keyed, so a batch submitted twice names the same tasks."""
        pending, self.batch = self.batch or [], []
        submitted = await self.tasks.submit([s for x in pending for s in x.subs]) if pending else []
        at = 0
        for x in pending:
            ids = [task["id"] for task, _ in submitted[at:at + len(x.subs)]]
            at += len(x.subs)
            x.p.adopt(x.step_id, {"detail": {"tasks": ids}} if x.many else {"task_id": ids[0]})

    def drop(self, p: Pass) -> None:
        """Forget the tasks a pass asked for (the pass failed and will not be written)."""
        if self.batch:
            self.batch = [x for x in self.batch if x.p is not p]

    async def begin(self, p: Pass, step: Step) -> bool:
        if isinstance(step, JoinStep):
            return p.end(step.id, "succeeded", output={n: p.rows[n]["output"] for n in step.needs
                                                       if p.rows[n]["state"] == "succeeded"})
        if isinstance(step, WaitStep):
            detail = {"due_at": p.now + step.seconds} if step.seconds is not None else {"event": step.event}
            return p.start(step.id, detail=detail) | await self.observe(p, step)
        if isinstance(step, LoopStep):
            return p.start(step.id, detail={"iteration": 1, "history": []})
        try:
            if isinstance(step, ConditionStep):
                return self._decide(p, step, render(step.when, p.scope()))
            if isinstance(step, FanoutStep):
                return await self._fan_out(p, step, render(step.over, p.scope()))
            payload = render(step.input, p.scope())
        except ExpressionError as exc:
            return p.fail(step.id, "input_mapping_failed", str(exc))
        if isinstance(step, TaskStep):
            return await self._submit(p, step.id, [(step.task_type, payload, _key(p, step.id))])
        if isinstance(step, ApprovalStep):
            return await self._raise_review(p, step, payload)
        assert isinstance(step, SubworkflowStep)
        return await self._spawn(p, step.id, [(step.workflow, step.version, payload)])

    # ------------------------------------------------------------------ starting

    def _decide(self, p: Pass, step: ConditionStep, value: Any) -> bool:
        if not isinstance(value, bool):
            return p.fail(step.id, "condition_not_boolean", f"`when` gave {type(value).__name__}, not a boolean")
        return p.end(step.id, "succeeded", output={"branch": "then" if value else "else", "value": value})

    async def _fan_out(self, p: Pass, step: FanoutStep, items: Any) -> bool:
        if not isinstance(items, list):
            return p.fail(step.id, "fanout_not_a_list", f"`over` gave {type(items).__name__}, not a list")
        if len(items) > step.max_items:
            return p.fail(step.id, "fanout_too_many_items", f"{len(items)} items, more than max_items "
                          f"{step.max_items}", items=len(items), max_items=step.max_items)
        if not items:
            return p.end(step.id, "succeeded", output=[])
        template = step.step
        try:
            inputs = [render(template.input, p.scope(item=item, index=i)) for i, item in enumerate(items)]
        except ExpressionError as exc:
            return p.fail(step.id, "input_mapping_failed", str(exc))
        if isinstance(template, TaskTemplate):
            return await self._submit(p, step.id, [(template.task_type, payload, _key(p, step.id, f":i{i}"))
                                                   for i, payload in enumerate(inputs)], many=True)
        assert isinstance(template, SubworkflowTemplate)
        return await self._spawn(p, step.id, [(template.workflow, template.version, x) for x in inputs], many=True)

    async def _submit(self, p: Pass, step_id: str, work: list[tuple[str, Any, str]], *, many: bool = False) -> bool:
        subs = [Submission(task_type=t, payload=payload, caller=p.run["caller"], idempotency_key=key)
                for t, payload, key in work]
        if self.batch is not None:
            self.batch.append(_Pending(p, step_id, subs, many))
            if many:  # ids open (None) until submitted: read as tasks still running, never as no tasks at all
                return p.start(step_id, detail={"tasks": [None] * len(subs)})
            return p.start(step_id, task_id=None)
        try:
            submitted = await self.tasks.submit(subs)
        except HearthError as exc:
            if exc.retryable:
                return False  # a full queue: the next pass tries again
            return p.fail(step_id, exc.code, exc.message)
        ids = [task["id"] for task, _ in submitted]
        return p.start(step_id, detail={"tasks": ids}) if many else p.start(step_id, task_id=ids[0])

    async def _raise_review(self, p: Pass, step: ApprovalStep, payload: Any) -> bool:
        item_id = _derived_id("rv_wf_", _key(p, step.id))
        await self.reviews.raise_item(ReviewRequest(
            title=f"Workflow `{p.run['workflow']}`: approve step `{step.id}`", payload=payload,
            timeout_s=step.timeout_s, queue="workflows", subject_kind="workflow_step",
            subject_id=f"{p.run['id']}:{step.id}", form=step.form, caller=p.run["caller"], item_id=item_id))
        return p.start(step.id, review_id=item_id)

    async def _spawn(self, p: Pass, step_id: str, work: list[tuple[str, int | None, Any]], *,
                     many: bool = False) -> bool:
        depth = (p.run["parent"] or {}).get("depth", 0) + 1
        if depth > MAX_DEPTH:
            return p.fail(step_id, "subworkflow_too_deep", f"sub-workflows nest at most {MAX_DEPTH} deep")
        ids = []
        for i, (workflow, version, payload) in enumerate(work):
            try:
                found, plan = await self.plans(workflow, version)
            except HearthError as exc:  # removed since registration, or a version that is not there
                return p.fail(step_id, exc.code, exc.message)
            child = NewRun(id=_derived_id("wfr_", _key(p, step_id, f":i{i}")), workflow=workflow, version=found,
                           caller=p.run["caller"], input=payload, step_ids=[s.id for s in plan.definition.steps],
                           parent={"run_id": p.run["id"], "step": step_id, "depth": depth})
            p.changes.children.append(child)
            p.after.advance_runs.append(child.id)
            ids.append(child.id)
        return p.start(step_id, detail={"runs": ids} if many else {"run_id": ids[0]})

    # ------------------------------------------------------------------ watching

    async def observe(self, p: Pass, step: Step) -> bool:
        row = p.rows[step.id]
        if isinstance(step, LoopStep):
            return self._observe_loop(p, step)
        if isinstance(step, ApprovalStep):
            return self._observe_review(p, step.id, p.reviews.get(row["review_id"]))
        if isinstance(step, WaitStep) and step.seconds is not None:
            if p.now >= row["detail"]["due_at"]:
                return p.end(step.id, "succeeded", output={"waited_s": step.seconds})
            return False
        if isinstance(step, WaitStep):
            signal = next((s for s in p.signals if s["event"] == step.event), None)
            if signal is not None:
                p.signals.remove(signal)
                p.changes.signals.append((signal["id"], f"{step.id}#{row['round']}"))
                return p.end(step.id, "succeeded", output=signal["payload"])
        elif isinstance(step, TaskStep):
            task = p.tasks.get(row["task_id"])
            if task is not None and task["state"] in TERMINAL:
                return _end_as_task(p, step.id, task)
        elif isinstance(step, FanoutStep | SubworkflowStep) and self._observe_children(p, step):
            return True
        if _timed_out(p, step):
            p.stop_work(step.id)
            return p.fail(step.id, "step_timeout", f"not done within timeout_s {_limit(step)}")
        return False

    def _observe_review(self, p: Pass, step_id: str, item: Mapping[str, Any] | None) -> bool:
        if item is None or item["state"] in ("pending", "claimed"):
            return False
        if item["state"] == "approved":
            return p.end(step_id, "succeeded", output=item["payload"])
        if item["state"] == "modified":
            return p.end(step_id, "succeeded", output=item["decision"])
        return p.fail(step_id, f"review_{item['state']}", reason=item["reason"])

    def _observe_children(self, p: Pass, step: FanoutStep | SubworkflowStep) -> bool:
        detail = p.rows[step.id]["detail"]
        task_ids, run_ids = detail.get("tasks"), detail.get("runs", [detail.get("run_id")])
        outcomes: list[tuple[str, Any, Any]] = []  # (succeeded | failed | running, output, error)
        for task_id in task_ids or ():
            task = p.tasks.get(task_id)
            if task is None or task["state"] not in TERMINAL:
                outcomes.append(("running", None, None))
            elif task["state"] in ("succeeded", "mark_succeeded"):
                outcomes.append(("succeeded", task["result"], None))
            else:
                outcomes.append(("failed", None, {**_task_error(task), "task_id": task_id}))
        for run_id in run_ids if task_ids is None else ():
            run = p.children.get(run_id)
            state = run["state"] if run is not None else "running"
            error = {"code": "subworkflow_failed", "run_id": run_id, "error": run["error"]} if run else None
            outcomes.append(("failed" if state in ("failed", "cancelled", "terminated") else state,
                             run["output"] if run else None, error))
        failed = next((i for i, o in enumerate(outcomes) if o[0] == "failed"), None)
        if failed is not None:
            p.stop_work(step.id)
            error = outcomes[failed][2]
            if isinstance(step, SubworkflowStep):
                return p.end(step.id, "failed", error=error)
            return p.fail(step.id, "fanout_item_failed", f"item {failed} failed", index=failed, item_error=error)
        if all(o[0] == "succeeded" for o in outcomes):
            outputs = [o[1] for o in outcomes]
            return p.end(step.id, "succeeded", output=outputs if isinstance(step, FanoutStep) else outputs[0])
        return False

    def _observe_loop(self, p: Pass, step: LoopStep) -> bool:
        """Once every step of the body ended (and none failed the run): ``until`` true or ``max_iterations``
        reached → the loop succeeds with ``{iterations, until_met, outputs}`` (the last iteration's outputs);
        otherwise the body's rows are archived into ``detail.history`` and reset to ``waiting`` with their round
        moved on (so their work is keyed anew), and the next iteration runs: the graph stays acyclic."""
        body = p.plan.inside[step.id]
        if not all(p.rows[s]["state"] in ENDED for s in body) or any(is_fatal(p.plan.steps[s], p.rows[s])
                                                                       for s in body):
            return False
        detail = p.rows[step.id]["detail"]
        met = False
        if step.until is not None:
            try:
                met = render(step.until, p.scope())
            except ExpressionError as exc:
                return p.fail(step.id, "input_mapping_failed", str(exc))
            if not isinstance(met, bool):
                return p.fail(step.id, "condition_not_boolean", f"`until` gave {type(met).__name__}, not a boolean")
        if met or detail["iteration"] >= step.max_iterations:
            outputs = {s: p.rows[s]["output"] for s in step.body if p.rows[s]["state"] == "succeeded"}
            return p.end(step.id, "succeeded", output={"iterations": detail["iteration"], "until_met": met,
                                                       "outputs": outputs})
        history = [*detail["history"], {"iteration": detail["iteration"], "steps": {
            s: {k: p.rows[s][k] for k in ("state", "task_id", "review_id") if p.rows[s][k] is not None}
            for s in sorted(body)}}]
        for s in body:
            p.set(s, state="waiting", round=p.rows[s]["round"] + 1, task_id=None, review_id=None, output=None,
                  error=None, started_at=None, finished_at=None, detail=None)
        p.set(step.id, detail={"iteration": detail["iteration"] + 1, "history": history})
        return True


def _end_as_task(p: Pass, step_id: str, task: Mapping[str, Any]) -> bool:
    if task["state"] in ("succeeded", "mark_succeeded"):
        return p.end(step_id, "succeeded", output=task["result"])
    error = _task_error(task)
    return p.fail(step_id, error["code"], error.get("message"))


def _task_error(task: Mapping[str, Any]) -> dict[str, Any]:
    """A failed task's code and, when it has one, its message: the run's error then says why, not only what."""
    stored = task["error"] if isinstance(task["error"], dict) else {}
    message = stored.get("message")
    return {"code": task["error_code"] or "task_failed", **({"message": message} if message else {})}


def _limit(step: Step) -> float | None:
    limits = [step.timeout_s]
    if isinstance(step, FanoutStep):
        limits.append(step.step.timeout_s)
    return min((x for x in limits if x is not None), default=None)


def _timed_out(p: Pass, step: Step) -> bool:
    """Past the step's ``timeout_s`` (a fan-out: or its template's — the items start together) from its start.
    An approval's ``timeout_s`` is its review item's expiry, decided by the review queue instead."""
    limit = _limit(step)
    return limit is not None and not isinstance(step, ApprovalStep) and p.now >= p.rows[step.id]["started_at"] + limit
