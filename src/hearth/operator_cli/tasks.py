"""``hearth tasks ls|show|cancel|redrive``: the task engine's tasks, through the task API with the admin token."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from hearth.operator_cli.client import (
    DEFAULT_URL,
    AdminClient,
    ApiError,
    JsonOption,
    TimeoutOption,
    TokenOption,
    UrlOption,
    quote,
)
from hearth.operator_cli.output import (
    EXIT_REFUSED,
    age,
    api_errors,
    cell,
    console,
    print_json,
    progress_bar,
    show,
    state_style,
    table,
)

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
def redrive_tasks(
    task_ids: Annotated[list[str] | None, typer.Argument(help="dead-lettered task ids", show_default=False)] = None,
    *, operator: OperatorOption, reason: ReasonOption,
    all_open: Annotated[bool, typer.Option("--all-open", help="every OPEN dead letter instead (narrow it with "
                                           "--type and --severity)")] = False,
    task_type: Annotated[str | None, typer.Option("--type", help="with --all-open: only this task type")] = None,
    severity: Annotated[str | None, typer.Option(help="with --all-open: only this severity (P1, P2, P3)")] = None,
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Queue dead-lettered tasks for a new attempt; each dead letter records who and why, and is resolved
    when its task then succeeds. Several at once show a progress bar; one refused does not stop the rest."""
    if bool(task_ids) == all_open:
        raise typer.BadParameter("give task ids or --all-open (not both)", param_hint="TASK_IDS")
    if (task_type or severity) and not all_open:
        raise typer.BadParameter("--type and --severity select dead letters for --all-open", param_hint="--type")
    client = AdminClient(url, token, timeout=timeout)
    with api_errors():
        ids = task_ids or _open_dead_letters(client, task_type=task_type, severity=severity)
        if len(ids) == 1 and not all_open:
            letter = _redrive(client, ids[0], operator=operator, reason=reason)
            if as_json:
                print_json(letter)
            else:
                console().print(f"task {letter['task_id']} redriven by {cell(operator)}: dead letter "
                                f"{state_style(str(letter['status']).lower())}")
            return
        done, refused = _redrive_many(client, ids, operator=operator, reason=reason, quiet=as_json)
    if as_json:
        print_json({"redriven": done, "refused": [{"task_id": t, "error": str(e)} for t, e in refused]})
    else:
        console().print(f"redriven {len(done)} of {len(ids)} dead letter(s) by {cell(operator)}")
        for task_id, exc in refused:
            typer.echo(f"error: {task_id}: {exc}", err=True)
    if refused:
        raise typer.Exit(EXIT_REFUSED)


def _redrive(client: AdminClient, task_id: str, *, operator: str, reason: str) -> dict[str, Any]:
    letter: dict[str, Any] = client.post(f"/api/v1/ai/dead-letters/{quote(task_id)}/redrive",
                                         {"operator": operator, "reason": reason})
    return letter


def _open_dead_letters(client: AdminClient, *, task_type: str | None, severity: str | None) -> list[str]:
    """Every OPEN dead letter's task id (all pages read first: a redrive changes the set being paged)."""
    ids: list[str] = []
    cursor = None
    while True:
        page = client.get("/api/v1/ai/dead-letters", status="OPEN", task_type=task_type, severity=severity,
                          limit=500, cursor=cursor)
        ids += [d["task_id"] for d in page["dead_letters"]]
        cursor = page.get("next_cursor")
        if not cursor:
            return ids


def _redrive_many(client: AdminClient, ids: list[str], *, operator: str, reason: str,
                  quiet: bool) -> tuple[list[str], list[tuple[str, ApiError]]]:
    done: list[str] = []
    refused: list[tuple[str, ApiError]] = []
    with progress_bar("redrive", len(ids), quiet=quiet) as advance:
        for task_id in ids:
            try:
                done.append(_redrive(client, task_id, operator=operator, reason=reason)["task_id"])
            except ApiError as exc:
                if exc.status == 0:
                    raise  # Hearth is gone: stop, do not report every remaining id
                refused.append((task_id, exc))
            advance()
    return done, refused
