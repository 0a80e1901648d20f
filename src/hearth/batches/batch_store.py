"""The ``batches`` and ``batch_items`` tables: a batch's status, counters and files; one row per answered line.

Status moves (OpenAI's): ``validating → in_progress → finalizing → completed``; ``validating → failed`` (the
input file is wrong); ``in_progress → finalizing → expired`` (the completion window passed);
``validating | in_progress → cancelling → cancelled``. Every move names the statuses it may come from, so two
processes (a cancel and the executor) never both win.

Exactly once: a line's answer is an INSERT keyed by (batch, line) that a second answer cannot repeat (ON CONFLICT
DO NOTHING), in the same transaction as the counters it adds to (answers arriving together share one transaction:
:class:`AnswerWriter`). The output files are assembled from these rows,
so whatever ran twice (a call in flight when its worker died), each line appears once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.batches.keyset import owned_page
from hearth.clock import Clock
from hearth.store.db import write_transaction
from hearth.store.tables import batch_items as _items
from hearth.store.tables import batches as _t

ACTIVE = frozenset({"validating", "in_progress", "finalizing", "cancelling"})
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})
_TIMESTAMPS = ("created_at", "in_progress_at", "expires_at", "finalizing_at", "completed_at", "failed_at",
               "expired_at", "cancelling_at", "cancelled_at")
_READ_CHUNK = 2000


@dataclass(frozen=True, slots=True)
class Batch:
    row: Mapping[Any, Any]

    @property
    def id(self) -> str:
        return str(self.row["id"])

    @property
    def status(self) -> str:
        return str(self.row["status"])

    @property
    def caller(self) -> str:
        return str(self.row["caller"])

    def view(self) -> dict[str, Any]:
        """OpenAI's Batch object (timestamps in whole seconds, as OpenAI gives them)."""
        r = self.row
        out: dict[str, Any] = {"id": r["id"], "object": "batch", "endpoint": r["endpoint"], "errors": r["errors"],
                               "input_file_id": r["input_file_id"], "completion_window": r["completion_window"],
                               "status": r["status"], "output_file_id": r["output_file_id"],
                               "error_file_id": r["error_file_id"]}
        out.update({k: int(r[k]) if r[k] is not None else None for k in _TIMESTAMPS})
        out["request_counts"] = {"total": r["total"], "completed": r["completed"], "failed": r["failed"]}
        out["metadata"] = r["batch_metadata"]
        return out


class BatchStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def insert(self, conn: AsyncConnection, row: dict[str, Any]) -> None:
        await conn.execute(_t.insert().values(**row))

    async def insert_items(self, conn: AsyncConnection, batch_id: str, items: Sequence[tuple[int, bool, str]],
                           now: float) -> None:
        """Answers known at creation (lines whose body was refused), with the batch's row."""
        if items:
            await conn.execute(_items.insert(), [{"batch_id": batch_id, "line": line, "ok": ok, "output": output,
                                                  "created_at": now} for line, ok, output in items])

    async def get(self, batch_id: str) -> Batch | None:
        if len(batch_id) > 40:
            return None
        async with self.engine.connect() as conn:
            return await self.get_in(conn, batch_id)

    @staticmethod
    async def get_in(conn: AsyncConnection, batch_id: str) -> Batch | None:
        """The batch as ``conn`` sees it (inside a transaction: as that transaction wrote it)."""
        row = (await conn.execute(select(_t).where(_t.c.id == batch_id))).mappings().first()
        return Batch(row) if row is not None else None

    async def page(self, caller: str, *, after: str | None, limit: int) -> tuple[list[Batch], bool] | None:
        """The caller's batches, newest first, after the batch ``after`` (None if ``after`` is not theirs)."""
        found = await owned_page(self.engine, _t, caller, after=after, limit=limit)
        if found is None:
            return None
        rows, more = found
        return [Batch(r) for r in rows], more

    async def move(self, batch_id: str, to: str, *, only_from: frozenset[str], values: Mapping[str, Any],
                   conn: AsyncConnection | None = None) -> bool:
        """Set ``status`` to ``to`` (and ``values``) if it is one of ``only_from``; whether it moved."""
        stmt = update(_t).where(_t.c.id == batch_id, _t.c.status.in_(only_from)).values(status=to, **values)
        if conn is not None:
            return (await conn.execute(stmt)).rowcount == 1
        async with write_transaction(self.engine) as own:
            return (await own.execute(stmt)).rowcount == 1

    async def record(self, batch_id: str, line: int, *, ok: bool, output: str, now: float) -> bool:
        """Record a line's answer once: False if it already had one (then nothing changes)."""
        return await self.record_many(batch_id, [(line, ok, output)], now=now) == 1

    async def record_many(self, batch_id: str, answers: Sequence[tuple[int, bool, str]], *, now: float) -> int:
        """Record answers (line, ok, output) in one transaction, each line once: a line that already has an
        answer keeps it. The counters grow by what was inserted; how many were."""
        if not answers:
            return 0
        async with write_transaction(self.engine) as conn:
            dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
            stmt = dialect.insert(_items).values([
                {"batch_id": batch_id, "line": line, "ok": ok, "output": output, "created_at": now}
                for line, ok, output in answers]).on_conflict_do_nothing(index_elements=["batch_id", "line"])
            inserted = (await conn.execute(stmt.returning(_items.c.ok))).scalars().all()
            if inserted:
                good = sum(1 for ok in inserted if ok)
                await conn.execute(update(_t).where(_t.c.id == batch_id).values(
                    completed=_t.c.completed + good, failed=_t.c.failed + len(inserted) - good))
        return len(inserted)

    async def answered(self, batch_id: str) -> set[int]:
        """The lines that have an answer."""
        async with self.engine.connect() as conn:
            rows = await conn.execute(select(_items.c.line).where(_items.c.batch_id == batch_id))
            return {r[0] for r in rows}

    async def count_answers(self, batch_id: str) -> tuple[int, int]:
        """(ok, failed) answers recorded — what the counters must say."""
        async with self.engine.connect() as conn:
            rows = (await conn.execute(select(_items.c.ok, func.count()).where(_items.c.batch_id == batch_id)
                                       .group_by(_items.c.ok))).all()
        counts = {bool(ok): n for ok, n in rows}
        return counts.get(True, 0), counts.get(False, 0)

    async def outputs(self, batch_id: str) -> AsyncIterator[tuple[int, bool, str]]:
        """Every answer in line order (read in chunks: a batch may have 50,000)."""
        last = -1
        while True:
            async with self.engine.connect() as conn:
                rows = (await conn.execute(select(_items.c.line, _items.c.ok, _items.c.output).where(
                    _items.c.batch_id == batch_id, _items.c.line > last).order_by(_items.c.line)
                    .limit(_READ_CHUNK))).all()
            for line, ok, output in rows:
                yield line, bool(ok), output
            if len(rows) < _READ_CHUNK:
                return
            last = rows[-1][0]


@dataclass(slots=True)
class _Pending:
    answer: tuple[int, bool, str]
    done: asyncio.Future[None]


class AnswerWriter:
    """Group commit of one batch's answers: each :meth:`record` returns once its answer is committed, and the
    answers that arrive while a commit is running go together in the next one — with 8 lanes, about one
    transaction per round of calls instead of one per line, and nothing answered is ever only in memory."""

    def __init__(self, store: BatchStore, batch_id: str, clock: Clock) -> None:
        self.store = store
        self.batch_id = batch_id
        self.clock = clock
        self._pending: list[_Pending] = []
        self._lock = asyncio.Lock()

    async def record(self, line: int, ok: bool, output: str) -> None:
        mine = _Pending((line, ok, output), asyncio.get_running_loop().create_future())
        self._pending.append(mine)
        async with self._lock:
            if not mine.done.done():  # not committed by the writer before: commit everything waiting
                group, self._pending = self._pending, []
                try:
                    await self.store.record_many(self.batch_id, [p.answer for p in group], now=self.clock.now())
                except BaseException as exc:
                    for p in group:
                        if p is not mine and not p.done.done():
                            p.done.set_exception(exc)
                    raise
                for p in group:
                    p.done.set_result(None)
        await mine.done
