"""The overview page: traffic, errors, cost and latency over a recent window, as inline SVG charts.

There are no rollup tables yet, so the page reads the newest calls of the window from the request logs —
one index range scan bounded by :data:`MAX_ROWS` — and buckets them here. When the window holds more
calls than that, the page says the charts cover only the newest ones (never a count over the table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Final

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import require
from hearth.console.charts import bars
from hearth.console.render import page
from hearth.observability.request_log import recent_calls

router = APIRouter()
MAX_ROWS: Final = 20_000
WINDOWS: Final = {"15m": (timedelta(minutes=15), 15), "1h": (timedelta(hours=1), 60),
                  "6h": (timedelta(hours=6), 72), "24h": (timedelta(hours=24), 96)}


@dataclass
class Bucket:
    start: datetime
    calls: int = 0
    errors: int = 0
    cost: float = 0.0
    tokens: int = 0
    latencies: list[float] = field(default_factory=list)

    @property
    def p95_ms(self) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def bucketize(rows: Sequence[tuple[datetime, int, float, float, int]], *, since: datetime, width: timedelta,
              count: int) -> list[Bucket]:
    """``count`` consecutive buckets of ``width`` from ``since``; rows outside them are ignored."""
    out = [Bucket(since + i * width) for i in range(count)]
    for created, status, cost, latency, tokens in rows:
        i = math.floor((created - since) / width)
        if 0 <= i < count:
            b = out[i]
            b.calls += 1
            b.errors += status >= 400
            b.cost += cost
            b.tokens += tokens
            b.latencies.append(latency)
    return out


@router.get("/overview", include_in_schema=False)
async def overview(request: Request) -> Response:
    console = await require(request)
    window = request.query_params.get("window", "1h")
    span, count = WINDOWS.get(window, WINDOWS["1h"])
    window = window if window in WINDOWS else "1h"
    now = datetime.now(UTC)
    since = now - span
    rows = await recent_calls(runtime(request).engine, since=since, limit=MAX_ROWS)
    truncated = len(rows) >= MAX_ROWS
    if truncated:
        since = rows[-1][0]
    buckets = bucketize(rows, since=since, width=(now - since) / count, count=count)

    def label(b: Bucket) -> str:
        return b.start.strftime("%H:%M")

    calls = sum(b.calls for b in buckets)
    errors = sum(b.errors for b in buckets)
    latencies = sorted(lat for b in buckets for lat in b.latencies)
    totals = {"calls": calls, "errors": errors, "error_rate": errors / calls if calls else 0.0,
              "cost": sum(b.cost for b in buckets), "tokens": sum(b.tokens for b in buckets),
              "p95_ms": latencies[max(0, math.ceil(0.95 * len(latencies)) - 1)] if latencies else 0.0}
    charts = [bars("Calls", [(label(b), b.calls) for b in buckets]),
              bars("Errors (status ≥ 400)", [(label(b), b.errors) for b in buckets], colour="#dc2626"),
              bars("Cost", [(label(b), b.cost) for b in buckets], colour="#16a34a"),
              bars("Latency p95", [(label(b), b.p95_ms) for b in buckets], unit=" ms", colour="#9333ea")]
    rt = runtime(request)
    return page(request, "overview.html", console, window=window, windows=list(WINDOWS), charts=charts,
                totals=totals, truncated=truncated, max_rows=MAX_ROWS, since=since,
                writer=rt.log_writer.stats(), registry_version=rt.gateway.registry.version,
                state_backend=rt.state.name, endpoints=len(rt.gateway.registry.endpoints))
