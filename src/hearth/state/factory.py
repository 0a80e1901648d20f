"""Choosing the state backend, and refusing configurations that would be wrong across processes.

The memory backend keeps limits inside one process. Two processes sharing a database but each
with its own memory counters would silently double every limit, so a process using the memory
backend holds an exclusive claim on its database (a file lock next to the SQLite file, or a
PostgreSQL session advisory lock) and a second one is refused at start with a clear message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.settings import Settings
from hearth.state.base import StateBackend
from hearth.state.memory import MemoryState
from hearth.state.quota_day import QuotaDay

_PG_LOCK_ID = 0x48454D53  # "HEMS"


class SingleProcessViolation(SystemExit):
    pass


def create_state(settings: Settings) -> StateBackend:
    if settings.state_backend == "redis":
        from hearth.state.redis import RedisState  # loaded only when configured

        return RedisState(settings.redis_url, settings.redis_prefix, command_timeout_s=settings.state_timeout_s,
                          quota_day=QuotaDay(settings.quota_time_zone))
    return MemoryState(quota_day=QuotaDay(settings.quota_time_zone))


def refuse_memory_with_workers(settings: Settings) -> None:
    if settings.state_backend == "memory" and settings.workers > 1:
        raise SingleProcessViolation(
            "HEARTH_WORKERS > 1 needs HEARTH_STATE_BACKEND=redis: with the memory state backend every "
            "process would keep its own limits and leases, multiplying them.")


class MemoryStateClaim:
    """Held for the life of a process that uses the memory backend."""

    def __init__(self) -> None:
        self._file: IO[str] | None = None
        self._conn: AsyncConnection | None = None

    async def acquire(self, settings: Settings, engine: AsyncEngine) -> None:
        message = ("another Hearth process already uses this database with the memory state backend; "
                   "run several processes with HEARTH_STATE_BACKEND=redis")
        if settings.is_sqlite:
            db_path = settings.database_url.split("///", 1)[-1]
            if db_path in ("", ":memory:"):
                return
            lock_path = Path(db_path + ".memory-state.lock")
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            fh = open(lock_path, "a+")  # noqa: ASYNC230 - a local lock file, held for the process life
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError as exc:
                fh.close()
                raise SingleProcessViolation(message) from exc
            fh.seek(0)
            fh.truncate()
            fh.write(str(os.getpid()))
            fh.flush()
            self._file = fh
            return
        conn = await engine.connect()
        got = (await conn.execute(text("SELECT pg_try_advisory_lock(:id)"), {"id": _PG_LOCK_ID})).scalar()
        await conn.commit()
        if not got:
            await conn.close()
            raise SingleProcessViolation(message)
        self._conn = conn

    async def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None
        if self._conn is not None:
            # A pooled connection outlives close(): unlock explicitly, or the lock stays held.
            await self._conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _PG_LOCK_ID})
            await self._conn.commit()
            await self._conn.close()
            self._conn = None
