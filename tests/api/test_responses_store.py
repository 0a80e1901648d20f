"""The ``responses`` table on SQLite and PostgreSQL: ownership, expiry, purge of expired rows, delete, and reading
one's writes while they are under way (in this process and another)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from sqlalchemy import func, select

from hearth.responses.objects import new_response_id
from hearth.responses.store import (
    PURGE_INTERVAL_S,
    WRITE_WINDOW_S,
    delete_response,
    load_response,
    pending_writes,
    save_response,
)
from hearth.store.tables import responses

T0 = 1_800_000_000.0


def _response(response_id: str) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "status": "completed", "output": [],
            "previous_response_id": None}


async def _rows(engine: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(responses))).scalar_one())


async def test_a_response_is_its_callers_alone(engine):
    conversation = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    await save_response(engine, caller="alice", response=_response("resp_a"), conversation=conversation,
                        retention_s=60, now=T0)
    mine = await load_response(engine, caller="alice", response_id="resp_a", now=T0 + 1)
    assert mine is not None and mine.conversation == conversation and mine.response["id"] == "resp_a"
    assert await load_response(engine, caller="bob", response_id="resp_a", now=T0 + 1) is None
    assert await delete_response(engine, caller="bob", response_id="resp_a", now=T0 + 1) is False
    assert await delete_response(engine, caller="alice", response_id="resp_a", now=T0 + 1) is True
    assert await load_response(engine, caller="alice", response_id="resp_a", now=T0 + 1) is None
    assert await delete_response(engine, caller="alice", response_id="resp_a", now=T0 + 1) is False


async def test_an_expired_response_is_gone_at_once_and_purged_by_a_later_write(engine):
    await save_response(engine, caller="alice", response=_response("resp_old"), conversation=[], retention_s=10,
                        now=T0)
    assert await load_response(engine, caller="alice", response_id="resp_old", now=T0 + 9) is not None
    assert await load_response(engine, caller="alice", response_id="resp_old", now=T0 + 10) is None
    assert await delete_response(engine, caller="alice", response_id="resp_old", now=T0 + 10) is False
    # the next write after the purge interval deletes expired rows; a live one stays
    await save_response(engine, caller="alice", response=_response("resp_new"), conversation=[], retention_s=10_000,
                        now=T0 + PURGE_INTERVAL_S + 10)
    assert await _rows(engine) == 1
    assert await load_response(engine, caller="alice", response_id="resp_new", now=T0 + PURGE_INTERVAL_S + 11)


async def test_a_young_id_written_by_another_process_is_found_once_its_write_lands(engine):
    response_id = new_response_id()
    conversation = [{"role": "user", "content": "hi"}]

    async def later() -> None:
        await asyncio.sleep(0.05)  # another process's write, landing after the first lookup
        await save_response(engine, caller="alice", response=_response(response_id), conversation=conversation,
                            retention_s=60)

    writer = asyncio.create_task(later())
    started = time.monotonic()
    found = await load_response(engine, caller="alice", response_id=response_id)
    await writer
    assert found is not None and found.conversation == conversation
    assert 0.04 < time.monotonic() - started < WRITE_WINDOW_S


async def test_another_callers_young_id_and_an_unstored_id_are_not_waited_for(engine):
    response_id = new_response_id()
    await save_response(engine, caller="alice", response=_response(response_id), conversation=[], retention_s=60)
    started = time.monotonic()
    assert await load_response(engine, caller="bob", response_id=response_id) is None
    assert await delete_response(engine, caller="bob", response_id=response_id) is False
    assert await load_response(engine, caller="bob", response_id=new_response_id(stored=False)) is None
    assert time.monotonic() - started < WRITE_WINDOW_S / 2


async def test_a_pending_write_of_this_process_is_waited_for(engine):
    response_id = new_response_id()
    release = asyncio.Event()

    async def write() -> None:
        await release.wait()
        await save_response(engine, caller="alice", response=_response(response_id), conversation=[], retention_s=60)

    pending = pending_writes(engine)
    pending.start(response_id, write)
    reader = asyncio.create_task(load_response(engine, caller="alice", response_id=response_id))
    await asyncio.sleep(0.01)
    assert not reader.done() and len(pending) == 1  # the write has not ended: the read waits for it
    release.set()
    assert (await reader) is not None
    assert len(pending) == 0


async def test_a_failed_write_ends_pending_and_the_id_is_not_found(engine):
    response_id = new_response_id()

    async def write() -> None:
        raise RuntimeError("the database went away")

    pending = pending_writes(engine)
    pending.start(response_id, write)
    await pending.drain()
    assert len(pending) == 0
    assert await load_response(engine, caller="alice", response_id=response_id, now=time.time()) is None


async def test_draining_waits_for_writes_but_not_beyond_its_bound(engine):
    never = asyncio.Event()

    async def stuck() -> None:
        await never.wait()  # a database that does not answer

    pending = pending_writes(engine)
    pending.start(new_response_id(), stuck)
    started = time.monotonic()
    await pending.drain(timeout_s=0.1)
    assert 0.1 <= time.monotonic() - started < 1.0 and len(pending) == 1
    never.set()
    await pending.drain()
    assert len(pending) == 0
