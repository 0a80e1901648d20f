"""The overview page: traffic, errors, cost, tokens and latency over a recent window, as inline SVG charts.

Everything comes from the request-log rollups (:mod:`hearth.observability.rollup_reports`): per-minute rows
for windows under a day, per-hour rows beyond, so the page reads a number of rows bounded by the window's
buckets × the configured callers, models and endpoints — never a scan or a count of the raw request logs.
The p95 latency is estimated from the rollups' fixed-bound histograms.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import require
from hearth.console.charts import bars
from hearth.console.render import page
from hearth.observability.rollup_reports import WINDOWS, Bar, Totals, traffic_series

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
DEFAULT_WINDOW = "1h"


def window_totals(series: list[Bar]) -> Totals:
    """The sums of every bar of ``series``."""
    out = Totals()
    for bar in series:
        out.merge(bar.totals)
    return out


@router.get("/overview", include_in_schema=False)
async def overview(request: Request) -> Response:
    console = await require(request)
    window = request.query_params.get("window", DEFAULT_WINDOW)
    window = window if window in WINDOWS else DEFAULT_WINDOW
    spec = WINDOWS[window]
    series = await traffic_series(runtime(request).engine, spec)
    label_format = "%H:%M" if spec.span_s <= 86_400 else "%m-%d %H:%M"

    def points(value: str) -> list[tuple[str, float]]:
        return [(bar.start.strftime(label_format), float(getattr(bar.totals, value))) for bar in series]

    totals = window_totals(series)
    charts = [bars("Calls", points("calls")),
              bars("Errors (status ≥ 400)", points("errors"), colour="#dc2626"),
              bars("Cost", points("cost"), colour="#16a34a"),
              bars("Tokens", points("tokens"), colour="#0891b2"),
              bars("Latency p95 (estimated)", points("p95_ms"), unit=" ms", colour="#9333ea")]
    rt = runtime(request)
    return page(request, "overview.html", console, window=window, windows=list(WINDOWS), charts=charts,
                totals=totals, since=series[0].start, granularity=spec.grain,
                writer=rt.log_writer.stats(), registry_version=rt.gateway.registry.version,
                state_backend=rt.state.name, endpoints=len(rt.gateway.registry.endpoints))
