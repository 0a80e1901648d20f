"""Prometheus metrics: what is counted per event, with bounded labels, and how it is exposed.

Three kinds of metric live here:

* **event metrics** — counted where the event happens: gateway calls (from the request-log record every
  call already builds, :func:`observe_call`), task retries and lease expirations. The per-call cost is
  a dict lookup of label children bound once and a few ``inc``/``observe`` calls;
* **process gauges** — a process's own state (writer backlog, breakers, pool use), set by a sampler
  (``hearth.api.metrics``) at scrape time and, with several workers, every few seconds;
* **cluster gauges** — read from the database and the state backend at scrape time by a cached
  collector (``hearth.api.metrics``), never on the request path.

Labels are bounded enums or configured names only: a route from :data:`ROUTES`, a model or endpoint
name from the registry (the request log never holds a raw requested model: a call whose model did not
resolve has none, labelled ``unknown``), a status class, an error code from the catalog. No user id,
request id or other request input becomes a label; as a last guard each name label keeps at most
:data:`MAX_NAMES` distinct values (then ``other``).

Several uvicorn workers: with ``PROMETHEUS_MULTIPROC_DIR`` set before this module is imported (``hearth
serve`` does it when ``workers > 1``), every metric writes to a per-process file in that directory and
:func:`exposition` merges all processes' files (prometheus-client's multiprocess mode).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import multiprocess as _multiprocess
from prometheus_client.registry import Collector

from hearth.errors import CATALOG
from hearth.observability.request_log import RequestLogRecord

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Set when this module was imported with ``PROMETHEUS_MULTIPROC_DIR`` (fixed then: prometheus-client
#: chooses its value storage when the first metric is built).
MULTIPROC_DIR: str | None = os.environ.get(MULTIPROC_ENV) or os.environ.get(MULTIPROC_ENV.lower())

ROUTES = frozenset({"chat", "embeddings", "capability"})
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
MAX_NAMES = 1000  # distinct values of one name label (model, endpoint) before new ones become `other`
UNKNOWN = "unknown"
OTHER = "other"

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)

#: Error codes that mean "admission refused this call" (Hearth's own limits, budgets and capacity), as
#: opposed to an upstream's answer or a bad request: ``*_exceeded`` codes plus these.
ADMISSION_CODES = frozenset({"budget_exhausted", "capacity_exhausted", "no_healthy_endpoint",
                             "state_backend_unavailable", "state_backend_reset", "budget_ledger_backlog",
                             "budget_ledger_unavailable"})

#: The event metrics and process gauges of this process (not the library's global registry: importing
#: Hearth registers nothing there).
REGISTRY = CollectorRegistry(auto_describe=True)

# ---- gateway (events) ---------------------------------------------------------------------------------
REQUESTS = Counter("hearth_gateway_requests", "Gateway calls finished, by route, public model and status class "
                   "(route `capability`: capability API requests, whose model calls are counted too).",
                   ("route", "model", "status_class"), registry=REGISTRY)
LATENCY = Histogram("hearth_gateway_request_duration_seconds", "Whole-call latency (admission, attempts, and for "
                    "streams until the last event).", ("route", "model"), buckets=LATENCY_BUCKETS, registry=REGISTRY)
TTFT = Histogram("hearth_gateway_time_to_first_token_seconds", "Streams: time from the request to the first "
                 "upstream event.", ("model",), buckets=TTFT_BUCKETS, registry=REGISTRY)
ADMISSION_REFUSALS = Counter("hearth_gateway_admission_refusals", "Calls refused by Hearth's own admission "
                             "(limits, budgets, capacity, state backend), by error code.", ("reason",),
                             registry=REGISTRY)
FAILOVERS = Counter("hearth_gateway_failovers", "Attempts beyond a call's first (another endpoint or model "
                    "tried after a failure).", ("model",), registry=REGISTRY)
TOKENS = Counter("hearth_gateway_tokens", "Tokens used by gateway calls (estimated where the upstream gave no "
                 "usage).", ("model", "kind"), registry=REGISTRY)
COST = Counter("hearth_gateway_cost", "Cost of gateway calls at the endpoints' prices (currency units).",
               ("model",), registry=REGISTRY)
ATTEMPTS = Counter("hearth_endpoint_attempts", "Upstream attempts by endpoint and outcome (`ok` or the attempt's "
                   "error code: `upstream_rate_limited` starts a cooldown, `upstream_error` counts toward the "
                   "breaker).", ("endpoint", "outcome"), registry=REGISTRY)

# ---- gateway (process gauges, set by the sampler) -----------------------------------------------------
IN_FLIGHT = Gauge("hearth_gateway_in_flight", "Gateway calls in progress (admission, attempts or streaming).",
                  registry=REGISTRY, multiprocess_mode="livesum")
BREAKER = Gauge("hearth_endpoint_breaker_state", "Circuit breaker as this process sees it: 0 closed, 1 half-open, "
                "2 open (the highest over worker processes).", ("endpoint",), registry=REGISTRY,
                multiprocess_mode="livemax")
COOLDOWN = Gauge("hearth_endpoint_cooldown_seconds", "Seconds left of the endpoint's cooldown as this process "
                 "knows it (after a 429 or a refused admission).", ("endpoint",), registry=REGISTRY,
                 multiprocess_mode="livemax")
ENDPOINT_IN_FLIGHT_LOCAL = Gauge("hearth_endpoint_attempts_in_flight", "Attempts in progress on the endpoint from "
                                 "this host's processes.", ("endpoint",), registry=REGISTRY,
                                 multiprocess_mode="livesum")

# ---- writers (process gauges) -------------------------------------------------------------------------
WRITER_BACKLOG = Gauge("hearth_writer_backlog", "Rows waiting in a batch writer's queue.", ("writer",),
                       registry=REGISTRY, multiprocess_mode="livesum")
WRITER_DROPPED = Gauge("hearth_writer_dropped_rows", "Rows a batch writer dropped since the process started "
                       "(queue full).", ("writer",), registry=REGISTRY, multiprocess_mode="sum")
WRITER_DEAD = Gauge("hearth_writer_dead_rows", "Rows the database refused since the process started (kept in "
                    "dead_rows).", ("writer",), registry=REGISTRY, multiprocess_mode="sum")
WRITER_WRITTEN = Gauge("hearth_writer_written_rows", "Rows a batch writer wrote since the process started.",
                       ("writer",), registry=REGISTRY, multiprocess_mode="sum")

# ---- database pool (process gauges) -------------------------------------------------------------------
POOL_IN_USE = Gauge("hearth_database_pool_connections_in_use", "Database connections checked out of this "
                    "process's pool.", registry=REGISTRY, multiprocess_mode="livesum")
POOL_SIZE = Gauge("hearth_database_pool_size", "Connections the pool keeps open (its configured size).",
                  registry=REGISTRY, multiprocess_mode="livesum")

# ---- tasks (events) -----------------------------------------------------------------------------------
TASK_RETRIES = Counter("hearth_task_retries", "Task attempts that failed and were queued again.", ("queue",),
                       registry=REGISTRY)
TASK_LEASE_EXPIRATIONS = Counter("hearth_task_lease_expirations", "Tasks whose worker stopped renewing its lease "
                                 "(requeued, held or failed by the reaper).", ("queue",), registry=REGISTRY)


def status_class(status: int) -> str:
    return STATUS_CLASSES[status // 100 - 1] if 100 <= status < 600 else OTHER


def is_admission_refusal(code: str | None) -> bool:
    return code is not None and (code in ADMISSION_CODES or (code.endswith("_exceeded") and code in CATALOG))


class _Names:
    """A name label's values: what it was given, up to :data:`MAX_NAMES` distinct ones, then ``other``."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def label(self, name: str | None) -> str:
        if not name:
            return UNKNOWN
        if name in self._seen:
            return name
        if len(self._seen) >= MAX_NAMES:
            return OTHER
        self._seen.add(name)
        return name


class _ModelCell:
    """The children of one (route, model, status class): bound once, reused by every call like it."""

    __slots__ = ("capability", "completion_tokens", "cost", "failovers", "latency", "prompt_tokens", "requests",
                 "ttft")

    def __init__(self, route: str, model: str, status: str) -> None:
        self.capability = route == "capability"
        self.requests = REQUESTS.labels(route, model, status)
        self.latency = LATENCY.labels(route, model)
        self.ttft = TTFT.labels(model)
        self.failovers = FAILOVERS.labels(model)
        self.prompt_tokens = TOKENS.labels(model, "prompt")
        self.completion_tokens = TOKENS.labels(model, "completion")
        self.cost = COST.labels(model)


class CallMetrics:
    """The gateway's event metrics, fed one request-log record per finished call (:func:`observe_call`).

    ``in_flight`` is a plain count (``started()`` at a call's start, down again when its record comes),
    turned into the gauge only by the sampler, so a call pays two integer updates for it.
    """

    def __init__(self) -> None:
        self._cells: dict[tuple[str, str | None, int], _ModelCell] = {}
        self._attempts: dict[tuple[str, str | None], Any] = {}
        self._refusals: dict[str, Any] = {}
        self._models = _Names()
        self._endpoints = _Names()
        self.in_flight = 0

    def started(self) -> None:
        self.in_flight += 1

    def observe(self, r: RequestLogRecord) -> None:
        key = (r.route, r.model, r.status)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cell(key)
        cell.requests.inc()
        cell.latency.observe(r.latency_ms / 1000.0)
        if r.error_code is not None and r.status >= 429:
            self._refused(r.error_code)
        if cell.capability:  # its model calls were counted as they finished
            return
        self.in_flight -= 1
        if r.ttft_ms is not None:
            cell.ttft.observe(r.ttft_ms / 1000.0)
        if r.attempts > 1:
            cell.failovers.inc(r.attempts - 1)
        if r.prompt_tokens:
            cell.prompt_tokens.inc(r.prompt_tokens)
        if r.completion_tokens:
            cell.completion_tokens.inc(r.completion_tokens)
        if r.cost > 0:
            cell.cost.inc(r.cost)
        if r.attempt_log:
            attempts = self._attempts
            for a in r.attempt_log:
                akey = (a["endpoint"], a["error_code"])
                child = attempts.get(akey)
                if child is None:
                    child = self._attempt_child(akey)
                child.inc()

    def _cell(self, key: tuple[str, str | None, int]) -> _ModelCell:
        route, model, status = key
        cell = _ModelCell(route if route in ROUTES else OTHER, self._models.label(model), status_class(status))
        if len(self._cells) < 50 * MAX_NAMES:  # the labels are bounded; this bounds the dict's keys as well
            self._cells[key] = cell
        return cell

    def _attempt_child(self, key: tuple[str, str | None]) -> Any:
        endpoint, code = key
        outcome = "ok" if code is None else code if code in CATALOG else OTHER
        child = ATTEMPTS.labels(self._endpoints.label(endpoint), outcome)
        if len(self._attempts) < 50 * MAX_NAMES:
            self._attempts[key] = child
        return child

    def _refused(self, code: str) -> None:
        child = self._refusals.get(code)
        if child is None:
            if not is_admission_refusal(code):
                return
            child = self._refusals[code] = ADMISSION_REFUSALS.labels(code)
        child.inc()


CALLS = CallMetrics()


def observed(record: RequestLogRecord) -> RequestLogRecord:
    """Count a finished call's record (then handed to the request-log writer)."""
    CALLS.observe(record)
    return record


def count_retry(queue: str) -> None:
    TASK_RETRIES.labels(queue).inc()


def count_lease_expirations(queues: Iterable[str], *, configured: Mapping[str, Any]) -> None:
    """One per task whose lease expired; a queue that is not configured here is labelled ``other``."""
    for queue in queues:
        TASK_LEASE_EXPIRATIONS.labels(queue if queue in configured else OTHER).inc()


def prepare_multiprocess_dir(directory: Path) -> None:
    """Create (or empty) the directory several workers' metric files go to, before the workers start: files
    left by an earlier run would otherwise be added to this one's counters."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink(missing_ok=True)


def forget_dead_processes() -> None:
    """Drop the live gauges of worker processes that are gone (a worker uvicorn restarted): their last
    values would otherwise stay in the sums. Their counters stay: what they counted happened."""
    if MULTIPROC_DIR is None:
        return
    pids: set[int] = set()
    for path in Path(MULTIPROC_DIR).glob("gauge_live*_*.db"):
        tail = path.stem.rsplit("_", 1)[-1]
        if tail.isdigit():
            pids.add(int(tail))
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            _multiprocess.mark_process_dead(pid, MULTIPROC_DIR)  # type: ignore[no-untyped-call]
        except PermissionError:  # alive, someone else's
            pass


def exposition(*extra: Collector) -> bytes:
    """The text exposition of every metric: this process's (or, in multiprocess mode, every worker's)
    plus ``extra`` collectors (the cluster gauges, computed once by the scraping process)."""
    if MULTIPROC_DIR is None:
        text = generate_latest(REGISTRY)
    else:
        merged = CollectorRegistry()
        _multiprocess.MultiProcessCollector(merged, MULTIPROC_DIR)  # type: ignore[no-untyped-call]
        text = generate_latest(merged)
    if extra:
        more = CollectorRegistry(auto_describe=False)
        for collector in extra:
            more.register(collector)
        text += generate_latest(more)
    return text
