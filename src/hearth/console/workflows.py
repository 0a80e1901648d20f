"""The workflow pages: registered definitions, runs (state filter, keyset-paged newest first), and one run — its
graph with each step's state, each step's task, attempts and error, its audited operator actions — with the
operator actions themselves (operator role): pause, resume and terminate the run; rerun, skip or mark a step
succeeded. Each action needs a reason and names the signed-in user as its operator; they are the same service
functions as the admin API's (:mod:`hearth.workflows.run_actions`, :mod:`hearth.api.workflow_runs`), so what each
may do, and its audit, is decided there.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import ConsoleRefused, checked_form, require
from hearth.console.render import page, redirect
from hearth.console.run_graph import run_graph
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.workflows.definitions import edges
from hearth.workflows.run_actions import RUN_ACTION_STATES, STEP_ACTION_STATES, Audit, RunActions
from hearth.workflows.run_store import runs_page

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
log = get_logger("hearth.console")
PAGE: Final = 50
MAX_TASK_LOOKUPS: Final = 100  # steps of one run whose task is read for its attempts
RUN_STATES: Final = ("running", "paused", "succeeded", "failed", "cancelled", "terminated")
RUN_ACTIONS: Final = tuple(RUN_ACTION_STATES)
STEP_ACTIONS: Final = tuple(a.replace("_", "-") for a in STEP_ACTION_STATES)  # as in the URLs: mark-succeeded


@router.get("/workflows", include_in_schema=False)
async def workflows(request: Request) -> Response:
    """Definitions are configuration (few): each name's newest version, paged here by name."""
    console = await require(request)
    after = request.query_params.get("after", "")
    rows = [r for r in await runtime(request).workflows.latest() if r["name"] > after]
    shown = rows[:PAGE]
    return page(request, "workflows.html", console, rows=shown,
                next_after=shown[-1]["name"] if len(rows) > PAGE else None)


def _cursor(raw: str | None) -> tuple[float, str] | None:
    if not raw:
        return None
    at, _, run_id = raw.partition("/")
    try:
        return float(at), run_id
    except ValueError as exc:
        raise ConsoleRefused(400, "The page cursor is not valid.") from exc


@router.get("/runs", include_in_schema=False)
async def runs(request: Request) -> Response:
    console = await require(request)
    q = request.query_params
    state = q.get("state") or None
    if state not in (None, *RUN_STATES):
        raise ConsoleRefused(400, "Unknown run state.")
    rows, nxt = await runs_page(runtime(request).engine, state=state, before=_cursor(q.get("cursor")), limit=PAGE)
    return page(request, "runs.html", console, rows=rows, states=RUN_STATES, filters={"state": state},
                next_cursor=f"{nxt[0]!r}/{nxt[1]}" if nxt else None)


async def _step_tasks(request: Request, steps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The task of each step that has one (state, attempt / max attempts), for at most MAX_TASK_LOOKUPS steps."""
    service = runtime(request).tasks.service
    found: dict[str, dict[str, Any]] = {}
    for step in [s for s in steps if s["task_id"]][:MAX_TASK_LOOKUPS]:
        try:
            row = await service.get(step["task_id"], caller=None)
        except HearthError:
            continue  # purged with its retention: the step still names it
        found[step["step_id"]] = {"state": row["state"], "attempt": row["attempt"],
                                  "max_attempts": row["max_attempts"]}
    return found


@router.get("/runs/{run_id}", include_in_schema=False)
async def run(run_id: str, request: Request) -> Response:
    console = await require(request)
    rt = runtime(request)
    try:
        view = await RunActions(rt.runs).view(run_id)
        plan = await rt.runs.plan_of(view["workflow"], view["version"])
    except HearthError as exc:
        raise ConsoleRefused(exc.status, exc.message) from exc
    steps = view["steps"]
    graph = run_graph([(s["step_id"], s["kind"], s["state"]) for s in steps], edges(plan.definition))
    return page(request, "run.html", console, run=view, steps=steps, graph=graph,
                tasks=await _step_tasks(request, steps), actions=list(reversed(view["actions"])),
                run_actions=[a for a in RUN_ACTIONS if view["state"] in RUN_ACTION_STATES[a]],
                step_actions={s["step_id"]: offered(view["state"], s["state"]) for s in steps})


def offered(run_state: str, step_state: str) -> list[str]:
    """The step actions a step in ``step_state`` of a run in ``run_state`` can take."""
    return [action.replace("_", "-") for action, (run_states, step_states) in STEP_ACTION_STATES.items()
            if run_state in run_states and step_state in step_states]


def _audit(console_user: str, form: dict[str, str]) -> Audit | None:
    reason = form.get("reason", "").strip()
    return Audit(operator=console_user, reason=reason[:2000]) if reason else None


@router.post("/runs/{run_id}/{action}", include_in_schema=False)
async def act_on_run(run_id: str, action: str, request: Request) -> Response:
    console = await require(request, "operator")
    form = await checked_form(request, console)
    if action not in RUN_ACTIONS:
        raise ConsoleRefused(404, "No such run action.")
    back = f"/console/runs/{run_id}"
    audit = _audit(console.user, form)
    if audit is None:
        return redirect(back, error=f"A reason is required to {action} the run.")
    actions = RunActions(runtime(request).runs)
    try:
        if action == "pause":
            done = await actions.pause(run_id, audit)
        elif action == "resume":
            done = await actions.resume(run_id, audit)
        else:
            done = await actions.terminate(run_id, audit)
    except HearthError as exc:
        return redirect(back, error=exc.message)
    log.info("console_run_action", user=console.user, run_id=run_id, action=action)
    return redirect(back, notice=f"{action.capitalize()}: the run is {done['state']}.")


@router.post("/runs/{run_id}/steps/{step_id}/{action}", include_in_schema=False)
async def act_on_step(run_id: str, step_id: str, action: str, request: Request) -> Response:
    console = await require(request, "operator")
    form = await checked_form(request, console)
    if action not in STEP_ACTIONS:
        raise ConsoleRefused(404, "No such step action.")
    back = f"/console/runs/{run_id}"
    audit = _audit(console.user, form)
    if audit is None:
        return redirect(back, error=f"A reason is required to {action.replace('-', ' ')} step {step_id}.")
    actions = RunActions(runtime(request).runs)
    try:
        if action == "rerun":
            await actions.rerun(run_id, step_id, audit)
        elif action == "skip":
            await actions.skip(run_id, step_id, audit)
        else:
            await actions.mark_succeeded(run_id, step_id, audit, output=_output(form.get("output", "")))
    except HearthError as exc:
        return redirect(back, error=exc.message)
    log.info("console_step_action", user=console.user, run_id=run_id, step_id=step_id, action=action)
    return redirect(back, notice=f"Step {step_id}: {action.replace('-', ' ')} done.")


def _output(raw: str) -> Any:
    """A marked step's output: JSON as typed (empty: null; text that is not JSON: that text as a string)."""
    raw = raw.strip()
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw
