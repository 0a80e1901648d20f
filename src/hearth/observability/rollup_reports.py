"""What the console and the admin usage API read: traffic over a window, from the request-log rollups.

A window (``15m`` … ``30d``) reads the per-minute rollups when it is shorter than a day, the per-hour ones
for a day and a week and the per-day ones for 30 days, so the rows read grow with the window's buckets × the
configured dimensions — never with the calls made (a 7-day window is 168 hour buckets, whatever the traffic;
measured at a million calls, 30 days of hour rows were too many to sum within the console's 300 ms).
Windows start on a bar's boundary: ``24h`` covers the 24 whole hours before the current one and the current
one so far.

Two questions are answered: :func:`traffic_series` (per chart bucket: calls, errors, cost, tokens,
estimated p95 latency) and :func:`usage_breakdown` (per caller, model or endpoint).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.observability.request_rollups import GRAINS, HISTOGRAM, SUMS, p95_ms


@dataclass(frozen=True, slots=True)
class Window:
    """A window of ``buckets`` chart bars of ``bar_s`` seconds each, read from the ``grain`` rollups."""

    span_s: int
    grain: str  # minute | hour | day
    bars: int

    @property
    def bar_s(self) -> int:
        return self.span_s // self.bars


WINDOWS: Final = {"15m": Window(900, "minute", 15), "1h": Window(3_600, "minute", 60),
                  "6h": Window(21_600, "minute", 72), "24h": Window(86_400, "hour", 24),
                  "7d": Window(604_800, "hour", 84), "30d": Window(2_592_000, "day", 30)}
GROUPS: Final = ("caller", "model", "endpoint")


def window_named(name: str) -> Window:
    """The window called ``name``; an unknown name is a 400 that lists the known ones."""
    if name not in WINDOWS:
        raise HearthError("invalid_request", f"Unknown window `{name}`.", details={"windows": list(WINDOWS)})
    return WINDOWS[name]


@dataclass(slots=True)
class Totals:
    """Sums over some rollup rows; ``histogram`` counts calls per latency bucket."""

    calls: int = 0
    errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    latency_ms_sum: float = 0.0
    histogram: list[int] = field(default_factory=lambda: [0] * len(HISTOGRAM))

    def add(self, sums: Sequence[Any]) -> None:
        self.calls += int(sums[0] or 0)
        self.errors += int(sums[1] or 0)
        self.prompt_tokens += int(sums[2] or 0)
        self.completion_tokens += int(sums[3] or 0)
        self.cost += float(sums[4] or 0.0)
        self.latency_ms_sum += float(sums[5] or 0.0)
        for i, count in enumerate(sums[6:]):
            self.histogram[i] += int(count or 0)

    def merge(self, other: Totals) -> None:
        self.add([other.calls, other.errors, other.prompt_tokens, other.completion_tokens, other.cost,
                  other.latency_ms_sum, *other.histogram])

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def error_rate(self) -> float:
        return self.errors / self.calls if self.calls else 0.0

    @property
    def p95_ms(self) -> float:
        return p95_ms(self.histogram)

    def as_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "errors": self.errors, "error_rate": round(self.error_rate, 4),
                "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.tokens, "cost": self.cost,
                "latency_ms_mean": round(self.latency_ms_sum / self.calls, 3) if self.calls else 0.0,
                "latency_ms_p95": round(self.p95_ms, 3)}


def _bounds(window: Window, now_s: float) -> tuple[int, int]:
    """[since, until) in epoch seconds: ``bars`` whole bars ending with the one ``now`` is in."""
    until = (int(now_s) // window.bar_s + 1) * window.bar_s
    return until - window.span_s, until


def _sum_columns(grain: str) -> list[Any]:
    table = GRAINS[grain][1]
    return [func.sum(table.c[name]) for name in SUMS]  # in the order Totals.add reads them


@dataclass(frozen=True, slots=True)
class Bar:
    start: datetime
    totals: Totals


async def traffic_series(engine: AsyncEngine, window: Window, *, now_s: float | None = None) -> list[Bar]:
    """The window's bars, oldest first (``window.bars`` of them, empty ones included)."""
    since, until = _bounds(window, time.time() if now_s is None else now_s)
    table = GRAINS[window.grain][1]
    stmt = (select(table.c.bucket, *_sum_columns(window.grain))
            .where(table.c.bucket >= since, table.c.bucket < until).group_by(table.c.bucket))
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    bars = [Bar(datetime.fromtimestamp(since + i * window.bar_s, UTC), Totals()) for i in range(window.bars)]
    for bucket, *sums in rows:
        bars[(int(bucket) - since) // window.bar_s].totals.add(sums)
    return bars


async def usage_breakdown(engine: AsyncEngine, window: Window, group_by: str, *,
                          now_s: float | None = None) -> tuple[datetime, datetime, list[tuple[str, Totals]]]:
    """(since, until, [(caller/model/endpoint, totals)]) over the window, most calls first; ``''`` is "none"
    (a call refused before it had a model or an endpoint)."""
    if group_by not in GROUPS:
        raise HearthError("invalid_request", f"Cannot group usage by `{group_by}`.", details={"group_by": GROUPS})
    since, until = _bounds(window, time.time() if now_s is None else now_s)
    table = GRAINS[window.grain][1]
    key = table.c[group_by]
    stmt = (select(key, *_sum_columns(window.grain))
            .where(table.c.bucket >= since, table.c.bucket < until).group_by(key))
    async with engine.connect() as conn:
        rows = (await conn.execute(stmt)).all()
    out = []
    for name, *sums in rows:
        totals = Totals()
        totals.add(sums)
        out.append((str(name), totals))
    out.sort(key=lambda item: (-item[1].calls, item[0]))
    return datetime.fromtimestamp(since, UTC), datetime.fromtimestamp(until, UTC), out


async def usage_report(engine: AsyncEngine, window_name: str, group_by: str, *,
                       now_s: float | None = None) -> dict[str, Any]:
    """The admin usage API's answer and the console usage page's table: one entry per group, plus totals."""
    window = window_named(window_name)
    since, until, groups = await usage_breakdown(engine, window, group_by, now_s=now_s)
    overall = Totals()
    for _, totals in groups:
        overall.merge(totals)
    return {"window": window_name, "group_by": group_by, "since": since.isoformat(), "until": until.isoformat(),
            "granularity": window.grain, "totals": overall.as_dict(),
            "items": [{group_by: name or None, **totals.as_dict()} for name, totals in groups]}
