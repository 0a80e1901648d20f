"""Which occurrences of a schedule are due, and what becomes of the late ones (the misfire policy).

Pure functions over a schedule's timing, so they are tested with plain numbers. An occurrence is
*on time* when it is decided within :data:`MISFIRE_GRACE_S` of its planned instant; a scheduler that
ticks every second decides every occurrence on time while any Hearth process runs. Later ones (every
process was down, or the database was) are *misfires*:

* ``run_once`` — the latest missed occurrence fires (if it is within the catch-up window), the others
  are recorded as ``missed``;
* ``run_all`` — every missed occurrence within the catch-up window fires, in order; older ones are
  recorded as ``missed``;
* ``skip`` — every missed occurrence is recorded as ``missed``; none fires;
* ``prompt`` — a human decides: the latest missed occurrence within the catch-up window is ``asking``
  (a review item asks whether to run it, see :mod:`hearth.workflows.schedules`); the others are ``missed``.

Occurrences older than the catch-up window (or the grace, whichever is longer) are passed over without
a row each, so a schedule that fires every second and was down for a day writes a bounded number of
rows. A paused schedule considers nothing: on resume, planning starts again from the moment it resumed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from hearth.workflows.cron import CronSpec, fire_times, next_fire

MISFIRE_POLICIES = ("run_once", "run_all", "skip", "prompt")
OVERLAP_POLICIES = ("skip", "buffer_one", "buffer_all", "cancel_other", "allow_all")
MISFIRE_GRACE_S = 30.0
MAX_DUE = 1000  # occurrences decided in one pass for one schedule; the next pass goes on from there


@dataclass(frozen=True, slots=True)
class Timing:
    cron: CronSpec
    tz: ZoneInfo
    start_at: float | None = None
    end_at: float | None = None
    misfire_policy: str = "run_once"
    catchup_window_s: float = 3600.0


@dataclass(frozen=True, slots=True)
class Due:
    planned_at: float
    fire: bool
    late: bool  # decided after the grace: a misfire (fired under run_once / run_all, else missed)
    ask: bool = False  # a misfire a human is asked about (prompt)


def due(timing: Timing, *, planned_through: float, now: float) -> tuple[list[Due], float]:
    """The occurrences planned after ``planned_through`` and at most ``now``, each decided; and how far
    planning has now got (``now``, or the last occurrence decided when more than :data:`MAX_DUE` were due)."""
    horizon = max(timing.catchup_window_s, MISFIRE_GRACE_S)
    after = max(planned_through, now - horizon)
    if timing.start_at is not None:
        after = max(after, timing.start_at - 1e-6)
    until = now if timing.end_at is None else min(now, timing.end_at)
    times = fire_times(timing.cron, timing.tz, after, until, limit=MAX_DUE) if until > after else []
    through = times[-1] if len(times) == MAX_DUE else now
    late = [t for t in times if now - t > MISFIRE_GRACE_S]
    fire_late: set[float] = set()
    latest_in_window = {late[-1]} if late and now - late[-1] <= timing.catchup_window_s else set()
    if timing.misfire_policy == "run_all":
        fire_late = {t for t in late if now - t <= timing.catchup_window_s}
    elif timing.misfire_policy == "run_once":
        fire_late = latest_in_window
    ask = latest_in_window if timing.misfire_policy == "prompt" else set()
    out = [Due(t, fire=(now - t <= MISFIRE_GRACE_S) or t in fire_late, late=now - t > MISFIRE_GRACE_S, ask=t in ask)
           for t in times]
    return out, through


def next_occurrence(timing: Timing, after: float) -> float | None:
    """The first planned instant after ``after`` within the schedule's start and end (None: no more)."""
    start = after if timing.start_at is None else max(after, timing.start_at - 1e-6)
    t = next_fire(timing.cron, timing.tz, start)
    if t is None or (timing.end_at is not None and t > timing.end_at):
        return None
    return t


def jitter_s(schedule_id: str, planned_at: float, bound_s: float) -> float:
    """A delay in [0, ``bound_s``) fixed by the occurrence (every process computes the same one), so a
    fleet of schedules on the same minute does not start all at once."""
    if bound_s <= 0:
        return 0.0
    digest = hashlib.sha256(f"{schedule_id}:{planned_at:.3f}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 * bound_s
