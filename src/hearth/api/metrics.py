"""``GET /metrics``: Prometheus text exposition (docs/operations.md, "Metrics").

A scrape returns three kinds of metric (:mod:`hearth.observability.metrics`): event counters and
histograms (every worker process's, merged, in multiprocess mode), this process's gauges (sampled here
first; with several workers each samples its own, and moves its call counts into its metric file, every
second), and the cluster gauges —
queues, reviews, workflow runs, budgets, endpoint usage against limits, database and state-backend
round trips — read from the database and the state backend by :class:`ClusterGauges` at most once per
``metrics_cache_s``, however many scrapes arrive: a scrape storm costs the database one set of
index-backed queries per period, and nothing of it is on the request path.

With ``metrics_token`` set the route wants ``Authorization: Bearer <token>`` (401 otherwise).
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Iterator
from typing import Any

from fastapi import Request
from prometheus_client.core import GaugeMetricFamily, Metric
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.gateway.budget import NO_SUBJECT
from hearth.gateway.budget_report import budget_status
from hearth.gateway.endpoint_admission import scopes_for
from hearth.observability import metrics as m
from hearth.observability.logging import get_logger
from hearth.observability.metrics_queries import LiveCounts, live_counts
from hearth.runtime import Runtime

log = get_logger("hearth.metrics")
router = api_router(tags=["operations"])

_BREAKER = {"closed": 0.0, "half_open": 1.0, "open": 2.0}
_LIMIT_KINDS = ("concurrency", "rpm", "tpm", "daily_tokens")


@router.get("/metrics", summary="Prometheus metrics (text exposition format)", include_in_schema=True,
            response_class=Response, responses={200: {"content": {m.CONTENT_TYPE: {}}}})
async def metrics(request: Request) -> Response:
    rt = runtime(request)
    _check_token(request, rt.settings.metrics_token)
    sample_process(rt)
    cluster = await _cluster(request.app.state, rt).refresh()
    return Response(m.exposition(cluster), media_type=m.CONTENT_TYPE)


def _check_token(request: Request, token: str | None) -> None:
    if token is None:
        return
    given = request.headers.get("authorization", "")
    scheme, _, value = given.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise HearthError("metrics_token_required")


def _cluster(app_state: Any, rt: Runtime) -> ClusterGauges:
    found = getattr(app_state, "metrics_cluster", None)
    if not isinstance(found, ClusterGauges) or found.rt is not rt:
        found = app_state.metrics_cluster = ClusterGauges(rt)
    return found


# ---- this process's gauges ------------------------------------------------------------------------------
def sample_process(rt: Runtime) -> None:
    """Copy this process's state into its gauges (cheap: no I/O)."""
    m.IN_FLIGHT.set(max(0, m.CALLS.in_flight))
    health = rt.gateway.health
    now = health.clock.now()
    for name in rt.gateway.registry.endpoints:
        h = health.get(name)
        m.BREAKER.labels(name).set(_BREAKER.get(h.state(now), 0.0))
        m.COOLDOWN.labels(name).set(max(0.0, h.cooldown_until - now))
        m.ENDPOINT_IN_FLIGHT_LOCAL.labels(name).set(h.in_flight)
    for writer, backlog, dropped, dead, written in (
            ("request_log", rt.log_writer.pending, rt.log_writer.dropped, rt.log_writer.dead, rt.log_writer.written),
            ("budget_ledger", rt.ledger.backlog, 0, rt.ledger.dead, rt.ledger.written)):
        m.WRITER_BACKLOG.labels(writer).set(backlog)
        m.WRITER_DROPPED.labels(writer).set(dropped)
        m.WRITER_DEAD.labels(writer).set(dead)
        m.WRITER_WRITTEN.labels(writer).set(written)
    pool = rt.engine.sync_engine.pool
    checked_out, size = getattr(pool, "checkedout", None), getattr(pool, "size", None)
    m.POOL_IN_USE.set(checked_out() if callable(checked_out) else 0)
    m.POOL_SIZE.set(size() if callable(size) else 0)


async def sample_every(rt: Runtime, period_s: float) -> None:
    """With several workers: each moves its call counts into its metric file and keeps its gauges fresh,
    for whichever worker a scrape reaches."""
    while True:
        try:
            m.CALLS.flush()
            sample_process(rt)
        except Exception as exc:  # a gauge is not worth a dead loop
            log.warning("metrics_sample_failed", error=type(exc).__name__)
        await asyncio.sleep(period_s)


def start_sampling(rt: Runtime) -> asyncio.Task[None] | None:
    """The periodic sampler, in multiprocess mode only (a single process samples when scraped)."""
    if m.MULTIPROC_DIR is None:
        return None
    m.forget_dead_processes()
    return asyncio.create_task(sample_every(rt, min(1.0, rt.settings.metrics_cache_s)), name="metrics-sampler")


# ---- the cluster gauges -----------------------------------------------------------------------------------
class ClusterGauges:
    """A prometheus collector yielding the families built by the last :meth:`refresh`."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._families: list[Metric] = []
        self._at = float("-inf")
        self._lock = asyncio.Lock()

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)

    async def refresh(self) -> ClusterGauges:
        if time.monotonic() - self._at < self.rt.settings.metrics_cache_s:
            return self
        async with self._lock:  # concurrent scrapes wait for one refresh and share it
            if time.monotonic() - self._at < self.rt.settings.metrics_cache_s:
                return self
            started = time.perf_counter()
            families = await self._build()
            took = GaugeMetricFamily("hearth_metrics_collect_seconds", "How long the last refresh of the cluster "
                                     "gauges took (at most one per `metrics_cache_s`).")
            took.add_metric([], time.perf_counter() - started)
            self._families = [*families, took]
            self._at = time.monotonic()
        m.forget_dead_processes()
        return self

    async def _build(self) -> list[Metric]:
        rt = self.rt
        out: list[Metric] = []
        db_up = GaugeMetricFamily("hearth_database_up", "1 if the database answered the last refresh's queries.")
        try:
            counts: LiveCounts | None = await live_counts(rt.engine, rt.settings.task_queues, now=time.time())
        except Exception as exc:
            log.warning("metrics_database_failed", error=type(exc).__name__)
            counts = None
        db_up.add_metric([], 1.0 if counts is not None else 0.0)
        out.append(db_up)
        if counts is not None:
            out += _database_families(counts)
        out += await self._state_families()
        return out

    async def _state_families(self) -> list[Metric]:
        rt = self.rt
        up = GaugeMetricFamily("hearth_state_backend_up", "1 if the state backend answered a ping.")
        rtt = GaugeMetricFamily("hearth_state_backend_round_trip_seconds", "One state-backend ping.")
        try:
            started = time.perf_counter()
            await rt.state.ping()
            rtt.add_metric([], time.perf_counter() - started)
            up.add_metric([], 1.0)
        except Exception as exc:
            log.warning("metrics_state_backend_failed", error=type(exc).__name__)
            up.add_metric([], 0.0)
            return [up]
        out: list[Metric] = [up, rtt]
        try:
            out += await self._usage_families()
            out.append(await self._budget_family())
        except Exception as exc:  # the backend went away mid-refresh: the next refresh tries again
            log.warning("metrics_state_backend_failed", error=type(exc).__name__)
        return out

    async def _usage_families(self) -> list[Metric]:
        rt = self.rt
        registry = rt.gateway.registry
        families = {
            (kind, what): GaugeMetricFamily(
                f"hearth_{kind}_{what}", f"{'Use' if what == 'usage' else 'Configured limit'} of the "
                f"{kind.replace('_', ' ')} across all processes (state backend), by kind: concurrency (in flight), "
                "rpm, tpm" + (", daily_tokens" if kind == "quota_group" else "") + ".",
                labels=[kind, "kind"])
            for kind in ("endpoint", "quota_group") for what in ("usage", "limit")}
        cooldown = GaugeMetricFamily("hearth_endpoint_shared_cooldown_seconds", "Seconds left of the endpoint's "
                                     "cooldown in the state backend (seen by every process).", labels=["endpoint"])
        enabled = GaugeMetricFamily("hearth_endpoint_enabled", "1 if the endpoint is enabled in the registry.",
                                    labels=["endpoint"])
        seen_groups: set[str] = set()
        for name, ep in sorted(registry.endpoints.items()):
            enabled.add_metric([name], 1.0 if ep.enabled else 0.0)
            for scope in scopes_for(ep):
                kind, _, label = scope.key.partition(":")
                kind = "endpoint" if kind == "ep" else "quota_group"
                if kind == "quota_group":
                    if label in seen_groups:
                        continue
                    seen_groups.add(label)
                u = await rt.state.usage(scope.key)
                if kind == "endpoint":
                    cooldown.add_metric([label], max(0.0, u.cooldown_s))
                used = {"concurrency": u.in_flight, "rpm": u.rpm_used, "tpm": u.tpm_used,
                        "daily_tokens": u.daily_tokens_used}
                limits = {"concurrency": scope.max_concurrency, "rpm": scope.rpm, "tpm": scope.tpm,
                          "daily_tokens": scope.daily_tokens}
                for limit_kind in _LIMIT_KINDS:
                    if limit_kind == "daily_tokens" and kind == "endpoint":
                        continue
                    families[(kind, "usage")].add_metric([label, limit_kind], float(used[limit_kind]))
                    if limits[limit_kind]:
                        families[(kind, "limit")].add_metric([label, limit_kind], float(limits[limit_kind]))
        return [*families.values(), cooldown, enabled]

    async def _budget_family(self) -> Metric:
        rt = self.rt
        ratio = GaugeMetricFamily("hearth_budget_remaining_ratio", "Share of the budget left this period, per "
                                  "configured budget and the caller it applies to (budgets over each tenant or "
                                  "user `*` are not listed: one series per tenant would be unbounded).",
                                  labels=["budget", "caller"])
        rows = await budget_status(rt.gateway.registry, rt.state, rt.engine, None, tenant=None, user=None)
        for row in rows:
            if row["scope"] != "caller" and row["subject"] == NO_SUBJECT:
                continue
            limit = float(row["limit"])
            ratio.add_metric([row["budget"], row["caller"]], float(row["remaining"]) / limit if limit > 0 else 0.0)
        return ratio


def _database_families(c: LiveCounts) -> list[Metric]:
    rtt = GaugeMetricFamily("hearth_database_round_trip_seconds", "One `SELECT 1` on a pooled connection.")
    rtt.add_metric([], c.round_trip_s)
    depth = GaugeMetricFamily("hearth_task_queue_depth", "Tasks waiting in a queue: `queued` (claimable, or "
                              "waiting out a retry delay) and `waiting` (dependencies or run_after).",
                              labels=["queue", "state"])
    running = GaugeMetricFamily("hearth_tasks_running", "Tasks running, by queue.", labels=["queue"])
    oldest = GaugeMetricFamily("hearth_task_queue_oldest_due_seconds", "How long the longest-waiting due queued "
                               "task of the queue has been due (0: none).", labels=["queue"])
    for queue, f in sorted(c.queues.items()):
        depth.add_metric([queue, "queued"], f.queued)
        depth.add_metric([queue, "waiting"], f.waiting)
        running.add_metric([queue], f.running)
        oldest.add_metric([queue], max(0.0, f.oldest_due_s))
    letters = GaugeMetricFamily("hearth_dead_letters_open", "Dead letters not yet acknowledged or redriven, by "
                                "severity.", labels=["severity"])
    for severity in sorted({"P1", "P2", "P3"} | set(c.dead_letters_open)):  # the column holds P1..P3
        letters.add_metric([severity], c.dead_letters_open.get(severity, 0))
    callbacks = GaugeMetricFamily("hearth_callback_backlog", "Task callbacks not yet delivered or given up.",
                                  labels=["state"])
    for state, n in sorted(c.callbacks.items()):
        callbacks.add_metric([state], n)
    runs = GaugeMetricFamily("hearth_workflow_runs", "Workflow runs not yet finished, by state.", labels=["state"])
    for state, n in sorted(c.workflow_runs.items()):
        runs.add_metric([state], n)
    reviews = GaugeMetricFamily("hearth_review_items_waiting", "Review items waiting for a decision: `pending` "
                                "(unclaimed) and `claimed`.", labels=["state"])
    for state, n in sorted(c.reviews_waiting.items()):
        reviews.add_metric([state], n)
    review_age = GaugeMetricFamily("hearth_review_oldest_waiting_seconds", "Age of the oldest review item waiting "
                                   "for a decision (0: none).")
    review_age.add_metric([], c.review_oldest_s)
    return [rtt, depth, running, oldest, letters, callbacks, runs, reviews, review_age]
