"""Admission to a queue: the depth bounds and the fair positions of new tasks (seed 004 overflow policy).

A submission holds its queue's advisory lock (:func:`hearth.tasks.queue.enqueue`) and checks, before it inserts:
the queue's depth (``queued`` + ``waiting``) against ``max_depth``, above the watermark low priority is refused,
and each fair key's (user's, tenant's or caller's) pending tasks against ``max_per_key``. Each new task gets its
fair position ``fair_seq = max(its key's last pending fair_seq + 1, now × FAIR_RATE)``.

Counting is a pass over the queue's pending entries in ``ix_tasks_pending_fair``, and such a pass also reads the
entry of every task that has left the queue since vacuum last ran — while a long transaction pins the vacuum
horizon, one per task processed since (448 ms per pass after a million tasks, measured), and every submission
waited for it holding the queue's lock. So on PostgreSQL a process keeps its last exact count per queue
(:class:`AdmissionCounts`) and, until it is a second old (longer once counting has become slow: at most
``COUNT_SHARE`` of the time), admits against an upper bound instead: the count, plus every task admitted anywhere
since, read from the sequence ``task_admissions``. Every way into ``queued`` or ``waiting`` advances that
sequence — a submission by the tasks it inserts, before it commits; a requeue, retry, hand-back, release or
redrive by its tasks, once it has committed (:func:`count_requeued`) — so the bound never falls below the
depth; near a limit, or when it is too old, the count is taken again and the decision is exact. A count holds the
depth and the shares of the keys it has seen; a key it has not seen is counted when it first submits, over that
key's own entries only. Fair positions between two counts continue from the last one this process gave the key.

A position is never behind the queue's head: a key without pending tasks starts at ``max(now × FAIR_RATE, the
lowest pending position)`` or, in a queue with nothing pending, after the highest position this process has given
in it. (Start-time fair queueing: the head is the virtual time of the task being served.) Ordering is the same as
starting at ``now × FAIR_RATE`` — such a task is claimed next either way — but the claim index then keeps
its live entries after the ones claimed tasks left behind, which vacuum cannot remove while a long transaction
pins the horizon; restarting below them would make every claim from a cursor step over them
(:mod:`hearth.tasks.claim_cursor`).
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.store.tables import tasks

log = get_logger("hearth.tasks.admission")

FAIR_RATE = 10.0  # virtual-time units per second: the pace at which one fair key's backlog counts as "due"
LOW_PRIORITY = 0  # tasks below this priority are refused first when a queue passes its watermark
REFRESH_S = 1.0  # the oldest an exact count is used for, while counting is quick
COUNT_SHARE = 0.05  # the most of the time exact counts may take, once they have become slow (a pinned horizon)
SEQUENCE = "task_admissions"
_NONE = -(2**62)  # a key's last position when it has none pending: below every position


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """Bounds of one queue (seed 004 overflow policy): depth, per fair key, low-priority watermark."""

    max_depth: int = 100_000
    max_per_key: int = 10_000
    low_priority_watermark: float = 0.8  # share of max_depth above which priority < 0 is refused


@dataclass(slots=True)
class _Share:
    count: int  # the key's pending tasks when counted
    last: int  # the last fair position given to the key (when counted: its highest pending one)
    admitted: int  # every admission numbered up to this one is in ``count``


@dataclass(slots=True)
class _Count:
    depth: int
    lowest: int | None  # the lowest pending fair position when counted, lowered by the positions given since
    admitted: int  # every admission numbered up to this one is in ``depth``
    at: float  # monotonic time of the count
    valid_s: float
    keys: dict[str, _Share] = field(default_factory=dict)


@dataclass(slots=True)
class AdmissionCounts:
    """This process's last exact count of each queue (PostgreSQL only; see the module's docstring)."""

    clock: Callable[[], float] = time.monotonic
    _counts: dict[str, _Count] = field(default_factory=dict)
    _tops: dict[str, int] = field(default_factory=dict)  # per queue, the highest fair position this process gave

    def recent(self, queue: str) -> _Count | None:
        count = self._counts.get(queue)
        return count if count is not None and self.clock() - count.at <= count.valid_s else None

    def record(self, queue: str, count: _Count) -> None:
        self._counts[queue] = count

    def top(self, queue: str) -> int | None:
        return self._tops.get(queue)

    def gave(self, queue: str, rows: list[dict[str, Any]]) -> None:
        """``rows`` were given their positions in ``queue``."""
        self._tops[queue] = max(self._tops.get(queue, _NONE), *(r["fair_seq"] for r in rows))


async def admit(conn: AsyncConnection, queue: str, rows: list[dict[str, Any]], *, now: float, limits: QueueLimits,
                counts: AdmissionCounts | None) -> None:
    """Take the queue's lock (held to the end of the caller's transaction: parallel submissions cannot overshoot),
    check ``rows`` (all of ``queue``) against its bounds and give each its ``fair_seq``. Raises ``queue_full``
    (429, with the queue and the bound in ``details``)."""
    keys = sorted({r["fair_key"] for r in rows})
    if conn.dialect.name != "postgresql":
        depth, pending, lowest = await _count(conn, queue, keys)
        _check_exactly(queue, rows, depth=depth, pending=pending, limits=limits)
        _positions(rows, {k: seq for k, (_, seq) in pending.items()}, now=now, head=_head(lowest, queue, counts))
        if counts is not None:
            counts.gave(queue, rows)
        return
    lock = {"a": 0x4854, "b": zlib.crc32(queue.encode()) - 2**31}
    if counts is None:
        await conn.execute(text("SELECT pg_advisory_xact_lock(:a, :b)"), lock)
        first = 0
    else:  # the lock and the numbers of these admissions in one round trip (their order does not matter)
        _, first, last = (await conn.execute(text(
            f"SELECT pg_advisory_xact_lock(:a, :b), min(v), max(v) FROM (SELECT nextval('{SEQUENCE}') AS v "
            "FROM generate_series(1, :n)) AS s"), {**lock, "n": len(rows)})).one()
        recent = counts.recent(queue)
        if recent is not None and await _admit_within_bound(conn, recent, queue, rows, keys=keys, first=int(first),
                                                            last=int(last), now=now, limits=limits):
            counts.gave(queue, rows)
            return
    began = time.monotonic()
    depth, pending, lowest = await _count(conn, queue, keys)
    took = time.monotonic() - began
    _check_exactly(queue, rows, depth=depth, pending=pending, limits=limits)
    given = _positions(rows, {k: seq for k, (_, seq) in pending.items()}, now=now, head=_head(lowest, queue, counts))
    if counts is not None:
        counts.gave(queue, rows)
        counts.record(queue, _Count(depth, _lowest(lowest, rows), int(first) - 1, counts.clock(),
                                    max(REFRESH_S, took / COUNT_SHARE),
                                    {k: _Share(pending.get(k, (0, 0))[0], seq, int(first) - 1)
                                     for k, seq in given.items()}))


def _head(lowest: int | None, queue: str, counts: AdmissionCounts | None) -> int | None:
    """Where a key without pending tasks may start at the earliest: the lowest pending position, or in an empty
    queue just after the highest position this process has given there (None: unknown)."""
    if lowest is not None:
        return lowest
    top = counts.top(queue) if counts is not None else None
    return None if top is None else top + 1


async def _count(conn: AsyncConnection, queue: str,
                 keys: list[str]) -> tuple[int, dict[str, tuple[int, int]], int | None]:
    """The queue's depth, for ``keys`` (pending tasks, highest pending fair_seq), and the lowest pending fair_seq
    (None if nothing is pending): one pass on PostgreSQL."""
    if conn.dialect.name == "postgresql":
        found = (await conn.execute(text(
            "SELECT CASE WHEN fair_key = ANY(:keys) THEN fair_key END AS k, count(*), max(fair_seq), min(fair_seq) "
            "FROM tasks WHERE queue = :q AND state IN ('queued', 'waiting') GROUP BY k"),
            {"q": queue, "keys": keys})).all()
        shares = {str(k): (int(n), int(m)) for k, n, m, _ in found if k is not None}
        return sum(int(n) for _, n, _, _ in found), shares, min((int(low) for *_, low in found), default=None)
    pending_states = tasks.c.state.in_(("queued", "waiting"))
    depth, lowest = (await conn.execute(select(func.count(), func.min(tasks.c.fair_seq)).select_from(tasks)
                                        .where(tasks.c.queue == queue, pending_states))).one()
    return int(depth), await _shares(conn, queue, keys), None if lowest is None else int(lowest)


async def _shares(conn: AsyncConnection, queue: str, keys: list[str]) -> dict[str, tuple[int, int]]:
    """(pending tasks, highest pending fair_seq) of each of ``keys`` that has any: a pass over their entries only."""
    out: dict[str, tuple[int, int]] = {}
    for i in range(0, len(keys), 500):
        stmt = (select(tasks.c.fair_key, func.count(), func.max(tasks.c.fair_seq))
                .where(tasks.c.queue == queue, tasks.c.state.in_(("queued", "waiting")),
                       tasks.c.fair_key.in_(keys[i:i + 500])).group_by(tasks.c.fair_key))
        out.update({str(k): (int(n), int(m)) for k, n, m in (await conn.execute(stmt)).all()})
    return out


async def _admit_within_bound(conn: AsyncConnection, count: _Count, queue: str, rows: list[dict[str, Any]], *,
                              keys: list[str], first: int, last: int, now: float, limits: QueueLimits) -> bool:
    """Admit ``rows`` against the upper bound of a recent count if it is far enough from every limit (a key the
    count does not know is counted now, over its own entries only)."""
    if count.depth + (last - count.admitted) > min(limits.low_priority_watermark * limits.max_depth,
                                                   limits.max_depth):
        return False  # near the watermark or the bound: count exactly
    missing = [k for k in keys if k not in count.keys]
    if missing:
        found = await _shares(conn, queue, missing)
        for k in missing:
            n, seq = found.get(k, (0, _NONE))
            count.keys[k] = _Share(n, seq, first - 1)
    if any(s.count + (last - s.admitted) > limits.max_per_key for s in (count.keys[k] for k in keys)):
        return False
    for key, seq in _positions(rows, {k: count.keys[k].last for k in keys}, now=now, head=count.lowest).items():
        count.keys[key].last = seq
    count.lowest = _lowest(count.lowest, rows)
    return True


def _lowest(lowest: int | None, rows: list[dict[str, Any]]) -> int:
    """The lowest pending position once ``rows`` (just given theirs) are pending too."""
    given = min(int(r["fair_seq"]) for r in rows)
    return given if lowest is None else min(lowest, given)


def _check_exactly(queue: str, rows: list[dict[str, Any]], *, depth: int, pending: dict[str, tuple[int, int]],
                   limits: QueueLimits) -> None:
    if depth + len(rows) > limits.max_depth:
        raise _full(queue, "queue", depth=depth, limit=limits.max_depth)
    watermark = limits.low_priority_watermark * limits.max_depth
    if depth + len(rows) > watermark:
        if any(r["priority"] < LOW_PRIORITY for r in rows):
            raise _full(queue, "low_priority_throttled", depth=depth, limit=int(watermark))
        if depth <= watermark:  # this submission crosses it: say so once per crossing
            log.warning("task_queue_above_watermark", queue=queue, pending=depth + len(rows),
                        watermark=int(watermark), max_depth=limits.max_depth)
    added: dict[str, int] = {}
    for row in rows:
        key = row["fair_key"]
        added[key] = added.get(key, 0) + 1
        count = pending.get(key, (0, 0))[0]
        if count + added[key] > limits.max_per_key:
            raise _full(queue, "per_user", depth=count, limit=limits.max_per_key)


def _positions(rows: list[dict[str, Any]], last: dict[str, int], *, now: float, head: int | None) -> dict[str, int]:
    """Give each row its ``fair_seq`` after its key's ``last`` position, not before ``now × FAIR_RATE`` nor ``head``
    (:func:`_head`); each key's last position afterwards."""
    base = max(int(now * FAIR_RATE), head) if head is not None else int(now * FAIR_RATE)
    given: dict[str, int] = {}
    for row in rows:
        key = row["fair_key"]
        seq = max(given.get(key, last.get(key, base - 1)) + 1, base)
        row["fair_seq"] = seq
        given[key] = seq
    return given


def _full(queue: str, bound: str, *, depth: int, limit: int) -> HearthError:
    what = {"queue": "The queue is full", "per_user": "This user (or tenant) has as many tasks queued as allowed",
            "low_priority_throttled": "The queue is above its watermark; low-priority tasks are refused"}[bound]
    return HearthError("queue_full", f"{what} ({queue}: {depth} pending, limit {limit}); retry later.",
                       details={"queue": queue, "bound": bound, "pending": depth, "limit": limit}, retry_after=5.0)


async def count_requeued(engine: AsyncEngine, n: int) -> None:
    """``n`` tasks went back into a queue (committed): advance the admissions sequence by as many, so that no
    process's bound falls below a depth they raised. Best effort: if this fails, bounds may be exceeded by
    those ``n`` until a process counts again (within a second while counting is quick)."""
    if n <= 0 or engine.dialect.name != "postgresql":
        return
    try:
        async with engine.connect() as conn:
            await conn.execute(text(f"SELECT max(nextval('{SEQUENCE}')) FROM generate_series(1, :n)"), {"n": n})
            await conn.commit()
    except Exception as exc:
        log.warning("task_admissions_not_advanced", tasks=n, error=type(exc).__name__)
