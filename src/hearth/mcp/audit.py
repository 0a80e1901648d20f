"""The audit of MCP tool calls: one ``mcp_calls`` row per ``tools/call``, allowed or refused.

A row names the caller, the server, the tool, the outcome (with the error code) and the latency. The
arguments are never stored: only the sha256 of their canonical JSON (keys sorted, no whitespace, UTF-8),
so an auditor holding the arguments can prove which call was made without Hearth keeping what may be
personal data or secrets.

Rows go through a bounded in-memory queue written in batches in the background (the hot path makes no
database write), with :func:`hearth.store.batch_insert.insert_isolating`: a row the database refuses goes
to ``dead_rows`` and costs no other caller's row; while the database is unavailable rows wait (the oldest
are dropped beyond the bound, and counted).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.store.queued_rows import QueuedRows
from hearth.store.tables import mcp_calls

_TOOL_CHARS = 256


def argument_digest(arguments: Any) -> str:
    """sha256 hex of the canonical JSON of ``arguments`` (sorted keys, compact)."""
    return hashlib.sha256(orjson.dumps(arguments, option=orjson.OPT_SORT_KEYS)).hexdigest()


@dataclass(slots=True)
class McpCallRecord:
    created_at: float
    request_id: str
    caller: str
    server: str | None
    tool: str
    args_sha256: str
    outcome: str  # ok | tool_error | denied | rate_limited | not_found | upstream_error
    error_code: str | None
    latency_ms: float


class McpAuditWriter(QueuedRows):
    """The ``mcp_calls`` rows, queued and written in batches (:class:`~hearth.store.queued_rows.QueuedRows`)."""

    def __init__(self, engine: AsyncEngine, *, max_queue: int = 20_000, batch: int = 500,
                 flush_s: float = 0.5) -> None:
        super().__init__(engine, mcp_calls, name="mcp_audit", row_key="request_id", max_rows=max_queue,
                         batch=batch, flush_s=flush_s)

    def submit(self, record: McpCallRecord) -> None:
        record.tool = record.tool[:_TOOL_CHARS]
        self.put((asdict(record),))
