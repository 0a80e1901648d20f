"""A SQLite write connection that runs a whole transaction in one thread hop.

Through SQLAlchemy and aiosqlite, one small write transaction crosses from the event loop to the
driver's thread and back about four times (cursor, execute, close, commit), and each crossing waits
for the thread and then for the GIL. A budgeted call waits for its reservation's commit before the
upstream is called (:mod:`hearth.gateway.budget_ledger`), so at concurrency 1 those crossings are
latency every budgeted call pays: measured 0.43 ms per commit against 0.10 ms for the same
``BEGIN IMMEDIATE`` / ``executemany`` / ``COMMIT`` run in one hop on a dedicated thread
(``bench/ledger_commit_bench.py``).

:class:`DirectSqliteWriter` is that one hop: its own ``sqlite3`` connection (the same pragmas as
:func:`hearth.store.db.create_engine`'s), used from one dedicated thread only. Statements and
parameters come from :func:`hearth.store.rows_insert.driver_statement`, so the SQL and the stored
values are exactly what SQLAlchemy would write. Callers still hold the process's write lane
(:func:`hearth.store.db.write_lane`), so this connection and the engine's never meet inside SQLite.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from sqlalchemy import Table
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.rows_insert import driver_statement


class CommitUncertain(Exception):
    """``COMMIT`` itself failed: the transaction may or may not be durable."""


class DirectSqliteWriter:
    """Insert batches into a SQLite file, one transaction per thread hop (see the module docstring)."""

    def __init__(self, engine: AsyncEngine, path: str, *, busy_timeout_s: float = 30.0) -> None:
        self._dialect = engine.dialect
        self._path = path
        self._busy_timeout_s = busy_timeout_s
        self._conn: sqlite3.Connection | None = None  # touched only on the executor's thread
        self._executor: ThreadPoolExecutor | None = None  # started by the first transaction, ended by close()

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
        """Run each ``(sql, parameter rows)`` as an ``executemany``, all in one transaction and one thread hop
        (the request log's rows and their rollups, say). Raises like :meth:`insert`."""
        if not statements:
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hearth-sqlite-writer")
        await asyncio.get_running_loop().run_in_executor(self._executor, self._transaction, statements)

    @property
    def dialect(self) -> Any:
        """The engine's dialect (what :func:`hearth.store.rows_insert.driver_statement` compiles for)."""
        return self._dialect

    async def close(self) -> None:
        """Close the connection and end the thread, after a transaction in progress (a later
        :meth:`insert` starts afresh)."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        await asyncio.get_running_loop().run_in_executor(executor, self._close)
        executor.shutdown(wait=False)

    # ---- on the writer's thread ---------------------------------------------------------------------
    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._path, timeout=self._busy_timeout_s, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
        self._conn = conn
        return conn

    def _transaction(self, statements: Sequence[tuple[str, list[Any]]]) -> None:
        conn = self._conn or self._open()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for sql, params in statements:
                    conn.executemany(sql, params)
            except BaseException:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
                raise
        except sqlite3.Error:
            self._close()  # the next transaction starts on a fresh connection
            raise
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._close()
            raise CommitUncertain(type(exc).__name__) from exc

    def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(sqlite3.Error):
                conn.close()
