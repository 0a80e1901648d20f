"""Row versions on PostgreSQL: a heartbeat changes no indexed column, so it is a HOT update (no new index
entries, pruned within the page) — long tasks renew their leases every few seconds, and under a held vacuum
horizon every non-HOT renewal would leave five dead index entries behind. The tasks table keeps room in each
page for those versions (fillfactor)."""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import text

from hearth.capabilities.address_guard import AddressGuard
from hearth.store.db import create_engine, write_transaction
from hearth.tasks import queue as task_queue
from hearth.tasks.admission import QueueLimits
from hearth.tasks.notify import Wakeups
from hearth.tasks.service import Submission, TaskService
from hearth.tasks.types import TaskType, TaskTypes


async def _noop(ctx: Any) -> dict[str, Any]:
    return {}


async def test_a_heartbeat_is_a_hot_update(postgres_url: str) -> None:
    engine = create_engine(postgres_url)
    try:
        types = TaskTypes()
        types.register(TaskType("noop", _noop, queue="q"))
        svc = TaskService(engine=engine, types=types, queues={"q": QueueLimits()}, wakeups=Wakeups(),
                          guard=AddressGuard())
        ids = [row["id"] for row, _ in await svc.submit([Submission("noop", {}, caller="c") for _ in range(3)])]
        now = time.time() + 1
        claimed = await task_queue.claim_now(engine, queue="q", types=["noop"], limit=3, worker="w1", now=now,
                                             lease_s=9.0)
        assert len(claimed) == 3
        counts = text("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables WHERE relname = 'tasks'")
        async with write_transaction(engine) as conn:  # this backend's counts not yet flushed: compare before/after
            updated_before, hot_before = (await conn.execute(counts)).one()
            alive = await task_queue.heartbeat(conn, worker="w1", held=ids, now=now + 3, lease_s=9.0)
            updated, hot = (await conn.execute(counts)).one()
        assert alive == {i: (1, False) for i in ids}
        assert (updated - updated_before, hot - hot_before) == (3, 3)
        async with engine.connect() as conn:
            options = (await conn.execute(text("SELECT reloptions FROM pg_class WHERE relname = 'tasks'"))).scalar()
        assert options == ["fillfactor=85"]
    finally:
        await engine.dispose()
