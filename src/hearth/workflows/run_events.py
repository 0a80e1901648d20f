"""What changed in a workflow run between two reads of its rows: the events of ``GET /runs/{id}/events``.

There is no event table: a run's rows (the run, its steps, its audited actions) are the whole truth, and the
stream compares successive reads of them. So an event says what a reader *saw* change — a step that went
``waiting → running → succeeded`` between two reads is one ``step`` event with ``previous: waiting`` — and a
reader that reconnects gets a ``snapshot`` of everything first, from which nothing it missed is lost in state
(only intermediate transitions are folded). Events, in the order they are emitted for one read:

* ``snapshot`` — the run as ``GET /runs/{id}`` shows it (first on every connection);
* ``action`` — an operator action appended to the run's audit (who, why, before and after);
* ``step`` — a step whose state or round changed: ``{step_id, state, previous, round, …}``;
* ``run`` — the run's state changed: ``{state, previous, error, finished_at}``; after a terminal one
  (``succeeded``, ``failed``, ``cancelled``, ``terminated``) the stream ends.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

RUN_TERMINAL = ("succeeded", "failed", "cancelled", "terminated")
_STEP_FIELDS = ("state", "round", "override", "task_id", "review_id", "output", "error", "detail", "started_at",
                "finished_at")


@dataclass(frozen=True, slots=True)
class RunEvent:
    kind: str  # snapshot | action | step | run
    data: Mapping[str, Any]


def snapshot(view: Mapping[str, Any]) -> RunEvent:
    return RunEvent("snapshot", view)


def is_terminal(view: Mapping[str, Any]) -> bool:
    return view["state"] in RUN_TERMINAL


def changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[RunEvent]:
    """The events that take a reader from ``before`` to ``after`` (two views of the same run)."""
    events: list[RunEvent] = []
    seen = max((a["id"] for a in before.get("actions", ())), default=0)
    events += [RunEvent("action", a) for a in after.get("actions", ()) if a["id"] > seen]
    old = {s["step_id"]: s for s in before["steps"]}
    for s in after["steps"]:
        prev = old.get(s["step_id"])
        if prev is None or (prev["state"], prev["round"]) != (s["state"], s["round"]):
            events.append(RunEvent("step", {"step_id": s["step_id"], "previous": prev and prev["state"],
                                            **{k: s.get(k) for k in _STEP_FIELDS}}))
    if before["state"] != after["state"]:
        events.append(RunEvent("run", {"state": after["state"], "previous": before["state"],
                                       "error": after.get("error"), "finished_at": after.get("finished_at")}))
    return events
