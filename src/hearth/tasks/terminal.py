"""What happens, in the same transaction, when tasks reach a terminal state (or come back from one).

* a failure opens (or re-opens) its dead letter with a severity from the rules;
* a success of a task that had been redriven resolves its dead letter;
* a task with a ``callback_url`` gets its delivery scheduled;
* with alerts on, an opened dead letter raises the ``dead_letter`` alert (with its severity).

Every path that ends a task — a worker's result, the reaper, a cancel, an operator — passes its
:class:`hearth.tasks.transitions.Moved` list through :func:`after_moves`, so none of them can forget one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncConnection

from hearth.observability import alerts
from hearth.tasks import callbacks, dead_letters
from hearth.tasks.dead_letters import SeverityRule
from hearth.tasks.states import SUCCESSFUL, TERMINAL
from hearth.tasks.transitions import Moved


@dataclass(frozen=True, slots=True)
class TerminalRules:
    severity_rules: tuple[SeverityRule, ...] = ()
    alert_window_s: float | None = None  # a dead letter opening raises an alert (None: alerts are off)
    alert_states: frozenset[str] = field(default_factory=lambda: frozenset({"failed"}))


def follows_up(to: str, *, attempt: int, callback_url: str | None) -> bool:
    """Whether :func:`after_moves` may write anything for a move to ``to`` of a task on ``attempt`` with that
    ``callback_url`` — False lets a worker write a plain success without a transaction around it. Kept
    beside :func:`after_moves`, which it must mirror."""
    return to == "failed" or (to in SUCCESSFUL and attempt > 1) or (to in TERMINAL and bool(callback_url))


async def after_moves(conn: AsyncConnection, moved: Sequence[Moved], *, now: float, rules: TerminalRules) -> None:
    letters = []
    resolved = []
    deliveries: list[tuple[str, str, str]] = []
    for m in moved:
        row = m.row
        if m.move.to == "failed":
            message = (m.move.values.get("error") or {}).get("message")
            letters.append({"task_id": row["id"], "task_type": row["task_type"], "queue": row["queue"],
                            "caller": row["caller"], "error_code": row["error_code"],
                            "failure_stage": row["failure_stage"], "message": message, "attempts": row["attempt"],
                            "severity": dead_letters.severity(rules.severity_rules, error_code=row["error_code"],
                                                              task_type=row["task_type"],
                                                              failure_stage=row["failure_stage"])})
        elif m.move.to in SUCCESSFUL and row["attempt"] > 1:
            resolved.append(row["id"])
        if m.terminal and row["callback_url"]:
            deliveries.append((row["id"], row["callback_url"], m.move.to))
    await dead_letters.open_many(conn, letters, now=now)
    if rules.alert_window_s is not None:
        for letter in letters:
            await alerts.record(conn, alerts.Alert("dead_letter", str(letter["task_id"]), str(letter["severity"]),
                                                   letter),
                                now=now, window_s=rules.alert_window_s)
    await dead_letters.resolve_redriven(conn, resolved, now=now)
    await callbacks.schedule(conn, deliveries, now=now)
