"""Request logs: one record per gateway call, persisted by a bounded asynchronous batch writer.

The hot path only bounds the record's fields (:func:`bound_record`, about a microsecond for a usual
record) and appends it to an in-memory queue (no database write per request). A background
task flushes batches every ``flush_s`` or when ``batch`` records are waiting. When the queue is full
the oldest record is dropped and counted (``dropped``), so overload degrades logging, never latency.

Batches go through :func:`hearth.store.batch_insert.insert_isolating`: a row the database refuses
despite the bounding (a constraint, a value of the wrong type) is found by bisection and recorded in
``dead_rows`` (``dead``) while every other caller's row is written; when the database is unavailable
the rows stay queued (oldest dropped first if the queue overflows) and are retried with a backoff of
``flush_s`` doubling up to 5 s. Each batch also adds to the per-minute, hour and day rollups in the
same transaction (:mod:`hearth.observability.request_rollups`), and the writer prunes rollups past their
retention every :data:`PRUNE_EVERY_S`. This module owns the ``request_logs`` table.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Float, Integer, String, bindparam, case, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.observability.logging import get_logger
from hearth.observability.request_rollups import add_to_rollups, prune_rollups, rollup_statements
from hearth.store.batch_insert import OneHop, insert_isolating
from hearth.store.db import stop_writer_task
from hearth.store.tables import request_logs

log = get_logger("hearth.request_log")

_MAX_BACKOFF_S = 5.0
PRUNE_EVERY_S = 600.0  # rollups older than their retention are deleted this often (a few minutes' rows each time)


@dataclass(slots=True)
class RequestLogRecord:
    request_id: str
    created_at: datetime
    caller: str | None
    route: str
    model: str | None
    endpoint: str | None
    upstream_model: str | None
    stream: bool
    status: int
    error_code: str | None
    attempts: int
    prompt_tokens: int
    completion_tokens: int
    usage_estimated: bool
    cost: float
    latency_ms: float
    ttft_ms: float | None
    end_user: str | None
    tenant: str | None = None
    client_ip: str | None = None
    scene: str | None = None
    fallback_used: bool = False
    attempted_models: list[str] | None = None
    effective_max_tokens: int | None = None
    estimated_cost: float | None = None
    attempt_log: list[dict[str, Any]] | None = None  # per attempt: endpoint, status, error_code, latency_ms
    capability: str | None = None  # summarize | extract | extract_bill | generate | chat (capability API calls)
    prompt_code: str | None = None
    prompt_version: int | None = None
    guardrails: dict[str, Any] | None = None  # actions taken (counts, rule ids), never a raw value
    degraded: bool | None = None
    cache_hit: bool | None = None
    task_id: str | None = None  # the task this call ran for (task → call → attempt)


_FIELDS = tuple(f.name for f in fields(RequestLogRecord))


def _column_bounds() -> tuple[list[tuple[str, int]], list[tuple[str, int, int]], list[tuple[str, float | None]]]:
    """(string field, length), (integer field, min, max), (float field, value for NaN) — from ``request_logs``."""
    strings, ints, floats = [], [], []
    for name in _FIELDS:
        column = request_logs.c[name]
        kind = column.type
        if isinstance(kind, String) and kind.length is not None:
            strings.append((name, kind.length))
        elif isinstance(kind, BigInteger):
            ints.append((name, -(2**63), 2**63 - 1))
        elif isinstance(kind, Integer):
            ints.append((name, -(2**31), 2**31 - 1))
        elif isinstance(kind, Float):
            floats.append((name, None if column.nullable else 0.0))
    return strings, ints, floats


_FLOAT_MAX = sys.float_info.max
_MAX_ATTEMPTED_MODELS = 32
#: At most this many attempts are listed (a call makes at most ``max_attempts`` ≤ 10).
MAX_ATTEMPT_RECORDS = 16
_ATTEMPT_ENDPOINT_CHARS = 128  # an endpoint name's column length
_ATTEMPT_CODE_CHARS = 64  # an error code's column length
_MAX_LATENCY_MS = 1e12


def _fit_text(value: str, length: int) -> str:
    if not value.isascii():  # a lone surrogate (JSON allows "\\ud800") cannot be encoded: PostgreSQL refuses it
        value = value.encode("utf-8", "replace").decode("utf-8")
    if "\x00" in value:  # nor can PostgreSQL text hold NUL
        value = value.replace("\x00", "\ufffd")
    return value[:length]


def _finite(value: float, nan: float | None) -> float | None:
    return nan if value != value else _FLOAT_MAX if value > 0 else -_FLOAT_MAX


def _compile_bounds() -> Callable[[RequestLogRecord], None]:
    """The field checks of :func:`bound_record`, unrolled from the table definition at import.

    One attribute load and a comparison or two per field: 1.0 µs per record against 2.0 µs for
    the same checks in a loop over (name, limit) pairs (timeit, CPython 3.11).
    """
    strings, ints, floats = _column_bounds()
    lines = ["def bound(r):"]
    for name, length in strings:
        lines += [f"    v = r.{name}",
                  f"    if v is not None and (len(v) > {length} or not v.isascii() or '\\x00' in v):",
                  f"        r.{name} = fit_text(v, {length})"]
    for name, low, high in ints:
        lines += [f"    v = r.{name}",
                  f"    if v is not None and not {low} <= v <= {high}:",
                  f"        r.{name} = {high} if v > {high} else {low}"]
    for name, nan in floats:
        lines += [f"    v = r.{name}",
                  f"    if v is not None and not {-_FLOAT_MAX!r} <= v <= {_FLOAT_MAX!r}:",  # NaN fails both
                  f"        r.{name} = finite(v, {nan!r})"]
    namespace: dict[str, Any] = {"fit_text": _fit_text, "finite": _finite}
    exec(compile("\n".join(lines), "<request_log bounds>", "exec"), namespace)
    bound: Callable[[RequestLogRecord], None] = namespace["bound"]
    return bound


_bound_fields = _compile_bounds()


def _bound_attempt(item: Any) -> dict[str, Any] | None:
    """One attempt as the JSON column holds it, whatever it was given (None: not an attempt at all)."""
    if not isinstance(item, dict):
        return None
    endpoint, status, code, latency = (item.get("endpoint"), item.get("status"), item.get("error_code"),
                                       item.get("latency_ms"))
    if not isinstance(latency, int | float) or latency != latency or latency < 0:
        latency = 0.0
    return {"endpoint": _fit_text(endpoint, _ATTEMPT_ENDPOINT_CHARS) if isinstance(endpoint, str) else "",
            "status": min(max(status, 0), 999) if type(status) is int else 0,
            "error_code": _fit_text(code, _ATTEMPT_CODE_CHARS) if isinstance(code, str) else None,
            "latency_ms": float(min(latency, _MAX_LATENCY_MS))}


def _bound_attempts(value: Any) -> list[dict[str, Any]] | None:
    if not isinstance(value, list):
        return None
    bounded = []
    for item in value:
        attempt = _bound_attempt(item)
        if attempt is not None:
            bounded.append(attempt)
            if len(bounded) == MAX_ATTEMPT_RECORDS:
                break
    return bounded


def bound_record(record: RequestLogRecord) -> RequestLogRecord:
    """Make every field fit its column, in place: strings cut to the column's length (and made valid
    text: no NUL, no lone surrogate), integers clamped to int32/int64, floats made finite (NaN → NULL,
    or 0.0 where the column is NOT NULL; ±inf → ±max), at most 32 attempted models, at most
    :data:`MAX_ATTEMPT_RECORDS` attempts, each rebuilt from its four fields (endpoint ≤ 128 and
    error code ≤ 64 characters of valid text, status 0–999, latency finite and ≥ 0; anything else
    dropped or replaced) — the JSON column has no length of its own to refuse a row with.

    Nullability and types are left alone (a mistyped field is the database's to refuse: the row is
    then dead-lettered, the others written). Cheap on purpose: it runs once per request.
    """
    try:
        _bound_fields(record)
    except TypeError:  # a value of the wrong type: left for the database to refuse (see above)
        pass
    models = record.attempted_models
    if models is not None and len(models) > _MAX_ATTEMPTED_MODELS:
        record.attempted_models = models[:_MAX_ATTEMPTED_MODELS]
    if record.attempt_log is not None:
        record.attempt_log = _bound_attempts(record.attempt_log)
    return record


def _row(record: RequestLogRecord) -> dict[str, Any]:
    # A shallow copy: dataclasses.asdict() deep-copies every value and was a hot spot.
    return {name: getattr(record, name) for name in _FIELDS}


class RequestLogWriter:
    def __init__(self, engine: AsyncEngine, max_queue: int = 20_000, batch: int = 500, flush_s: float = 0.5) -> None:
        self._engine = engine
        # SQLite file: a batch and its rollups in one hop to a writer thread (store.batch_insert.OneHop).
        self._one_hop = OneHop.for_engine(engine, also=rollup_statements)
        self._queue: deque[RequestLogRecord] = deque()
        self._max_queue = max_queue
        self._batch = batch
        self._flush_s = flush_s
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self.written = 0
        self.dropped = 0
        self.dead = 0  # refused by the database, recorded in dead_rows
        self.lost = 0  # refused, and could not be recorded in dead_rows either (logged)
        self.failed_batches = 0  # write attempts that found the database unavailable (rows kept)
        self.last_error: str | None = None
        # Given each batch of records once it is written (or dead-lettered), in this writer's background
        # flush: the usage-event outbox (hearth.observability.usage_outbox) when a sink is configured.
        self.on_written: Callable[[list[RequestLogRecord]], None] | None = None
        # (minute, hour) rollup retention in seconds: rows older are deleted every PRUNE_EVERY_S by this writer's
        # background task (hearth.observability.request_rollups.prune_rollups); None keeps them all.
        self.rollup_retention_s: tuple[float, float] | None = None
        self._next_prune = 0.0

    def submit(self, record: RequestLogRecord) -> None:
        queue = self._queue
        if len(queue) >= self._max_queue:
            queue.popleft()
            self.dropped += 1
        queue.append(bound_record(record))
        if len(queue) >= self._batch:
            self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="request-log-writer")

    async def _run(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                if backoff:  # the database was unavailable: wait, whatever arrives meanwhile
                    await asyncio.wait_for(self._stop.wait(), backoff)
                else:
                    await asyncio.wait_for(self._wake.wait(), self._flush_s)
            self._wake.clear()
            if await self.flush():
                backoff = 0.0
                await self._prune_rollups()
            else:
                backoff = min(max(2 * backoff, self._flush_s), _MAX_BACKOFF_S)

    async def flush(self) -> bool:
        """Write what is queued; False if the database was unavailable (the unwritten rows stay queued)."""
        async with self._lock:
            queue = self._queue
            while queue:
                batch = [queue.popleft() for _ in range(min(len(queue), self._batch))]
                rows = [_row(record) for record in batch]
                outcome = await insert_isolating(self._engine, request_logs, rows, writer="request_log",
                                                 row_key="request_id", also=add_to_rollups, one_hop=self._one_hop)
                self.written += outcome.written
                self.dead += outcome.dead
                self.lost += outcome.lost
                if outcome.error is not None:
                    self.last_error = outcome.error
                if self.on_written is not None:
                    retried = {id(row) for row in outcome.retry}
                    try:
                        self.on_written([record for record, row in zip(batch, rows, strict=True)
                                         if id(row) not in retried])
                    except Exception as exc:  # never at the request log's expense
                        log.error("request_log_hand_over_failed", error=type(exc).__name__)
                if outcome.retry:
                    self.failed_batches += 1
                    position = {id(row): i for i, row in enumerate(rows)}
                    queue.extendleft(reversed([batch[position[id(row)]] for row in outcome.retry]))
                    overflow = len(queue) - self._max_queue
                    for _ in range(overflow):  # the oldest go first, as in submit()
                        queue.popleft()
                    self.dropped += max(overflow, 0)
                    return False
            return True

    async def _prune_rollups(self) -> None:
        if self.rollup_retention_s is None or time.monotonic() < self._next_prune:
            return
        self._next_prune = time.monotonic() + PRUNE_EVERY_S
        minute_keep_s, hour_keep_s = self.rollup_retention_s
        try:
            await prune_rollups(self._engine, time.time(), minute_keep_s=minute_keep_s, hour_keep_s=hour_keep_s)
        except Exception as exc:  # tried again next time; never at the request log's expense
            log.warning("rollup_prune_failed", error=type(exc).__name__)

    async def stop(self) -> None:
        if self._task is not None:
            self._stop.set()
            self._wake.set()
            await stop_writer_task(self._task)
            self._task = None
        if not await self.flush():
            log.error("request_log_rows_not_written", rows=len(self._queue), error=self.last_error)
        if self._one_hop is not None:
            await self._one_hop.close()

    @property
    def one_hop_batches(self) -> int:
        """Batches written in one hop to a writer thread (a SQLite file; see ``OneHop``)."""
        return self._one_hop.batches if self._one_hop is not None else 0

    def stats(self) -> dict[str, int | str | None]:
        return {"written": self.written, "dropped": self.dropped, "dead": self.dead, "lost": self.lost,
                "pending": len(self._queue), "failed_batches": self.failed_batches, "last_error": self.last_error}


_FILTERS = ("caller", "model", "endpoint", "status", "error_code", "request_id", "route", "end_user", "tenant",
            "scene", "task_id")


def _filter_conditions(filters: dict[str, Any]) -> list[Any]:
    """``column = value`` for each filter, the value rendered into the SQL text (quoted by SQLAlchemy's literal
    processor for the column's type), not bound: each value then gets its own prepared statement and plan.
    With one statement for every value, PostgreSQL settled on a generic plan after five executions with a
    common status and used it for a status no row has, walking a million rows (520 ms instead of 1 ms)."""
    return [request_logs.c[k] == bindparam(None, v, type_=request_logs.c[k].type, literal_execute=True)
            for k, v in filters.items() if k in _FILTERS and v is not None]


#: ``GET /api/v1/request-logs`` counts matching rows up to this many, never more (a count over a million rows
#: took 250–500 ms on PostgreSQL): beyond it ``total`` is this number and ``total_capped`` is true.
TOTAL_CAP = 10_000


async def query_request_logs(engine: AsyncEngine, filters: dict[str, Any], since: datetime | None,
                             until: datetime | None, *, limit: int,
                             offset: int) -> tuple[int, bool, list[dict[str, Any]]]:
    """(matching rows up to :data:`TOTAL_CAP`, whether there are more, the page at ``offset``, newest first by
    ``(created_at, id)``)."""
    conds = _filter_conditions(filters)
    if since is not None:
        conds.append(request_logs.c.created_at >= since)
    if until is not None:
        conds.append(request_logs.c.created_at < until)
    bounded = select(request_logs.c.id).where(*conds).limit(TOTAL_CAP + 1).subquery()
    async with engine.connect() as conn:
        total = (await conn.execute(select(func.count()).select_from(bounded))).scalar_one()
        # (created_at, id), as the console's list: a filter's (column, created_at) index then serves the order even
        # in a generic plan (by id alone, asyncpg's prepared statement walked the whole table for a status no
        # row had: 520 ms at a million rows)
        rows = (await conn.execute(select(request_logs).where(*conds)
                                   .order_by(request_logs.c.created_at.desc(), request_logs.c.id.desc())
                                   .limit(limit).offset(offset))).mappings().all()
    out = []
    for r in rows:
        d = dict(r)
        created = d["created_at"]
        if isinstance(created, datetime):
            if created.tzinfo is None:
                created = created.replace(tzinfo=UTC)
            d["created_at"] = created.isoformat()
        out.append(d)
    return min(total, TOTAL_CAP), total > TOTAL_CAP, out


async def usage_summary(engine: AsyncEngine, since: datetime | None, caller: str | None, tenant: str | None,
                        *, user: str | None) -> dict[str, Any]:
    """Totals over request logs: requests, errors, tokens and cost, optionally per caller/tenant/user."""
    t = request_logs
    conds = []
    if since is not None:
        conds.append(t.c.created_at >= since)
    for column, value in ((t.c.caller, caller), (t.c.tenant, tenant), (t.c.end_user, user)):
        if value is not None:
            conds.append(column == value)
    stmt = select(func.count(), func.sum(case((t.c.status >= 400, 1), else_=0)),
                  func.coalesce(func.sum(t.c.prompt_tokens), 0), func.coalesce(func.sum(t.c.completion_tokens), 0),
                  func.coalesce(func.sum(t.c.cost), 0.0)).where(*conds)
    async with engine.connect() as conn:
        requests, errors, prompt, completion, cost = (await conn.execute(stmt)).one()
    return {"requests": int(requests or 0), "errors": int(errors or 0), "prompt_tokens": int(prompt),
            "completion_tokens": int(completion), "total_tokens": int(prompt) + int(completion),
            "cost": float(cost)}


async def prompt_version_stats(engine: AsyncEngine, prompt_code: str, since: datetime) -> list[dict[str, Any]]:
    """Per version of a prompt, from the capability rows (one per capability request): calls, successes,
    schema failures and their rate, mean and max latency, model calls made, total cost."""
    t = request_logs
    stmt = (select(t.c.prompt_version, func.count(), func.sum(case((t.c.status < 400, 1), else_=0)),
                   func.sum(case((t.c.error_code == "schema_validation_failed", 1), else_=0)),
                   func.avg(t.c.latency_ms), func.max(t.c.latency_ms), func.coalesce(func.sum(t.c.attempts), 0),
                   func.coalesce(func.sum(t.c.cost), 0.0))
            .where(t.c.prompt_code == prompt_code, t.c.route == "capability", t.c.created_at >= since)
            .group_by(t.c.prompt_version).order_by(t.c.prompt_version))
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    out = []
    for version, calls, ok, schema_failed, mean_ms, max_ms, model_calls, cost in rows:
        calls = int(calls)
        out.append({"version": version, "calls": calls, "succeeded": int(ok or 0),
                    "success_rate": round(int(ok or 0) / calls, 4) if calls else None,
                    "schema_failures": int(schema_failed or 0),
                    "schema_failure_rate": round(int(schema_failed or 0) / calls, 4) if calls else None,
                    "latency_ms_mean": round(float(mean_ms or 0.0), 3), "latency_ms_max": round(float(max_ms or 0), 3),
                    "model_calls": int(model_calls), "cost": float(cost)})
    return out


async def prompt_version_window(engine: AsyncEngine, prompt_code: str, *, since: datetime,
                                limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Per version of a prompt, over its newest capability requests since ``since`` (at most ``limit`` of them):
    calls, errors and error rate, p50/p95 latency (nearest rank) and tokens — what the console's prompt page
    compares. One index range read, newest first (``ix_request_logs_prompt`` on (code, created_at), or
    ``ix_request_logs_created_at`` when the planner prefers it for a short window), bounded by ``limit``: a
    prompt with ``limit`` calls or more in the window is judged on its newest ones (the bool says so), and a
    million-row log is never scanned. Versions are newest first.

    PostgreSQL aggregates the rows itself (``percentile_disc`` is the nearest rank), so a handful of rows come
    back instead of ``limit``: measured with 1,000,000 log rows, 5,000 rows fetched cost about three times the
    aggregate. SQLite, in process, hands the rows over and they are aggregated here, to the same figures."""
    t = request_logs
    recent = (select(t.c.prompt_version, t.c.status, t.c.latency_ms, t.c.prompt_tokens, t.c.completion_tokens)
              .where(t.c.prompt_code == prompt_code, t.c.created_at >= since, t.c.route == "capability")
              .order_by(t.c.created_at.desc()).limit(limit)).subquery()
    r = recent.c
    async with engine.connect() as conn:
        if conn.dialect.name == "postgresql":
            stmt = select(r.prompt_version, func.count(), func.sum(case((r.status >= 400, 1), else_=0)),
                          func.percentile_disc(0.5).within_group(r.latency_ms),
                          func.percentile_disc(0.95).within_group(r.latency_ms),
                          func.sum(r.prompt_tokens), func.sum(r.completion_tokens)).group_by(r.prompt_version)
            groups = [tuple(row) for row in (await conn.execute(stmt)).all()]
        else:
            groups = _version_groups((await conn.execute(select(recent))).all())
    out = [{"version": version, "calls": int(calls), "errors": int(errors), "error_rate": round(errors / calls, 4),
            "latency_ms_p50": round(float(p50), 1), "latency_ms_p95": round(float(p95), 1),
            "prompt_tokens": int(prompt), "completion_tokens": int(completion)}
           for version, calls, errors, p50, p95, prompt, completion in groups]
    out.sort(key=lambda v: -1 if v["version"] is None else v["version"], reverse=True)
    return out, sum(v["calls"] for v in out) >= limit


def _version_groups(rows: Sequence[Any]) -> list[tuple[Any, ...]]:
    """What PostgreSQL's aggregate returns, from the rows: (version, calls, errors, p50, p95, prompt, completion)."""
    per: dict[int | None, list[Any]] = {}
    for row in rows:
        per.setdefault(row[0], []).append(row)
    groups = []
    for version, calls in per.items():
        latencies = sorted(float(c[2]) for c in calls)
        groups.append((version, len(calls), sum(1 for c in calls if c[1] >= 400), _nearest_rank(latencies, 0.50),
                       _nearest_rank(latencies, 0.95), sum(c[3] for c in calls), sum(c[4] for c in calls)))
    return groups


def _nearest_rank(ordered: list[float], q: float) -> float:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


async def request_log_page(engine: AsyncEngine, filters: dict[str, Any], *, after: tuple[datetime, int] | None,
                           limit: int) -> tuple[list[dict[str, Any]], tuple[datetime, int] | None]:
    """A page of request logs, newest first, keyset-paged on ``(created_at, id)`` — the console's list.

    ``after`` is the last row of the previous page; the answer's second item is this page's last row when
    more may follow. With no filter, or one on ``caller``, ``model``, ``request_id`` or ``task_id``, the scan
    follows an index and stops after ``limit`` rows; other filters read index order until ``limit`` match.
    """
    t = request_logs
    conds: list[Any] = _filter_conditions(filters)
    if after is not None:
        at, row_id = after
        # ``created_at <= at`` on its own bounds the index range (the OR alone made PostgreSQL walk every newer
        # row: 260 ms for a page in the middle of a million rows, 2 ms with the bound)
        conds += [t.c.created_at <= at, (t.c.created_at < at) | (t.c.id < row_id)]
    stmt = select(t).where(*conds).order_by(t.c.created_at.desc(), t.c.id.desc()).limit(limit + 1)
    async with engine.connect() as conn:
        rows = [dict(r) for r in (await conn.execute(stmt)).mappings().all()]
    for r in rows:
        if r["created_at"].tzinfo is None:
            r["created_at"] = r["created_at"].replace(tzinfo=UTC)
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, ((rows[-1]["created_at"], int(rows[-1]["id"])) if more and rows else None)


async def request_log_row(engine: AsyncEngine, row_id: int) -> dict[str, Any] | None:
    async with engine.connect() as conn:
        row = (await conn.execute(select(request_logs).where(request_logs.c.id == row_id))).mappings().first()
    if row is None:
        return None
    out = dict(row)
    if out["created_at"].tzinfo is None:
        out["created_at"] = out["created_at"].replace(tzinfo=UTC)
    return out
