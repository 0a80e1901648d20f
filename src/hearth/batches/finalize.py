"""How a batch ends: its files assembled and recorded with the final status, or its failure recorded.

Used by the batch task (:mod:`hearth.batches.batch_task`) and by the service when it finds a batch whose task
ended without ending it (an operator killed the task: :meth:`hearth.batches.service.BatchService.get`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.batches.batch_store import ACTIVE, Batch, BatchStore
from hearth.batches.file_store import OUTPUT_PURPOSE, FileStore, StoredFile
from hearth.clock import Clock
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.store.db import write_transaction

log = get_logger("hearth.batches")


class _Superseded(Exception):
    """The batch's status changed under the final write (it was cancelled, or another attempt finished it)."""


async def finalize(engine: AsyncEngine, files: FileStore, store: BatchStore, batch: Batch, *, final: str,
                   clock: Clock) -> None:
    """Assemble both files in input order and record them with the final status (``completed`` or ``expired``
    from ``finalizing``, ``cancelled`` from ``cancelling``) in one transaction; nothing if the status moved."""
    ok_lines: list[str] = []
    error_lines: list[str] = []
    async for _line, ok, output in store.outputs(batch.id):
        (ok_lines if ok else error_lines).append(output)
    produced: dict[str, StoredFile | None] = {"output": None, "error": None}
    for kind, lines in (("output", ok_lines), ("error", error_lines)):
        if lines:  # stored before the transaction: the database blob store writes in one of its own
            produced[kind] = await files.put(("\n".join(lines) + "\n").encode(), filename=f"{batch.id}_{kind}.jsonl",
                                             purpose=OUTPUT_PURPOSE, caller=batch.caller)
    values: dict[str, Any] = {f"{final}_at": clock.now(), "completed": len(ok_lines), "failed": len(error_lines),
                              "output_file_id": produced["output"].id if produced["output"] else None,
                              "error_file_id": produced["error"].id if produced["error"] else None}
    if final == "expired":
        values.pop("expired_at")  # set when the window's end was decided
    source = "cancelling" if final == "cancelled" else "finalizing"
    try:
        async with write_transaction(engine) as conn:
            for stored in produced.values():
                if stored is not None:
                    await files.insert(conn, stored)
            if not await store.move(batch.id, final, only_from=frozenset({source}), values=values, conn=conn):
                raise _Superseded(batch.id)
    except _Superseded:
        log.info("batch_finalize_superseded", batch_id=batch.id, wanted=final)


async def fail(store: BatchStore, batch_id: str, error: HearthError, *, clock: Clock) -> None:
    """End an unfinished batch ``failed`` with ``error`` as its ``errors`` (the answers recorded stay)."""
    errors = {"object": "list", "data": [{"code": error.code, "message": error.message, "param": None,
                                          "line": None}]}
    if await store.move(batch_id, "failed", only_from=ACTIVE, values={"failed_at": clock.now(), "errors": errors}):
        log.warning("batch_failed", batch_id=batch_id, error_code=error.code)
