"""``hearth schedules ls|trigger``: schedules and their next fire times, through the schedule API."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

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
from hearth.operator_cli.output import api_errors, cell, console, print_json, show, table

app = typer.Typer(help="List schedules and fire one now (over the HTTP API).", no_args_is_help=True)


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@app.command("ls")
def list_schedules(
    *, caller: Annotated[str | None, typer.Option(help="only this caller's schedules")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Schedules by caller and name, with the next planned occurrence (UTC) and whether they are paused."""
    with api_errors():
        data = AdminClient(url, token, timeout=timeout).get("/api/v1/schedules", caller=caller, limit=limit)
    if as_json:
        print_json(data)
        return
    out = console()
    if not data["schedules"]:
        out.print("no schedules")
        return
    rows = table(None, ["SCHEDULE", "NAME", "CALLER", "CRON", "ZONE", "TASK TYPE", "NEXT (UTC)", "PAUSED",
                        "MISFIRE", "OVERLAP"])
    for s in data["schedules"]:
        rows.add_row(s["id"], cell(s["name"]), cell(s["caller"]), cell(s["cron"]), cell(s["time_zone"]),
                     cell(s["target"].get("task_type")), _when(None if s["paused"] else s["next_at"]),
                     "[yellow]paused[/yellow]" if s["paused"] else "no", cell(s["misfire_policy"]),
                     cell(s["overlap_policy"]))
    show(out, rows)


@app.command("trigger")
def trigger_schedule(
    schedule_id: Annotated[str, typer.Argument(help="the schedule's id (see `hearth schedules ls`)")],
    *, url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Fire one occurrence now (its overlap policy still applies): prints what became of it and its task."""
    with api_errors():
        occurrence = AdminClient(url, token, timeout=timeout).post(f"/api/v1/schedules/{quote(schedule_id)}/trigger")
    if as_json:
        print_json(occurrence)
        return
    why = f" ({occurrence['reason']})" if occurrence.get("reason") else ""
    console().print(f"schedule {occurrence['schedule_id']}: occurrence {occurrence['state']}{why}, task "
                    f"{cell(occurrence.get('task_id'))}")
