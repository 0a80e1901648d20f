"""``hearth tasks ls|show|cancel|redrive``: the task engine's tasks, through the task API with the admin token."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from hearth.operator_cli.client import (
    DEFAULT_URL,
    AdminClient,
    JsonOption,
    TimeoutOption,
    TokenOption,
    UrlOption,
    quote,
)
from hearth.operator_cli.output import age, api_errors, cell, console, print_json, show, state_style, table

app = typer.Typer(help="List, inspect, cancel and redrive tasks (over the HTTP API).", no_args_is_help=True)

OperatorOption = Annotated[str, typer.Option("--operator", help="who acts (recorded with the action)")]
ReasonOption = Annotated[str, typer.Option("--reason", help="why (recorded with the action)")]


@app.command("ls")
def list_tasks(
    *, state: Annotated[str | None, typer.Option(help="only tasks in this state (queued, running, failed…)")] = None,
    queue: Annotated[str | None, typer.Option(help="only this queue")] = None,
    task_type: Annotated[str | None, typer.Option("--type", help="only this task type")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="rows per page")] = 50,
    cursor: Annotated[str | None, typer.Option(help="continue from a previous page's next cursor")] = None,
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Tasks, newest first (one page; the next page's cursor is printed at the end)."""
    with api_errors():
        data = AdminClient(url, token, timeout=timeout).get("/api/v1/ai/tasks", state=state, queue=queue,
                                                            task_type=task_type, limit=limit, cursor=cursor)
    if as_json:
        print_json(data)
        return
    rows = table(None, ["TASK", "TYPE", "QUEUE", "STATE", "ATTEMPT", "PROGRESS", "CALLER", "AGE", "ERROR"])
    for t in data["tasks"]:
        rows.add_row(t["task_id"], cell(t["task_type"]), cell(t["queue"]), state_style(t["state"]),
                     f"{t['attempt']}/{t['max_attempts']}", f"{t['progress']}%", cell(t["caller"]),
                     age(t["timings"]["created_at"]), cell(t["error_code"]))
    out = console()
    if not data["tasks"]:
        out.print("no tasks")
        return
    show(out, rows)
    if data.get("next_cursor"):
        out.print(f"more: --cursor {data['next_cursor']}")


@app.command("show")
def show_task(
    task_id: Annotated[str, typer.Argument(help="the task id")],
    *, url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """One task: state, progress, timings, error and every attempt (which worker, how it ended)."""
    with api_errors():
        task = AdminClient(url, token, timeout=timeout).get(f"/api/v1/ai/tasks/{quote(task_id)}")
    if as_json:
        print_json(task)
        return
    _print_task(task)


def _print_task(task: dict[str, Any]) -> None:
    out = console()
    fields = table(f"task {task['task_id']}", ["FIELD", "VALUE"])
    fields.add_row("state", state_style(task["state"]))
    for key in ("task_type", "queue", "priority", "caller", "tenant", "user", "current_step", "hold_reason",
                "replay_of", "request_id", "idempotency_key"):
        fields.add_row(key, cell(task.get(key)))
    fields.add_row("progress", f"{task['progress']}%")
    fields.add_row("attempt", f"{task['attempt']}/{task['max_attempts']}")
    fields.add_row("cancel requested", cell(task["cancel_requested"]))
    for key, value in task["timings"].items():
        fields.add_row(key, cell(value))
    if task.get("error"):
        fields.add_row("error", cell(task["error"]))
    show(out, fields)
    attempts = task.get("attempts") or []
    if attempts:
        rows = table("attempts", ["#", "WORKER", "OUTCOME", "ERROR", "STARTED", "FINISHED"])
        for a in attempts:
            rows.add_row(str(a["attempt"]), cell(a["worker"]), cell(a["outcome"]), cell(a["error_code"]),
                         cell(a["started_at"]), cell(a["finished_at"]))
        show(out, rows)


@app.command("cancel")
def cancel_task(
    task_id: Annotated[str, typer.Argument(help="the task id")],
    *, url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Cancel a task: `killed` at once if it is not running; a running one stops at its next check."""
    with api_errors():
        task = AdminClient(url, token, timeout=timeout).post(f"/api/v1/ai/tasks/{quote(task_id)}/cancel")
    if as_json:
        print_json(task)
        return
    pending = " (its worker stops it at the next check)" if task["state"] == "running" else ""
    console().print(f"task {task['task_id']} is {state_style(task['state'])}{pending}")


@app.command("redrive")
def redrive_task(
    task_id: Annotated[str, typer.Argument(help="the task id (a failed task with an open dead letter)")],
    *, operator: OperatorOption, reason: ReasonOption,
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Queue a dead-lettered task for a new attempt; its dead letter records who and why, and is resolved
    when the task then succeeds."""
    with api_errors():
        letter = AdminClient(url, token, timeout=timeout).post(
            f"/api/v1/ai/dead-letters/{quote(task_id)}/redrive", {"operator": operator, "reason": reason})
    if as_json:
        print_json(letter)
        return
    console().print(f"task {letter['task_id']} redriven by {cell(operator)}: dead letter "
                    f"{state_style(str(letter['status']).lower())}")
