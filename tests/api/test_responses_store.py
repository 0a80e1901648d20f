"""The ``responses`` table on SQLite and PostgreSQL: ownership, expiry, purge of expired rows, delete."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select

from hearth.responses.store import PURGE_INTERVAL_S, delete_response, load_response, save_response
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
