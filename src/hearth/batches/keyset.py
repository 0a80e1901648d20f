"""Keyset paging of a caller's rows (files, batches) as OpenAI lists them: by (created_at, id), ``after`` = the
last id of the previous page, one row more than asked read to know whether there is another page."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Table, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine


async def owned_page(engine: AsyncEngine, table: Table, caller: str, *, after: str | None, limit: int,
                     newest_first: bool = True, where: Iterable[Any] = ()) -> tuple[Sequence[Mapping[Any, Any]],
                                                                                    bool] | None:
    """``caller``'s rows of ``table`` (which has ``id``, ``caller``, ``created_at``) matching ``where``, the page
    after the row ``after``, and whether more follow; None when ``after`` is not one of the caller's rows."""
    c = table.c
    stmt = select(table).where(c.caller == caller, *where)
    async with engine.connect() as conn:
        if after is not None:
            at = (await conn.execute(select(c.created_at).where(c.id == after, c.caller == caller))).scalar()
            if at is None:
                return None
            stmt = stmt.where(or_(c.created_at < at, and_(c.created_at == at, c.id < after)) if newest_first
                              else or_(c.created_at > at, and_(c.created_at == at, c.id > after)))
        order = (c.created_at.desc(), c.id.desc()) if newest_first else (c.created_at, c.id)
        rows = (await conn.execute(stmt.order_by(*order).limit(limit + 1))).mappings().all()
    return rows[:limit], len(rows) > limit
