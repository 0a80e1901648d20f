"""``hearth logs tail``: follow the request logs, polling the request-log list API.

The list API pages newest first (by id) and filters on ``since`` (creation time, inclusive, indexed). Each
poll asks only for rows created since the newest one seen minus a slack (rows from several processes'
batch writers land out of order, a little late), walks pages until it meets rows it already printed, and
prints the new ones oldest first; the ids printed within the slack are remembered, so nothing is printed
twice and a late row within the slack is not missed. A poll never counts the whole table: ``since``
bounds the rows the API counts and returns.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from hearth.operator_cli.client import DEFAULT_URL, AdminClient, JsonOption, TimeoutOption, TokenOption, UrlOption
from hearth.operator_cli.output import api_errors, cell, console, parse_time

app = typer.Typer(help="Request logs (over the HTTP API).", no_args_is_help=True)

_PAGE = 200
_MAX_PAGES = 10  # per poll: beyond 2,000 new rows a poll reports a gap instead of paging on
_SLACK_S = 30.0


class LogFollower:
    """The state of a tail: which rows were printed, from when to ask next."""

    def __init__(self, client: AdminClient, filters: dict[str, Any]) -> None:
        self.client = client
        self.filters = filters
        self.since: float | None = None
        self.seen: dict[int, float] = {}  # id -> created_at, of rows printed within the slack

    def _page(self, *, limit: int, offset: int) -> list[dict[str, Any]]:
        since = None if self.since is None else datetime.fromtimestamp(self.since - _SLACK_S, UTC).isoformat()
        data = self.client.get("/api/v1/request-logs", **self.filters, since=since, limit=limit, offset=offset)
        items: list[dict[str, Any]] = data["items"]
        return items

    def first(self, lines: int) -> list[dict[str, Any]]:
        """The newest ``lines`` rows, oldest first (``lines`` 0: none, only where to start from)."""
        rows = self._page(limit=max(1, lines), offset=0)
        self._remember(rows)
        if rows:  # the rows just before the ones shown are not new: a follow must not print them later
            top = max(r["id"] for r in rows)
            for r in self.poll()[0]:
                if r["id"] > top:  # arrived meanwhile: new, for the first poll to print
                    del self.seen[r["id"]]
            self.since = max(self.seen.values())
        return _oldest_first(rows[:lines])

    def poll(self) -> tuple[list[dict[str, Any]], bool]:
        """The rows not printed yet, oldest first, and whether some were skipped (more than one poll holds)."""
        new: list[dict[str, Any]] = []
        for page in range(_MAX_PAGES):
            rows = self._page(limit=_PAGE, offset=page * _PAGE)
            fresh = [r for r in rows if r["id"] not in self.seen]
            new.extend(fresh)
            if len(rows) < _PAGE or len(fresh) < len(rows):
                break
        else:
            self._remember(new)
            return _oldest_first(new), True
        self._remember(new)
        return _oldest_first(new), False

    def _remember(self, rows: list[dict[str, Any]]) -> None:
        for r in rows:
            at = parse_time(r["created_at"]) or 0.0
            self.seen[r["id"]] = at
            self.since = at if self.since is None else max(self.since, at)
        if self.since is not None:
            horizon = self.since - 2 * _SLACK_S
            self.seen = {i: at for i, at in self.seen.items() if at >= horizon}


def _oldest_first(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (parse_time(r["created_at"]) or 0.0, r["id"]))


def line(r: dict[str, Any]) -> str:
    """One request-log row as one line (rich markup; the status coloured by class)."""
    at = datetime.fromtimestamp(parse_time(r["created_at"]) or 0.0, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    at = at[:-4] + "Z"
    status = int(r["status"])
    colour = "green" if status < 400 else "yellow" if status < 500 else "red"
    served = cell(r.get("model"))
    if r.get("endpoint"):
        served += f"@{cell(r['endpoint'])}"
    tokens = f"{r.get('prompt_tokens', 0)}+{r.get('completion_tokens', 0)}tok"
    error = f" {cell(r['error_code'])}" if r.get("error_code") else ""
    return (f"{at} [{colour}]{status}[/{colour}] {cell(r.get('caller'))} {cell(r.get('route'))} {served} "
            f"{r.get('latency_ms', 0):.0f}ms {tokens} cost={r.get('cost', 0):g} {cell(r['request_id'])}{error}")


@app.command("tail")
def tail(
    *, follow: Annotated[bool, typer.Option("--follow", "-f", help="keep printing new rows as they arrive")] = False,
    lines: Annotated[int, typer.Option("--lines", "-n", min=0, max=500, help="how many recent rows first")] = 10,
    interval: Annotated[float, typer.Option(min=0.05, help="seconds between polls (with --follow)")] = 2.0,
    max_rows: Annotated[int | None, typer.Option(min=1, help="stop after printing this many new rows "
                                                 "(with --follow)")] = None,
    caller: Annotated[str | None, typer.Option(help="only this caller")] = None,
    model: Annotated[str | None, typer.Option(help="only this model")] = None,
    route: Annotated[str | None, typer.Option(help="only this route (chat, embeddings, capability…)")] = None,
    status: Annotated[int | None, typer.Option(help="only this HTTP status")] = None,
    error_code: Annotated[str | None, typer.Option(help="only this error code")] = None,
    task_id: Annotated[str | None, typer.Option(help="only the calls of this task")] = None,
    url: UrlOption = DEFAULT_URL, token: TokenOption = None, as_json: JsonOption = False,
    timeout: TimeoutOption = 10.0,
) -> None:
    """Print the newest request logs, oldest first; with ``--follow`` keep polling and print new rows
    (Ctrl-C stops). ``--json`` prints one JSON object per line."""
    filters = {"caller": caller, "model": model, "route": route, "status": status, "error_code": error_code,
               "task_id": task_id}
    follower = LogFollower(AdminClient(url, token, timeout=timeout), filters)
    out = console()

    def emit(rows: list[dict[str, Any]]) -> None:
        for r in rows:
            if as_json:
                typer.echo(json.dumps(r, ensure_ascii=False, default=str))
            else:
                out.print(line(r), soft_wrap=True)

    with api_errors():
        emit(follower.first(lines))
        if follow:
            _follow(follower, emit, interval=interval, max_rows=max_rows, warn=out.print)


def _follow(follower: LogFollower, emit: Callable[[list[dict[str, Any]]], None], *, interval: float,
            max_rows: int | None, warn: Callable[[str], None]) -> None:
    printed = 0
    try:
        while max_rows is None or printed < max_rows:
            time.sleep(interval)
            rows, gap = follower.poll()
            if gap:
                warn(f"[yellow]… more than {_PAGE * _MAX_PAGES} new rows since the last poll; older ones "
                     "skipped[/yellow]")
            if max_rows is not None:
                rows = rows[:max_rows - printed]
            emit(rows)
            printed += len(rows)
    except KeyboardInterrupt:
        return
