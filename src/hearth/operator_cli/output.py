"""How the operator commands print: rich tables for people, ``--json`` for scripts, errors on stderr.

Colours follow rich's rules, which honour ``NO_COLOR`` (any value turns colour off) and turn colour off
when stdout is not a terminal. Nothing printed here ever contains a token or a signing key: only what
the API returned, which never carries them.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import typer

from hearth.operator_cli.client import ApiError

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

EXIT_REFUSED = 1  # Hearth answered with an error (bad token, unknown id, a state conflict…)
EXIT_UNREACHABLE = 3  # no answer at all (wrong URL, server down, timeout)


def console(*, stderr: bool = False) -> Console:
    """A console on the current stdout (or stderr); rich reads ``NO_COLOR``, ``COLUMNS`` and the tty."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=True)  # a message line is never hard-wrapped


@contextlib.contextmanager
def progress_bar(label: str, total: int, *, quiet: bool = False) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr for a long operation of ``total`` steps; yields the function that advances
    it by one. Shown only on a terminal (and not with ``quiet``), so scripts and pipes see nothing."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    err = console(stderr=True)
    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True, disable=quiet or not err.is_terminal) as progress:
        bar = progress.add_task(label, total=total)
        yield lambda: progress.advance(bar)


def print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))


def table(title: str | None, columns: Sequence[str]) -> Table:
    """A table whose cells stay whole, one row per line (ids must stay copyable): print it with :func:`show`."""
    from rich import box
    from rich.table import Table

    out = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left", header_style="bold")
    for name in columns:
        out.add_column(name, no_wrap=True)
    return out


def show(out: Console, rows: Table) -> None:
    """Print a table at its natural width even when the terminal is narrower (the terminal wraps the long
    lines; a pipe to ``grep`` gets whole rows), rather than truncating ids and states."""
    natural = out.measure(rows, options=out.options.update_width(10_000)).maximum
    if natural > out.width:
        out.width = natural  # print() clamps its own width argument to the console's
    out.print(rows, crop=False)


def until(value: str | float | None, *, now: float | None = None) -> str:
    """How long from now: ``in 23h59m`` (``overdue 5m`` when past, ``-`` when unknown)."""
    at = parse_time(value)
    if at is None:
        return "-"
    left = at - (time.time() if now is None else now)
    return f"in {duration(left)}" if left >= 0 else f"overdue {duration(-left)}"


@contextlib.contextmanager
def api_errors() -> Iterator[None]:
    """Turn an :class:`ApiError` into one readable line on stderr and a non-zero exit code."""
    try:
        yield
    except ApiError as exc:
        typer.echo(f"error: {exc}", err=True)
        if exc.status == 401:
            typer.echo("hint: give the admin token with HEARTH_ADMIN_TOKEN (or --token)", err=True)
        raise typer.Exit(EXIT_UNREACHABLE if exc.status == 0 else EXIT_REFUSED) from None


def parse_time(value: str | float | None) -> float | None:
    """Epoch seconds from an API time (ISO 8601, ``Z`` allowed, or epoch seconds)."""
    if value is None or value == "":
        return None
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def age(value: str | float | None, *, now: float | None = None) -> str:
    """How long ago, compactly: ``45s``, ``12m``, ``3h05m``, ``2d04h`` (``-`` when unknown)."""
    at = parse_time(value)
    if at is None:
        return "-"
    return duration(max(0.0, (time.time() if now is None else now) - at))


def duration(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{seconds:.0f}s" if seconds >= 1 else f"{seconds:.1f}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def cell(value: Any) -> str:
    """A value as table text (rich markup in it escaped: an error message is data, not formatting)."""
    from rich.markup import escape

    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict | list):
        return escape(json.dumps(value, ensure_ascii=False, default=str))
    return escape(str(value))


def state_style(state: str) -> str:
    """A colour for a state word (rich markup), so a glance finds what is wrong."""
    colour = {"succeeded": "green", "mark_succeeded": "green", "approved": "green", "ok": "green",
              "ready": "green", "closed": "green", "enabled": "green", "running": "cyan", "claimed": "cyan",
              "queued": "yellow", "waiting": "yellow", "pending": "yellow", "half_open": "yellow",
              "degraded": "yellow", "cooling": "yellow", "hold": "magenta", "failed": "red", "killed": "red",
              "rejected": "red", "expired": "red", "open": "red", "disabled": "red", "not_ready": "red", "error": "red",
              "delayed": "yellow", "rebuilding": "yellow"}.get(state)
    return f"[{colour}]{state}[/{colour}]" if colour else state
