"""The queue is the ``tasks`` table: enqueue is an INSERT, a claim is an UPDATE of ``queued`` rows.

* **Enqueue** (:func:`enqueue`) inserts the tasks and their first events in the caller's transaction and,
  on PostgreSQL, sends ``NOTIFY hearth_tasks, '<queue>'`` (delivered at commit), so a task is queued
  exactly when it is saved. Depth is bounded per queue and per fair key (user, else tenant, else caller);
  the check (:mod:`hearth.tasks.admission`) and the insert hold the queue's advisory lock, so parallel
  submissions cannot overshoot.
* **Fairness** is round-robin by virtual time: each fair key's next task gets
  ``fair_seq = max(its last pending fair_seq + 1, now × FAIR_RATE)``, and claims take the lowest
  ``fair_seq`` first (after priority). A user who queues 500 tasks at once spreads them over 50 s of
  virtual time; another user's single task, queued a second later, sorts after only ten of them.
* **Claim** (:func:`claim`) takes at most the number of free slots (no prefetch), priority then fair
  position then FIFO, with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL (workers never wait for each other);
  SQLite serialises writers, so the same statement without locking clauses has the same contract.
* **Leases**: a claim sets ``lease_until``; :func:`heartbeat` extends the leases a worker still holds
  and tells it which of its tasks were cancelled; :func:`expired` finds the tasks whose worker stopped
  renewing, for the reaper.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from sqlalchemy import JSON, func, select, text, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.observability.logging import get_logger
from hearth.store.db import write_transaction
from hearth.store.tables import task_events, tasks
from hearth.tasks.admission import AdmissionCounts, QueueLimits, admit
from hearth.tasks.claim_cursor import ClaimKey, before
from hearth.tasks.transitions import record_events, state_event, unnest_columns

log = get_logger("hearth.tasks.queue")

NOTIFY_CHANNEL = "hearth_tasks"
CANCEL_CHANNEL = "hearth_task_cancel"

_CLAIM_SET = ("state = 'running', attempt = attempt + 1, worker = :worker, lease_until = :lease, "
              "started_at = :now, updated_at = :now")
_ORDER = "ORDER BY priority DESC, fair_seq, created_at, id LIMIT :n"
CLAIMED = ("id", "task_type", "queue", "attempt", "max_attempts", "payload", "caller", "tenant", "end_user",
           "request_id", "priority", "fair_seq", "callback_url", "repeat_safe", "started_at", "trace_parent",
           "idempotency_key")


def fair_key(caller: str, tenant: str | None, end_user: str | None) -> str:
    if end_user:
        return f"u:{caller}:{end_user}"
    if tenant:
        return f"t:{caller}:{tenant}"
    return f"c:{caller}"


async def enqueue(conn: AsyncConnection, rows: Sequence[dict[str, Any]], *, now: float,
                  limits: Mapping[str, QueueLimits], counts: AdmissionCounts | None = None) -> None:
    """Insert new task rows (each already complete but for ``fair_seq``) and their first events.

    Raises ``queue_full`` (429, with the queue and the bound in ``details``) and writes nothing if any
    queue or fair key would go past its bound.
    """
    by_queue: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_queue.setdefault(row["queue"], []).append(row)
    for queue in sorted(by_queue):
        await admit(conn, queue, by_queue[queue], now=now, limits=limits.get(queue, QueueLimits()), counts=counts)
    if conn.dialect.name == "postgresql":
        await _insert_pg(conn, rows, now=now, queues=sorted(by_queue))
        return
    await conn.execute(tasks.insert(), list(rows))
    await record_events(conn, [state_event(r["id"], r["state"], attempt=0, now=now) for r in rows])


async def _insert_pg(conn: AsyncConnection, rows: Sequence[dict[str, Any]], *, now: float,
                     queues: Sequence[str]) -> None:
    """The tasks, their first events and the queues' notifications in one statement (arrays, not rows of
    parameters: a batch of 1,000 costs one round trip and no per-row parameter handling). A column that is NULL
    in every row is left out (it has no server default, so it is NULL all the same): half of them are, and the
    driver checks and encodes every array element."""
    columns = {c.name: [r.get(c.name) for r in rows] for c in tasks.columns}
    columns = {n: values for n, values in columns.items()
               if tasks.c[n].server_default is not None or any(v is not None for v in values)}
    names = list(columns)
    source, params = unnest_columns(tasks, columns)
    lowest = lowest_keys(rows)
    sql = (f"WITH ins AS (INSERT INTO tasks ({', '.join(names)}) {source} RETURNING id, state), "
           "ev AS (INSERT INTO task_events (task_id, at, kind, state, attempt) SELECT id, :now, 'state', state, 0 "
           "FROM ins) SELECT pg_notify(:channel, q) FROM unnest(CAST(:notices AS text[])) AS q")
    await conn.execute(text(sql), {**params, "now": now, "channel": NOTIFY_CHANNEL,
                                   "notices": [notice(q, lowest.get(q)) for q in queues]})


def lowest_keys(rows: Sequence[Mapping[str, Any]]) -> dict[str, ClaimKey]:
    """Per queue, the lowest claim key among ``rows`` that are queued (enqueued, so with their ``fair_seq``)."""
    out: dict[str, ClaimKey] = {}
    for row in rows:
        if row["state"] == "queued":
            key = (row["priority"], row["fair_seq"])
            if row["queue"] not in out or before(key, out[row["queue"]]):
                out[row["queue"]] = key
    return out


def notice(queue: str, key: ClaimKey | None) -> str:
    """The payload of a ``hearth_tasks`` notification: the queue, and the lowest claim key queued if known."""
    return queue if key is None else f"{queue}\t{key[0]}\t{key[1]}"


def read_notice(payload: str) -> tuple[str, ClaimKey | None]:
    """The queue and key of a :func:`notice` (a bare queue name, as older processes send, has no key)."""
    queue, sep, rest = payload.partition("\t")
    priority, _, seq = rest.partition("\t")
    if sep and priority.lstrip("-").isdigit() and seq.lstrip("-").isdigit():
        return queue, (int(priority), int(seq))
    return payload, None


def _chunks(items: list[str], size: int) -> list[list[str]]:
    return [items[i:i + size] for i in range(0, len(items), size)]


async def claim(conn: AsyncConnection, *, queue: str, types: Sequence[str], limit: int, worker: str, now: float,
                lease_s: float, per_key_cap: int | None = None) -> Sequence[Mapping[Any, Any]]:
    """Move up to ``limit`` due tasks of ``queue`` (of the given types) to ``running`` for ``worker``, in the
    caller's transaction (SQLite, or a capped queue; :func:`claim_now` is the entry point).

    With ``per_key_cap``, no fair key (user, tenant or caller) gets more than that many tasks running in the
    queue: claims of a capped queue take the queue's lock (so two workers cannot both fill the last slot of
    a key) and choose, in claim order, among a window of ``8 × limit`` candidates.
    """
    if limit <= 0 or not types:
        return []
    if per_key_cap is not None:
        return await _claim_capped(conn, queue=queue, types=types, limit=limit, worker=worker, now=now,
                                   lease_s=lease_s, cap=per_key_cap)
    params: dict[str, Any] = {"queue": queue, "n": limit, "worker": worker, "now": now, "lease": now + lease_s}
    marks = ", ".join(f":t{i}" for i in range(len(types)))
    params.update({f"t{i}": t for i, t in enumerate(types)})
    sql = (f"UPDATE tasks SET {_CLAIM_SET} WHERE id IN (SELECT id FROM tasks WHERE queue = :queue AND state = 'queued'"
           f" AND run_after <= :now AND task_type IN ({marks}) {_ORDER}) RETURNING {', '.join(CLAIMED)}")
    rows = (await conn.execute(text(sql).columns(payload=JSON), params)).mappings().all()
    await record_events(conn, [state_event(r["id"], "running", attempt=r["attempt"], now=now,
                                           detail={"worker": worker}) for r in rows])
    return rows


def _claim_pg(picked: str) -> str:
    """One statement: pick (``picked``, a CTE body yielding ids), lease and record the events together."""
    return (
        f"WITH {picked}, "
        "claimed AS (UPDATE tasks AS t SET state = 'running', attempt = t.attempt + 1, worker = $5, lease_until = $6, "
        "started_at = $2, updated_at = $2 FROM picked WHERE t.id = picked.id "
        f"RETURNING {', '.join('t.' + c for c in CLAIMED)}), "
        "events AS (INSERT INTO task_events (task_id, at, kind, state, attempt, detail) "
        "SELECT id, $2, 'state', 'running', attempt, CAST($7 AS json) FROM claimed) "
        f"SELECT {', '.join(CLAIMED)} FROM claimed")


_DUE = "SELECT id FROM tasks WHERE queue = $1 AND state = 'queued' AND run_after <= $2 AND task_type = ANY($3::text[])"
_CLAIM_PG = _claim_pg(f"picked AS ({_DUE} ORDER BY priority DESC, fair_seq, created_at, id LIMIT $4 "
                      "FOR UPDATE SKIP LOCKED)")
# From a cursor ($8 priority, $9 fair_seq; hearth.tasks.claim_cursor): the rest of the cursor's priority from its
# fair_seq on — an index range that starts there — then, only if that did not fill the claim, lower priorities.
# (A locking clause is not allowed in a UNION, hence two CTEs; the second's LIMIT is 0 when the first filled it,
# and PostgreSQL then never starts its scan.)
_CLAIM_PG_AFTER = _claim_pg(
    f"here AS ({_DUE} AND priority = $8 AND fair_seq >= $9 ORDER BY fair_seq, created_at, id LIMIT $4 "
    "FOR UPDATE SKIP LOCKED), "
    f"lower AS ({_DUE} AND priority < $8 ORDER BY priority DESC, fair_seq, created_at, id "
    "LIMIT $4 - (SELECT count(*) FROM here) FOR UPDATE SKIP LOCKED), "
    "picked AS (SELECT id FROM here UNION ALL SELECT id FROM lower)")


def _json(value: Any) -> Any:
    """A json column as the driver gave it: text, or already decoded (a codec SQLAlchemy set on the connection)."""
    return orjson.loads(value) if isinstance(value, str | bytes) else value


async def claim_now(engine: AsyncEngine, *, queue: str, types: Sequence[str], limit: int, worker: str, now: float,
                    lease_s: float, per_key_cap: int | None = None,
                    after: ClaimKey | None = None) -> Sequence[Mapping[Any, Any]]:
    """:func:`claim` in its own transaction. On PostgreSQL (no cap) that is one statement — pick, lease and
    record the events together — run without BEGIN/COMMIT: one round trip per claim; ``after`` (a claim key,
    inclusive) starts it there instead of at the head of the queue (:mod:`hearth.tasks.claim_cursor`; only
    there: elsewhere it is ignored, which is always correct, only slower under a pinned vacuum horizon)."""
    if limit <= 0 or not types:
        return []
    if engine.dialect.name == "postgresql" and per_key_cap is None:
        async with engine.connect() as conn:
            # the driver's connection, outside a transaction: one round trip, and the rows without SQLAlchemy's
            # per-row processing (0.6 of 2.3 ms for a claim of 64, and every freed slot waits for it)
            driver = (await conn.get_raw_connection()).driver_connection
            assert driver is not None
            args = [queue, now, list(types), limit, worker, now + lease_s, orjson.dumps({"worker": worker}).decode()]
            if after is None:
                rows = await driver.fetch(_CLAIM_PG, *args)
            else:
                rows = await driver.fetch(_CLAIM_PG_AFTER, *args, after[0], after[1])
        return [{**row, "payload": _json(row["payload"])} for row in rows]
    async with write_transaction(engine) as conn:
        return await claim(conn, queue=queue, types=types, limit=limit, worker=worker, now=now, lease_s=lease_s,
                           per_key_cap=per_key_cap)


async def _claim_capped(conn: AsyncConnection, *, queue: str, types: Sequence[str], limit: int, worker: str,
                        now: float, lease_s: float, cap: int) -> Sequence[Mapping[Any, Any]]:
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:a, :b)"),
                           {"a": 0x4855, "b": zlib.crc32(queue.encode()) - 2**31})
    running: dict[str, int] = dict((await conn.execute(select(tasks.c.fair_key, func.count()).where(
        tasks.c.queue == queue, tasks.c.state == "running").group_by(tasks.c.fair_key))).all())
    window = (select(tasks.c.id, tasks.c.fair_key)
              .where(tasks.c.queue == queue, tasks.c.state == "queued", tasks.c.run_after <= now,
                     tasks.c.task_type.in_(list(types)))
              .order_by(tasks.c.priority.desc(), tasks.c.fair_seq, tasks.c.created_at, tasks.c.id).limit(limit * 8))
    if conn.dialect.name == "postgresql":
        window = window.with_for_update(skip_locked=True)
    chosen: list[str] = []
    for task_id, key in (await conn.execute(window)).all():
        if running.get(key, 0) < cap:
            running[key] = running.get(key, 0) + 1
            chosen.append(task_id)
            if len(chosen) == limit:
                break
    if not chosen:
        return []
    stmt = (update(tasks).where(tasks.c.id.in_(chosen), tasks.c.state == "queued")
            .values(state="running", attempt=tasks.c.attempt + 1, worker=worker, lease_until=now + lease_s,
                    started_at=now, updated_at=now)
            .returning(*(tasks.c[c] for c in CLAIMED)))
    rows = (await conn.execute(stmt)).mappings().all()
    await record_events(conn, [state_event(r["id"], "running", attempt=r["attempt"], now=now,
                                           detail={"worker": worker}) for r in rows])
    return rows


async def heartbeat(conn: AsyncConnection, *, worker: str, held: Sequence[str], now: float,
                    lease_s: float) -> dict[str, tuple[int, bool]]:
    """Extend the leases ``worker`` still holds; {task id: (attempt, cancel requested)} for each."""
    out: dict[str, tuple[int, bool]] = {}
    for chunk in _chunks(list(held), 1000):
        stmt = (update(tasks).where(tasks.c.worker == worker, tasks.c.state == "running", tasks.c.id.in_(chunk))
                .values(lease_until=now + lease_s).returning(tasks.c.id, tasks.c.attempt, tasks.c.cancel_requested))
        out.update({r[0]: (r[1], bool(r[2])) for r in (await conn.execute(stmt)).all()})
    return out


async def expired(conn: AsyncConnection, *, now: float, limit: int = 500) -> Sequence[Mapping[Any, Any]]:
    """Running tasks whose lease ran out (their worker died or froze), oldest first, locked on PostgreSQL."""
    stmt = (select(tasks.c.id, tasks.c.attempt, tasks.c.max_attempts, tasks.c.repeat_safe, tasks.c.worker,
                   tasks.c.started_at, tasks.c.current_step, tasks.c.task_type)
            .where(tasks.c.state == "running", tasks.c.lease_until < now).order_by(tasks.c.lease_until).limit(limit))
    if conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True)
    return (await conn.execute(stmt)).mappings().all()


async def due_waiting(conn: AsyncConnection, *, now: float, limit: int = 1000) -> Sequence[Mapping[Any, Any]]:
    """``waiting`` tasks whose ``run_after`` has come (to be moved to ``queued``)."""
    stmt = (select(tasks.c.id, tasks.c.queue).where(tasks.c.state == "waiting", tasks.c.run_after <= now)
            .order_by(tasks.c.run_after).limit(limit))
    if conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True)
    return (await conn.execute(stmt)).mappings().all()


async def notify(conn: AsyncConnection, queues: Sequence[str]) -> None:
    if conn.dialect.name == "postgresql":
        for queue in sorted(set(queues)):
            await conn.execute(text("SELECT pg_notify(:channel, :queue)"), {"channel": NOTIFY_CHANNEL, "queue": queue})


async def report_progress(conn: AsyncConnection, reports: Sequence[tuple[str, int, int | None, str | None]], *,
                          now: float) -> None:
    """Write progress reports (task id, attempt, percent, step) of running attempts, and an event for each
    one written (one statement on PostgreSQL; a report of an attempt that is no longer running is dropped)."""
    if not reports:
        return
    if conn.dialect.name == "postgresql":
        sql = ("UPDATE tasks AS t SET progress = COALESCE(v.percent, t.progress), "
               "current_step = COALESCE(v.step, t.current_step), updated_at = :now "
               "FROM unnest(CAST(:ids AS text[]), CAST(:attempts AS int[]), CAST(:percents AS int[]), "
               "CAST(:steps AS text[])) AS v(id, attempt, percent, step) "
               "WHERE t.id = v.id AND t.attempt = v.attempt AND t.state = 'running' RETURNING t.id")
        written = set((await conn.execute(text(sql), {
            "now": now, "ids": [r[0] for r in reports], "attempts": [r[1] for r in reports],
            "percents": [r[2] for r in reports], "steps": [r[3] for r in reports]})).scalars().all())
    else:
        written = set()
        for task_id, attempt, percent, step in reports:
            values: dict[str, Any] = {"updated_at": now}
            if percent is not None:
                values["progress"] = percent
            if step is not None:
                values["current_step"] = step
            stmt = (update(tasks).where(tasks.c.id == task_id, tasks.c.attempt == attempt,
                                        tasks.c.state == "running").values(**values))
            if (await conn.execute(stmt)).rowcount:
                written.add(task_id)
    events = [{"task_id": task_id, "at": now, "kind": "progress", "state": "running", "attempt": attempt,
               "progress": percent, "step": step, "detail": None}
              for task_id, attempt, percent, step in reports if task_id in written]
    if events:
        await conn.execute(task_events.insert(), events)


async def oldest_due(engine: AsyncEngine, queues: Sequence[str], *, now: float) -> dict[str, float]:
    """Per queue (of those named), the ``run_after`` of its oldest task queued and due — how long work has waited
    for a worker; queues with nothing due are absent. One statement per queue, on the claim index's queue prefix."""
    out: dict[str, float] = {}
    async with engine.connect() as conn:
        for queue in queues:
            oldest = (await conn.execute(select(func.min(tasks.c.run_after)).where(
                tasks.c.queue == queue, tasks.c.state == "queued", tasks.c.run_after <= now))).scalar()
            if oldest is not None:
                out[queue] = float(oldest)
    return out
