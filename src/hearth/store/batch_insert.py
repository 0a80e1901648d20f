"""Insert a batch so that one row the database refuses never costs the other rows: bisect, dead-letter.

Batch writers (request logs, the budget ledger) insert many callers' rows in one statement. When the
database refuses that statement because of one row's data, :func:`insert_isolating` splits the batch
in halves until it finds the refused row(s), writes every other row, and records the refused ones in
``dead_rows``. When the database is *unavailable* (down, unreachable, locked, a schema it does not
have yet) nothing is split and nothing is dead-lettered: the rows are handed back to be retried.

What each failure means was checked against both drivers (tests/store/test_batch_insert.py):

* **refused (bad row)** — SQLAlchemy ``IntegrityError`` / ``DataError``; a PostgreSQL SQLSTATE of
  class 22 (data exception: asyncpg's client-side "value out of int32 range", "value too long for
  type character varying", a NUL character), 23 (integrity) or 54 (program limit, e.g. an index
  row too large) — asyncpg surfaces most of these as a plain ``DBAPIError``, not ``DataError``;
  ``StatementError`` from a bind processor (``TypeError``/``ValueError``/``OverflowError``) and
  such errors raised bare (sqlite3 raises ``OverflowError`` for an integer beyond int64 and
  ``UnicodeEncodeError`` for a lone surrogate without SQLAlchemy wrapping them).
* **unavailable (retry later)** — an invalidated connection, ``OperationalError`` (SQLite's
  "database is locked", "no such table"), ``InterfaceError``, ``DisconnectionError``, the pool's
  ``TimeoutError``, any ``OSError`` (connection refused, timeouts); SQLSTATE classes 08
  (connection), 25 (e.g. a read-only standby), 40 (serialization, deadlock), 42 (undefined
  table or column, permissions: not the row's fault), 53 (resources), 55 (lock not available),
  57 (statement timeout, admin shutdown), 58 (system error).
* anything else (sqlite3's ``ProgrammingError`` for an unbindable value, SQLSTATE XX000, …) is
  decided by a probe: if a trivial query on the table succeeds the statement failed because of
  its data (refused, so bisected); if the probe fails too the database is unavailable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from sqlalchemy import Table, literal, select
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    StatementError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.observability.logging import get_logger, scrub
from hearth.store.db import write_transaction
from hearth.store.direct_sqlite import CommitUncertain, DirectSqliteWriter
from hearth.store.rows_insert import driver_statement, insert_rows
from hearth.store.tables import dead_rows

log = get_logger("hearth.batch_insert")

_REFUSED_SQLSTATE = frozenset({"22", "23", "54"})
_UNAVAILABLE_SQLSTATE = frozenset({"08", "25", "40", "42", "53", "55", "57", "58"})
_ERROR_CHARS = 500
_PAYLOAD_CHARS = 16_000
_VALUE_CHARS = 2_000  # a longer string value is cut in the payload, so the JSON stays whole

_REFUSED, _UNAVAILABLE, _UNKNOWN = "refused", "unavailable", "unknown"


@dataclass(frozen=True, slots=True)
class InsertOutcome:
    """What :func:`insert_isolating` did with each row: exactly one of written, dead, lost or retry."""

    written: int = 0  # committed into the table
    dead: int = 0  # refused by the database and recorded in ``dead_rows``
    lost: int = 0  # refused, and recording it in ``dead_rows`` failed too (one log line each)
    retry: list[dict[str, Any]] = field(default_factory=list)  # not written: the database was unavailable
    error: str | None = None  # class name of the last failure met, None if the batch went in at once

    @property
    def unavailable(self) -> bool:
        """True when some rows were handed back because the database was unavailable (retry later)."""
        return bool(self.retry)


async def insert_isolating(engine: AsyncEngine, table: Table, rows: Sequence[dict[str, Any]], *, writer: str,
                           row_key: str,
                           also: Callable[[AsyncConnection, Sequence[dict[str, Any]]], Awaitable[None]] | None = None,
                           one_hop: OneHop | None = None) -> InsertOutcome:
    """Insert ``rows`` into ``table``; isolate the rows the database refuses; never raise for a row.

    The whole batch is tried in one transaction first (the usual case costs nothing more). If the
    database *refuses* it (see the module docstring for which errors mean that), the batch is
    split in halves, each half in its own transaction, down to single rows: every acceptable row
    is written, each refused row goes to ``dead_rows`` (``writer``, the row's ``row_key`` value,
    the error class and the start of its message, the row as JSON). One bad row in a batch of
    ``n`` costs about ``2·log2(n)`` extra transactions.

    If the database is *unavailable* at any point, nothing more is tried: the rows not yet
    written are returned in :attr:`InsertOutcome.retry` — the very dict objects passed in, in
    their original order — for the caller to insert again later (with a backoff); they are
    neither split further nor dead-lettered. Halves committed before the outage stay written.
    A row whose commit was interrupted (connection lost during ``COMMIT``) has an unknown outcome
    and is handed back too: a retry may then write it twice, or — under a unique constraint —
    be refused and dead-lettered as a duplicate of the row already there.

    If recording a refused row in ``dead_rows`` fails because the database is unavailable, the
    row is handed back in ``retry``; if it fails for any other reason, one error line with the
    row's key and the error class is logged and the row is counted in ``lost``.

    ``CancelledError`` is not caught: a writer cancelled mid-call loses the rows in flight.

    ``one_hop`` (a SQLite file): the whole batch — and what ``also`` writes, as ``one_hop.also`` gives it — is
    first tried as one transaction in one hop to a writer thread (:class:`OneHop`); only if that fails does
    the batch take the way described above.

    ``also`` runs in each chunk's transaction after its insert, with the chunk's rows (the request-log
    rollups): what it writes commits with them or not at all, and an error it raises counts as the chunk's.
    """
    if not rows:
        return InsertOutcome()
    if one_hop is not None:
        done = await one_hop.insert(engine, table, rows)
        if done is not None:
            return done
    written = 0
    error: str | None = None
    refused: list[tuple[dict[str, Any], BaseException]] = []
    retry: list[dict[str, Any]] = []
    stack: list[Sequence[dict[str, Any]]] = [rows]  # the next chunk to try is on top; order is kept
    while stack:
        chunk = stack.pop()
        try:
            async with write_transaction(engine) as conn:
                await insert_rows(conn, table, chunk)
                if also is not None:
                    await also(conn, chunk)
        except Exception as exc:
            error = type(exc).__name__
            if await _classify(engine, table, exc) == _UNAVAILABLE:
                retry = [*chunk, *(row for pending in reversed(stack) for row in pending)]
                break
            if len(chunk) == 1:
                refused.append((chunk[0], exc))
            else:
                mid = len(chunk) // 2
                stack.append(chunk[mid:])
                stack.append(chunk[:mid])
            continue
        written += len(chunk)
    dead = lost = 0
    if refused:
        log.warning("batch_rows_refused", writer=writer, table=table.name, rows=len(refused),
                    error=type(refused[0][1]).__name__)
        dead, lost, again = await _dead_letter(engine, table, refused, writer, row_key=row_key)
        if again:
            retry = again + retry
    if retry:
        log.warning("batch_insert_unavailable", writer=writer, table=table.name, rows=len(retry), error=error)
    elif one_hop is not None and error is None:
        one_hop.usable = True  # the database takes whole batches again
    return InsertOutcome(written=written, dead=dead, lost=lost, retry=retry, error=error)


#: What else a one-hop batch writes in its transaction: ``(sql, parameter rows)`` for the batch's rows.
AlsoStatements = Callable[[Dialect, Sequence[dict[str, Any]]], list[tuple[str, list[Any]]]]


class OneHop:
    """A batch writer's fast way on a SQLite file: the batch (and its ``also`` statements) in one transaction and
    one hop to a :class:`~hearth.store.direct_sqlite.DirectSqliteWriter`'s thread, in the process's write lane.

    Through SQLAlchemy and aiosqlite a batch crossed between the event loop and the driver's thread a dozen
    times, each crossing waiting for a busy loop, while it held the write lane — which a budgeted call's
    reservation commit waits for (measured at concurrency 64: the lane held 54 ms at p90 by request-log
    batches, reservations waiting 50 ms at p50). After a failure (a refused row, a locked or missing database)
    it stands aside until :func:`insert_isolating`'s general way writes a whole batch again.
    """

    def __init__(self, direct: DirectSqliteWriter, also: AlsoStatements | None = None) -> None:
        self.direct = direct
        self.also = also
        self.usable = True
        self.batches = 0  # written this way

    @classmethod
    def for_engine(cls, engine: AsyncEngine, *, also: AlsoStatements | None = None,
                   busy_timeout_s: float = 1.0) -> OneHop | None:
        """None unless ``engine`` is on a plain SQLite file. The busy timeout is short: a database locked that
        long is unusual, and the general way (with the engine's own timeout) then takes over."""
        direct = DirectSqliteWriter.for_engine(engine, busy_timeout_s=busy_timeout_s)
        return cls(direct, also) if direct is not None else None

    async def insert(self, engine: AsyncEngine, table: Table, rows: Sequence[dict[str, Any]]) -> InsertOutcome | None:
        """The outcome, or None when the general way must write the batch (nothing was written)."""
        if not self.usable:
            return None
        dialect = self.direct.dialect
        try:
            statements = [driver_statement(table, dialect, rows), *(self.also(dialect, rows) if self.also else ())]
        except (ValueError, TypeError, KeyError):
            return None  # a row it cannot bind: the general way finds it (this way stays usable)
        try:
            await self.direct.run(statements)
        except CommitUncertain as exc:  # as the general way does: hand the rows back (a retry may repeat them)
            return InsertOutcome(retry=list(rows), error=f"CommitUncertain: {exc}")
        except Exception:  # rolled back, nothing written: the general way tries again and tells why
            self.usable = False
            await self.direct.close()  # a fresh connection next time
            return None
        self.batches += 1
        return InsertOutcome(written=len(rows))

    async def close(self) -> None:
        await self.direct.close()


async def _classify(engine: AsyncEngine, table: Table, exc: BaseException) -> str:
    kind = _kind(exc)
    if kind != _UNKNOWN:
        return kind
    try:  # is it the data, or the database? A trivial query on the same table tells.
        async with engine.connect() as conn:
            await conn.execute(select(literal(1)).select_from(table).limit(0))
    except Exception:
        return _UNAVAILABLE
    return _REFUSED


def _kind(exc: BaseException) -> str:
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return _UNAVAILABLE
    orig = getattr(exc, "orig", None)
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        if sqlstate[:2] in _REFUSED_SQLSTATE:
            return _REFUSED
        if sqlstate[:2] in _UNAVAILABLE_SQLSTATE:
            return _UNAVAILABLE
        return _UNKNOWN
    if isinstance(exc, IntegrityError | DataError):
        return _REFUSED
    if isinstance(exc, OperationalError | InterfaceError | DisconnectionError | PoolTimeoutError | OSError):
        return _UNAVAILABLE
    if isinstance(exc, DBAPIError):
        return _UNKNOWN
    if isinstance(exc, StatementError):  # raised while binding parameters: a value of one row
        return _REFUSED if isinstance(orig, TypeError | ValueError | OverflowError) else _UNKNOWN
    if isinstance(exc, TypeError | ValueError | OverflowError):
        return _REFUSED
    return _UNKNOWN


async def _dead_letter(engine: AsyncEngine, table: Table, refused: list[tuple[dict[str, Any], BaseException]],
                       writer: str, *, row_key: str) -> tuple[int, int, list[dict[str, Any]]]:
    """Record refused rows in ``dead_rows``: (recorded, lost, handed back because the database is unavailable)."""
    now = datetime.now(UTC)
    entries = [{"writer": writer[:32], "row_key": _key(row.get(row_key)), "error": describe_error(exc),
                "payload": _payload(row), "created_at": now} for row, exc in refused]
    try:
        async with write_transaction(engine) as conn:
            await conn.execute(dead_rows.insert(), entries)
        return len(entries), 0, []
    except Exception as exc:
        if await _classify(engine, dead_rows, exc) == _UNAVAILABLE:
            return 0, 0, [row for row, _ in refused]
    recorded = lost = 0
    for entry in entries:  # one by one, so one entry that cannot be recorded costs only itself
        try:
            async with write_transaction(engine) as conn:
                await conn.execute(dead_rows.insert(), [entry])
            recorded += 1
        except Exception as exc:
            lost += 1
            log.error("dead_row_not_recorded", writer=writer, table=table.name, row_key=entry["row_key"],
                      error=type(exc).__name__)
    return recorded, lost, []


def describe_error(exc: BaseException) -> str:
    """``Class: message`` — the driver's message (not SQLAlchemy's SQL and parameters), first 500 chars, scrubbed."""
    inner = getattr(exc, "orig", None) if isinstance(exc, StatementError) else None
    message = " ".join(str(inner if inner is not None else exc).split())
    return _text(str(scrub(f"{type(exc).__name__}: {message}"[:_ERROR_CHARS])))


def _key(value: Any) -> str | None:
    if value is None:
        return None
    return _text((value if isinstance(value, str) else repr(value))[:128])


def _text(value: str) -> str:
    """Text any database accepts: no lone surrogate, no NUL (PostgreSQL refuses both)."""
    if not value.isascii():
        value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


def _payload(row: dict[str, Any]) -> str:
    """The row as JSON text: datetimes as ISO strings, long strings cut, other odd values as ``repr``."""
    safe = {str(k): _json_value(v) for k, v in row.items()}
    text = json.dumps(safe, ensure_ascii=False, allow_nan=False)
    if len(text) > _PAYLOAD_CHARS:
        text = text[:_PAYLOAD_CHARS]
    return _text(str(scrub(text)))


def _json_value(value: Any, depth: int = 0) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        value = _text(value)  # a lone surrogate or a NUL would be refused again
        return value if len(value) <= _VALUE_CHARS else value[:_VALUE_CHARS] + f"…(+{len(value) - _VALUE_CHARS})"
    if isinstance(value, datetime | date):
        return value.isoformat()
    if depth < 4 and isinstance(value, list | tuple):
        return [_json_value(v, depth + 1) for v in value[:100]]
    if depth < 4 and isinstance(value, dict):
        return {str(k)[:_VALUE_CHARS]: _json_value(v, depth + 1) for k, v in list(value.items())[:100]}
    return _json_value(repr(value), depth)
