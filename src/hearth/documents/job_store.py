"""The ``document_jobs`` and ``document_results`` tables: a document's pipeline jobs, and completed results by
cache key.

A job is a row naming its workflow run (``run_id``); where it stands is read from the run when asked
(:mod:`hearth.documents.jobs`), so there is one authority for progress. The row itself records only what the run
cannot: the cache key and the versions it covers, whether it was a cache hit, and — once completed — the final
result. Completing a job (:func:`complete`) also keeps its result under its cache key, in the same transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.db import write_transaction
from hearth.store.tables import document_jobs as _jobs
from hearth.store.tables import document_results as _results


async def insert_job(engine: AsyncEngine, row: Mapping[str, Any]) -> None:
    async with write_transaction(engine) as conn:
        await conn.execute(_jobs.insert().values(**row))


async def get_job(engine: AsyncEngine, job_id: str) -> dict[str, Any] | None:
    async with engine.connect() as conn:
        row = (await conn.execute(select(_jobs).where(_jobs.c.id == job_id))).mappings().first()
    return dict(row) if row else None


async def latest_job(engine: AsyncEngine, document_id: str) -> dict[str, Any] | None:
    """The document's newest job."""
    async with engine.connect() as conn:
        row = (await conn.execute(select(_jobs).where(_jobs.c.document_id == document_id)
                                  .order_by(_jobs.c.created_at.desc(), _jobs.c.id.desc()).limit(1))).mappings().first()
    return dict(row) if row else None


async def cached_result(engine: AsyncEngine, cache_key: str) -> Any | None:
    async with engine.connect() as conn:
        return (await conn.execute(select(_results.c.result).where(_results.c.cache_key == cache_key))).scalar()


async def complete(engine: AsyncEngine, job_id: str, *, result: Any, reviewed: bool, now: float) -> bool:
    """Record a job's final result (once: a repeated completion changes nothing) and keep it under the job's
    cache key; whether this call completed it."""
    async with write_transaction(engine) as conn:
        done = await conn.execute(update(_jobs).where(_jobs.c.id == job_id, _jobs.c.finished_at.is_(None))
                                  .values(result=result, reviewed=reviewed, finished_at=now)
                                  .returning(_jobs.c.cache_key))
        key = done.scalar()
        if key is None:
            return False
        insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        await conn.execute(insert(_results).values(cache_key=key, result=result, job_id=job_id, created_at=now)
                           .on_conflict_do_update(index_elements=["cache_key"],
                                                  set_={"result": result, "job_id": job_id, "created_at": now}))
    return True
