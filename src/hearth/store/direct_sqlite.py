"""A SQLite writer that runs a whole transaction in one step: on the event loop when it can, else in one thread hop.

Through SQLAlchemy and aiosqlite, one small write transaction crosses from the event loop to the
driver's thread and back about four times (cursor, execute, close, commit), and each crossing waits
for the thread and then for the GIL. A budgeted call waits for its reservation's commit before the
upstream is called (:mod:`hearth.gateway.budget_ledger`), so at concurrency 1 those crossings are
latency every budgeted call pays: measured 0.43 ms per commit against 0.10 ms for the same
``BEGIN IMMEDIATE`` / ``executemany`` / ``COMMIT`` run in one hop on a dedicated thread
(``bench/ledger_commit_bench.py``).

:class:`DirectSqliteWriter` is that one step, with ``sqlite3`` connections of its own (the same pragmas as
:func:`hearth.store.db.create_engine`'s). :meth:`DirectSqliteWriter.run` commits a small transaction right on
the event loop when no transaction of this process holds the write lane and SQLite's lock is free at once
(:meth:`~DirectSqliteWriter.try_now`); otherwise it takes the process's write lane
(:func:`hearth.store.db.write_lane`) and hops to its dedicated thread, so its connections and the engine's
never meet inside SQLite. Statements and parameters come from
:func:`hearth.store.rows_insert.driver_statement`, so the SQL and the stored values are exactly what
SQLAlchemy would write.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import write_lane, write_lane_free
from hearth.store.rows_insert import driver_statement

_IN_LOOP_ROWS = 500  # a transaction of up to this many rows may run on the event loop (try_now): a few ms at most,
# less than the hops it saves; a larger one goes to the thread
_BUSY = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, 261, 517})  # and BUSY_RECOVERY, BUSY_SNAPSHOT
_CHECKPOINT_ROWS = 2_000  # rows written by try_now between checkpoints (a request-log row and its index
# entries are a few pages at most, so this is about SQLite's own 1,000-page automatic checkpoint)


def _connect(path: str, *, busy_timeout_s: float) -> sqlite3.Connection:
    """A connection with :func:`hearth.store.db.create_engine`'s pragmas."""
    conn = sqlite3.connect(path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
    except sqlite3.Error:
        conn.close()
        raise
    return conn


class CommitUncertain(Exception):
    """``COMMIT`` itself failed: the transaction may or may not be durable."""


def _execute_and_commit(conn: sqlite3.Connection, statements: Sequence[tuple[str, list[Any]]],
                        drop: Callable[[], None], *, give_up_when_busy: bool = False) -> bool:
    """After ``BEGIN IMMEDIATE``: each ``(sql, parameter rows)`` as an ``executemany``, then ``COMMIT``; True once
    committed. A statement the driver refuses rolls everything back and raises its error; a failed ``COMMIT``
    raises :class:`CommitUncertain`. After either, ``drop`` closes the connection: the next transaction starts
    afresh. ``give_up_when_busy`` (a connection that never waits for a lock): SQLite answering "busy" instead
    rolls back and returns False, nothing written (SQLite keeps a transaction open after a busy ``COMMIT``)."""
    try:
        for sql, params in statements:
            conn.executemany(sql, params)
    except BaseException as exc:
        _rollback(conn)
        if give_up_when_busy and _is_busy(exc):
            return False
        if isinstance(exc, sqlite3.Error):
            drop()
        raise
    try:
        conn.execute("COMMIT")
    except sqlite3.Error as exc:
        if give_up_when_busy and _is_busy(exc):
            _rollback(conn)
            return False
        drop()
        raise CommitUncertain(type(exc).__name__) from exc
    return True


def _rollback(conn: sqlite3.Connection) -> None:
    with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")


def _is_busy(exc: BaseException) -> bool:
    return isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode in _BUSY


class DirectSqliteWriter:
    """Insert batches into a SQLite file, one transaction per thread hop (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, path: str, *, busy_timeout_s: float = 30.0) -> None:
        self._engine = engine
        self._dialect = engine.dialect
        self._path = path
        self._busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None  # touched only on the executor's thread
        self._executor: ThreadPoolExecutor | None = None  # started by the first transaction, ended by close()
        self._now_conn: sqlite3.Connection | None = None  # touched only on the event loop's thread (try_now)
        self._rows_at_checkpoint = 0  # try_now's connection's total_changes when it last asked for a checkpoint
        self._checkpointing: asyncio.Future[None] | None = None
        self.now_transactions = 0  # committed by try_now, on the caller's thread
        self.now_busy = 0  # try_now found the write lock taken and wrote nothing

    @classmethod
    def for_engine(cls, engine: AsyncEngine, *, busy_timeout_s: float = 30.0) -> DirectSqliteWriter | None:
        """A writer on ``engine``'s database file, or None when it is not a plain SQLite file (PostgreSQL,
        an in-memory database, a URI with options): its callers then write through the engine."""
        url = engine.url
        if engine.dialect.name != "sqlite" or url.query or not url.database or url.database == ":memory:" \
                or url.database.startswith("file:"):
            return None
        return cls(engine, url.database, busy_timeout_s=busy_timeout_s)

    async def insert(self, table: Table, rows: Sequence[dict[str, Any]]) -> None:
        """Insert ``rows`` (each with a value for every column but an autoincrement key) in one
        transaction. Raises the driver's error if it was not committed, :class:`CommitUncertain` if it
        may have been."""
        if rows:
            await self.run([driver_statement(table, self._dialect, rows)])

    async def run(self, statements: Sequence[tuple[str, list[Any]]]) -> None:
        """Run each ``(sql, parameter rows)`` as an ``executemany``, all in one transaction (the request log's
        rows and their rollups, say): on the event loop when it is small and nothing waits for the write
        lane or holds SQLite's lock, else in the write lane on the writer's thread. Raises like :meth:`insert`."""
        if not statements:
            return
        if sum(len(params) for _, params in statements) <= _IN_LOOP_ROWS and write_lane_free(self._engine) \
                and self.try_now(statements):
            return
        async with write_lane(self._engine):
            await asyncio.get_running_loop().run_in_executor(self._thread(), self._transaction, statements)

    def _thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hearth-sqlite-writer")
        return self._executor

    def try_now(self, statements: Sequence[tuple[str, list[Any]]]) -> bool:
        """Run the transaction right here, on the calling thread, if SQLite's write lock is free at once:
        True once committed; False if another connection holds the lock (nothing was written). Raises like
        :meth:`insert`. The caller makes sure no transaction of this process is open (:meth:`run` does).

        Why on the event loop's thread: a small transaction (a reservation group, a batch of a few
        hundred rows) costs the loop less than handing it to a thread. Under load the loop always holds
        the GIL, so the writer thread waits for it at every step of the transaction, and the transaction
        (with the SQLite lock and the process's write lane) lasts many times its own work; every call
        waiting on a reservation waits for that. Never waits for a lock (``busy_timeout`` 0) and never
        checkpoints here (the WAL is checkpointed on the writer's thread, see :meth:`_maybe_checkpoint`),
        so it never blocks the loop on another connection or on an ``fsync``."""
        if not statements:
            return True
        try:
            conn = self._now_conn or self._open_now()
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            if _is_busy(exc):
                self.now_busy += 1
                return False
            self._close_now()
            raise
        if not _execute_and_commit(conn, statements, self._close_now, give_up_when_busy=True):
            self.now_busy += 1
            return False
        self.now_transactions += 1
        self._maybe_checkpoint(conn.total_changes)
        return True

    @property
    def dialect(self) -> Any:
        """The engine's dialect (what :func:`hearth.store.rows_insert.driver_statement` compiles for)."""
        return self._dialect

    async def close(self) -> None:
        """Close the connection and end the thread, after a transaction in progress (a later
        :meth:`insert` starts afresh)."""
        self._close_now()
        executor, self._executor = self._executor, None
        if executor is None:
            return
        await asyncio.get_running_loop().run_in_executor(executor, self._close)
        executor.shutdown(wait=False)

    # ---- on the event loop's thread (try_now) -------------------------------------------------------
    def _open_now(self) -> sqlite3.Connection:
        conn = _connect(self._path, busy_timeout_s=0.0)
        try:
            conn.execute("PRAGMA wal_autocheckpoint=0")
        except sqlite3.Error:
            conn.close()
            raise
        self._now_conn = conn
        self._rows_at_checkpoint = 0
        return conn

    def _close_now(self) -> None:
        conn, self._now_conn = self._now_conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()

    def _maybe_checkpoint(self, total_changes: int) -> None:
        """Ask the writer's thread for a passive checkpoint about every :data:`_CHECKPOINT_ROWS` rows written
        here: what SQLite's automatic checkpoint would do inside the committing connection, with its
        writes and ``fsync``, but off the event loop. A passive checkpoint takes no lock writers wait for."""
        if total_changes - self._rows_at_checkpoint < _CHECKPOINT_ROWS or self._checkpointing is not None:
            return
        self._rows_at_checkpoint = total_changes
        done = asyncio.get_running_loop().run_in_executor(self._thread(), self._checkpoint)
        self._checkpointing = done
        done.add_done_callback(self._checkpointed)

    def _checkpointed(self, done: asyncio.Future[None]) -> None:
        self._checkpointing = None
        if not done.cancelled():
            done.exception()  # a failed checkpoint is retried by the next one; the rows are in the WAL

    # ---- on the writer's thread ---------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        self._conn = _connect(self._path, busy_timeout_s=self._busy_timeout_s)
        return self._conn

    def _checkpoint(self) -> None:
        conn = self._conn or self._open()
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            self._close()
            raise

    def _transaction(self, statements: Sequence[tuple[str, list[Any]]]) -> None:
        conn = self._conn or self._open()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error:
            self._close()  # the next transaction starts on a fresh connection
            raise
        _execute_and_commit(conn, statements, self._close)

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
