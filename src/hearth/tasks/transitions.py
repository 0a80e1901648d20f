"""Every change of a task's state, in one place: checked against the state machine, fenced, recorded.

:func:`apply` writes a batch of :class:`Move` s in the caller's transaction. Each move's UPDATE carries
its own guard — the row's current state must be one the target state may come from
(:data:`hearth.tasks.states.ALLOWED_FROM`) and, for a worker's write, the row's attempt must be the
worker's — so a stale worker, a late reaper and an operator racing each other cannot overwrite a newer
attempt or a finished task: their moves simply do not match. Each move that matched gets its event
(``task_events``), and a move that ends an attempt gets the attempt's row (``task_attempts``).

Claiming (``queued → running``) is the same kind of move made for many rows by one statement; it lives
in :mod:`hearth.tasks.queue` and records its events through :func:`record_events`.

On PostgreSQL a batch of moves of the same shape is one ``UPDATE … FROM unnest(…)`` statement; on
SQLite (in-process, no round trips) one UPDATE per move.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy import Table, bindparam, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.sql.elements import BindParameter, TextClause

from hearth.store.tables import task_attempts, task_events, tasks
from hearth.tasks.states import ALLOWED_FROM, TERMINAL, IllegalTransition

# What a move returns about each task it changed: enough for dead letters and callbacks.
RETURNED = ("id", "attempt", "task_type", "queue", "caller", "callback_url", "error_code", "failure_stage",
            "replay_of")
BULK_ROWS = 128  # moves per UPDATE … FROM unnest statement (see _chunks)
PG_ARRAY_TYPES = {"String": "text", "Text": "text", "Integer": "int", "BigInteger": "bigint", "Float": "float8",
             "Boolean": "bool", "JSON": "text"}


@dataclass(frozen=True, slots=True)
class AttemptEnd:
    """The end of an attempt, for its ``task_attempts`` row."""

    outcome: str  # succeeded | failed | retry | lease_expired | killed | hold | handed_back
    worker: str | None
    started_at: float
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class Move:
    """Move task ``task_id`` to state ``to``.

    ``attempt`` fences a worker's move (the row must still be on that attempt); ``None`` is an
    operator's or the API's move, guarded by the state check alone. ``values`` are the other columns
    to set; ``detail`` goes into the event; ``ended`` records the attempt this move ends.
    """

    task_id: str
    to: str
    attempt: int | None = None
    values: Mapping[Any, Any] = field(default_factory=dict)
    detail: Mapping[Any, Any] | None = None
    ended: AttemptEnd | None = None
    only_from: frozenset[str] | None = None  # narrows the states the move may come from (a subset of the rule)


@dataclass(frozen=True, slots=True)
class Moved:
    """A move that happened: the task's new state and the returned columns."""

    move: Move
    row: Mapping[Any, Any]

    @property
    def terminal(self) -> bool:
        return self.move.to in TERMINAL


async def apply(conn: AsyncConnection, moves: Sequence[Move], *, now: float) -> list[Moved]:
    """Write ``moves``; return those whose guard matched (the others were stale or illegal right now)."""
    for move in moves:
        if move.to not in ALLOWED_FROM:
            raise IllegalTransition(f"no task state {move.to!r}")
    groups: dict[tuple[str, bool, tuple[str, ...], frozenset[str] | None], list[Move]] = {}
    for move in moves:
        key = (move.to, move.attempt is not None, tuple(sorted(move.values)), move.only_from)
        groups.setdefault(key, []).append(move)
    moved: list[Moved] = []
    for (to, fenced, columns, only_from), group in groups.items():
        if conn.dialect.name == "postgresql" and len(group) > 1:
            for chunk in _chunks(group):
                moved += await _bulk_update(conn, chunk, to=to, fenced=fenced, columns=columns, now=now,
                                            only_from=only_from)
        else:
            for move in group:
                row = await _update_one(conn, move, columns=columns, now=now)
                if row is not None:
                    moved.append(Moved(move, row))
    await record_events(conn, [_event(m.move, m.row["attempt"], now) for m in moved])
    await insert_rows(conn, task_attempts, [_attempt_row(m.move, m.row["attempt"], now)
                                            for m in moved if m.move.ended is not None])
    return moved


async def apply_in_one_statement(conn: AsyncConnection, moves: Sequence[Move], *, now: float) -> list[Moved]:
    """PostgreSQL: :func:`apply` for fenced moves (a worker's), each group of one shape written with its events
    and attempt rows in ONE statement — on an autocommit connection, one round trip for a whole batch.

    Same guard and the same rows as :func:`apply`; nothing else happens in the statement, so it suits only moves
    whose :func:`hearth.tasks.terminal.follows_up` is False."""
    if any(m.attempt is None for m in moves):
        raise ValueError("apply_in_one_statement takes fenced moves only")
    groups: dict[tuple[str, tuple[str, ...], frozenset[str] | None], list[Move]] = {}
    for move in moves:
        if move.to not in ALLOWED_FROM:
            raise IllegalTransition(f"no task state {move.to!r}")
        groups.setdefault((move.to, tuple(sorted(move.values)), move.only_from), []).append(move)
    moved: list[Moved] = []
    for (to, columns, only_from), group in groups.items():
        for chunk in _chunks(group):
            moved += await _update_recorded(conn, chunk, to=to, columns=columns, now=now, only_from=only_from)
    return moved


def _chunks(moves: list[Move]) -> list[list[Move]]:
    """Batches of at most BULK_ROWS moves: PostgreSQL may join the unnest with the rows it matches by a nested loop
    (the estimate of running tasks is usually tiny), which costs batch² comparisons — 16.7 M and 8.6 s for one
    write of 4,096 when the statement also let it scan every running task; ``t.id = ANY(ids)`` keeps it to the
    batch's own rows, and the batch bound keeps batch² small."""
    return [moves[i:i + BULK_ROWS] for i in range(0, len(moves), BULK_ROWS)]


async def apply_now(engine: AsyncEngine, moves: Sequence[Move], *, now: float) -> list[Moved]:
    """:func:`apply_in_one_statement` on its own autocommit connection: no BEGIN, no COMMIT round trip."""
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        return await apply_in_one_statement(conn, moves, now=now)


_EXTRA = {"e_progress": "int", "e_step": "text", "e_detail": "text", "w_worker": "text", "w_started": "float8",
          "w_outcome": "text", "w_code": "text", "w_message": "text"}


@functools.lru_cache(maxsize=256)
def _update_recorded_sql(to: str, columns: tuple[str, ...], only_from: frozenset[str] | None) -> TextClause:
    """The statement of :func:`_update_recorded` for one shape of move (built and parsed once: a worker writes the
    same few shapes all the time)."""
    names = ["id", "attempt", *columns]
    arrays = [f"CAST(:a_{n} AS {_array_type(n)}[])" for n in names]
    arrays += [f"CAST(:{n} AS {t}[])" for n, t in _EXTRA.items()]
    returned = ", ".join([*(f"t.{c}" for c in RETURNED), *(f"v.{n}" for n in _EXTRA)])
    return text(
        f"WITH moved AS (UPDATE tasks AS t SET {_set_clause(columns, 'v.')} FROM unnest({', '.join(arrays)}) "
        f"AS v({', '.join([*names, *_EXTRA])}) WHERE t.id = v.id AND t.id = ANY(:a_id) "
        f"AND t.state IN ({_from_states(to, only_from)}) AND t.attempt = v.attempt RETURNING {returned}), "
        "ev AS (INSERT INTO task_events (task_id, at, kind, state, attempt, progress, step, detail) "
        "SELECT id, :now, 'state', :to, attempt, e_progress, e_step, CAST(e_detail AS json) FROM moved), "
        "att AS (INSERT INTO task_attempts (task_id, attempt, worker, started_at, finished_at, outcome, error_code, "
        "error_message) SELECT id, attempt, w_worker, w_started, :now, w_outcome, w_code, w_message FROM moved "
        f"WHERE w_outcome IS NOT NULL) SELECT {', '.join(RETURNED)} FROM moved")


async def _update_recorded(conn: AsyncConnection, group: list[Move], *, to: str, columns: tuple[str, ...], now: float,
                           only_from: frozenset[str] | None) -> list[Moved]:
    sql = _update_recorded_sql(to, columns, only_from)
    events = [_event(m, m.attempt or 0, now) for m in group]
    attempts = [_attempt_row(m, m.attempt or 0, now) if m.ended is not None else None for m in group]
    params: dict[str, Any] = {
        "to": to, "now": now, "a_id": [m.task_id for m in group], "a_attempt": [m.attempt for m in group],
        "e_progress": [e["progress"] for e in events], "e_step": [e["step"] for e in events],
        "e_detail": [_json_text(e["detail"]) for e in events],
        "w_worker": [a and a["worker"] for a in attempts], "w_started": [a and a["started_at"] for a in attempts],
        "w_outcome": [a and a["outcome"] for a in attempts], "w_code": [a and a["error_code"] for a in attempts],
        "w_message": [a and a["error_message"] for a in attempts]}
    for col in columns:
        is_json = type(tasks.c[col].type).__name__ == "JSON"
        params[f"a_{col}"] = [_json_text(m.values[col]) if is_json else m.values[col] for m in group]
    rows = (await conn.execute(sql, params)).mappings().all()
    by_id = {m.task_id: m for m in group}
    return [Moved(by_id[r["id"]], r) for r in rows]


async def record_events(conn: AsyncConnection, events: Sequence[Mapping[Any, Any]]) -> None:
    await insert_rows(conn, task_events, events)


async def insert_rows(conn: AsyncConnection, table: Table, rows: Sequence[Mapping[Any, Any]]) -> None:
    """Insert ``rows`` (dicts with the same keys); on PostgreSQL several at once as one ``INSERT … SELECT FROM
    unnest(arrays)`` — a batch's parameters go as one array per column, not one bind per value."""
    if not rows:
        return
    if conn.dialect.name != "postgresql" or len(rows) == 1:
        await conn.execute(table.insert(), list(rows))
        return
    source, params = unnest_source(table, rows)
    await conn.execute(text(f"INSERT INTO {table.name} ({', '.join(rows[0])}) {source}"), params)


def unnest_source(table: Table, rows: Sequence[Mapping[Any, Any]]) -> tuple[str, dict[str, Any]]:
    """``SELECT … FROM unnest(arrays)`` producing ``rows`` (dicts with the same keys, in column order of the
    first) as ``table``'s column types, and its parameters: one array per column (JSON as text)."""
    return unnest_columns(table, {n: [r[n] for r in rows] for n in rows[0]})


def unnest_columns(table: Table, columns: Mapping[str, list[Any]]) -> tuple[str, dict[str, Any]]:
    """:func:`unnest_source` from the columns' values (one list per column, all as long)."""
    names = list(columns)
    json_cols = {n for n in names if type(table.c[n].type).__name__ == "JSON"}
    arrays = ", ".join(f"CAST(:a_{n} AS {PG_ARRAY_TYPES[type(table.c[n].type).__name__]}[])" for n in names)
    picked = ", ".join(f"CAST(v.{n} AS json)" if n in json_cols else f"v.{n}" for n in names)
    params = {f"a_{n}": [_json_text(v) for v in values] if n in json_cols else values
              for n, values in columns.items()}
    return f"SELECT {picked} FROM unnest({arrays}) AS v({', '.join(names)})", params


def state_event(task_id: str, state: str, *, attempt: int, now: float, progress: int | None = None,
                step: str | None = None, detail: Mapping[Any, Any] | None = None) -> dict[str, Any]:
    return {"task_id": task_id, "at": now, "kind": "state", "state": state, "attempt": attempt,
            "progress": progress, "step": step, "detail": dict(detail) if detail else None}


def _event(move: Move, attempt: int, now: float) -> dict[str, Any]:
    detail = dict(move.detail or {})
    if move.values.get("error_code"):
        detail.setdefault("error_code", move.values["error_code"])
    return state_event(move.task_id, move.to, attempt=attempt, now=now, progress=move.values.get("progress"),
                       step=move.values.get("current_step"), detail=detail)


def _attempt_row(move: Move, attempt: int, now: float) -> dict[str, Any]:
    end = move.ended
    assert end is not None
    return {"task_id": move.task_id, "attempt": attempt, "worker": end.worker, "started_at": end.started_at,
            "finished_at": now, "outcome": end.outcome, "error_code": end.error_code,
            "error_message": (end.error_message or "")[:2000] or None}


def _set_clause(columns: tuple[str, ...], source: str) -> str:
    parts = ["state = :to", "updated_at = :now"]
    for col in columns:
        value = f"{source}{col}"
        if source == "v." and type(tasks.c[col].type).__name__ == "JSON":
            value = f"CAST({value} AS json)"
        parts.append(f"{col} = {value}")
    return ", ".join(parts)


def _from_states(to: str, only_from: frozenset[str] | None = None) -> str:
    allowed = ALLOWED_FROM[to] if only_from is None else ALLOWED_FROM[to] & only_from
    return ", ".join(f"'{s}'" for s in sorted(allowed)) or "NULL"


async def _update_one(conn: AsyncConnection, move: Move, *, columns: tuple[str, ...],
                      now: float) -> Mapping[Any, Any] | None:
    fence = " AND attempt = :attempt" if move.attempt is not None else ""
    states = _from_states(move.to, move.only_from)
    sql = (f"UPDATE tasks SET {_set_clause(columns, ':')} WHERE id = :id AND state IN ({states}){fence} "
           f"RETURNING {', '.join(RETURNED)}")
    params: dict[str, Any] = {"to": move.to, "now": now, "id": move.task_id, "attempt": move.attempt}
    for col in columns:
        params[col] = move.values[col]
    return (await conn.execute(text(sql).bindparams(*_json_binds(columns)), params)).mappings().first()


def _json_binds(columns: tuple[str, ...]) -> list[BindParameter[Any]]:
    return [bindparam(c, type_=tasks.c[c].type) for c in columns if type(tasks.c[c].type).__name__ == "JSON"]


async def _bulk_update(conn: AsyncConnection, group: list[Move], *, to: str, fenced: bool, columns: tuple[str, ...],
                       now: float, only_from: frozenset[str] | None) -> list[Moved]:
    names = ["id", "attempt", *columns] if fenced else ["id", *columns]
    arrays = [f"CAST(:a_{n} AS {_array_type(n)}[])" for n in names]
    fence = " AND t.attempt = v.attempt" if fenced else ""
    returned = ", ".join(f"t.{c}" for c in RETURNED)
    sql = (f"UPDATE tasks AS t SET {_set_clause(columns, 'v.')} FROM unnest({', '.join(arrays)}) "
           f"AS v({', '.join(names)}) WHERE t.id = v.id AND t.id = ANY(:a_id) "
           f"AND t.state IN ({_from_states(to, only_from)}){fence} RETURNING {returned}")
    params: dict[str, Any] = {"to": to, "now": now, "a_id": [m.task_id for m in group]}
    if fenced:
        params["a_attempt"] = [m.attempt for m in group]
    for col in columns:
        is_json = type(tasks.c[col].type).__name__ == "JSON"
        params[f"a_{col}"] = [_json_text(m.values[col]) if is_json else m.values[col] for m in group]
    rows = (await conn.execute(text(sql), params)).mappings().all()
    by_id = {m.task_id: m for m in group}
    return [Moved(by_id[r["id"]], r) for r in rows]


def _array_type(name: str) -> str:
    if name == "id":
        return "text"
    return PG_ARRAY_TYPES[type(tasks.c[name].type).__name__]


def _json_text(value: Any) -> str | None:
    return None if value is None else orjson.dumps(value).decode()
