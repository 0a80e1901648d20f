"""Prometheus metrics: what is counted per event, with bounded labels, and how it is exposed.

Three kinds of metric live here:

* **event metrics** — counted where the event happens: gateway calls (from the request-log record every
  call already builds, :func:`observed`), task retries and lease expirations. A call costs a dict lookup
  of its cell (label children bound once) and a few additions to plain numbers, which
  :meth:`CallMetrics.flush` moves into the prometheus values before a scrape;
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
from bisect import bisect_left
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

#: The request log's routes, one per door onto the gateway core (anything else is labelled ``other``).
ROUTES = frozenset({
    "chat", "embeddings", "capability",  # /v1/chat/completions, /v1/embeddings, /api/v1/ai/*
    "responses", "completions",  # the Responses API and legacy completions (docs/responses.md)
    "messages",  # the Anthropic Messages door (docs/anthropic.md)
    "images",  # /v1/images/generations (docs/images.md)
    "batch",  # each line of a batch (docs/batches.md): one gateway call
    "grpc",  # the gRPC door's Chat and StreamChat (docs/grpc.md)
    "endpoint_test",  # an operator's test call of one endpoint (docs/console.md)
})
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


class _Histogram:
    """A histogram counted in plain Python (a C bisect and two additions per value), moved into its
    prometheus child by :meth:`flush` (that child's bucket and sum values: prometheus-client has no public
    way to add many observations at once)."""

    __slots__ = ("bounds", "child", "counts", "sent", "sent_sum", "sum")

    def __init__(self, child: Any, bounds: tuple[float, ...]) -> None:
        self.child = child
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one: +Inf
        self.sent = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.sent_sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def flush(self) -> None:
        counts, sent, buckets = self.counts, self.sent, self.child._buckets
        for i, n in enumerate(counts):
            if n != sent[i]:
                buckets[i].inc(n - sent[i])
                sent[i] = n
        total = self.sum
        if total != self.sent_sum:
            self.child._sum.inc(total - self.sent_sum)
            self.sent_sum = total


class _ModelCell:
    """What one (route, model, status) has counted: plain numbers on the call path, moved into the label
    children (bound once) by :meth:`flush` — each figure keeps what it sent, so a flush never loses a count
    made meanwhile (servers in threads share these cells)."""

    __slots__ = ("_children", "capability", "completion", "cost", "failovers", "latency", "prompt", "requests", "sent",
                 "ttft")

    def __init__(self, route: str, model: str, status: str) -> None:
        self.capability = route == "capability"
        self.requests = self.failovers = self.prompt = self.completion = 0
        self.cost = 0.0
        self.sent: list[float] = [0, 0, 0, 0, 0.0]
        self.latency = _Histogram(LATENCY.labels(route, model), LATENCY_BUCKETS)
        self.ttft = _Histogram(TTFT.labels(model), TTFT_BUCKETS)
        self._children = (REQUESTS.labels(route, model, status), FAILOVERS.labels(model),
                          TOKENS.labels(model, "prompt"), TOKENS.labels(model, "completion"), COST.labels(model))

    def flush(self) -> None:
        sent = self.sent
        for i, (child, now) in enumerate(zip(self._children, (self.requests, self.failovers, self.prompt,
                                                               self.completion, self.cost), strict=True)):
            if now != sent[i]:
                child.inc(now - sent[i])
                sent[i] = now
        self.latency.flush()
        self.ttft.flush()


class _Tally:
    """One counter child counted in plain Python, moved into the child by :meth:`flush`."""

    __slots__ = ("child", "n", "sent")

    def __init__(self, child: Any) -> None:
        self.child = child
        self.n = 0
        self.sent = 0

    def flush(self) -> None:
        n = self.n
        if n != self.sent:
            self.child.inc(n - self.sent)
            self.sent = n


_MAX_KEYS = 50 * MAX_NAMES  # the labels are bounded; this bounds the lookup dicts' raw keys as well


class CallMetrics:
    """The gateway's event metrics, fed one request-log record per finished call (:func:`observed`).

    The call path only adds to plain numbers (about a microsecond per call); :meth:`flush` moves them into
    the prometheus children — before every scrape, and with several workers every second in each worker.
    ``in_flight`` is a plain count too (up in ``Gateway._call``, down when the call's record comes).
    """

    def __init__(self) -> None:
        self._cells: dict[tuple[str, str | None, int], _ModelCell] = {}  # what a record says → its cell
        self._by_labels: dict[tuple[str, str, str], _ModelCell] = {}
        self._attempts: dict[tuple[str, str | None], _Tally] = {}
        self._attempts_by_labels: dict[tuple[str, str], _Tally] = {}
        self._refusals: dict[str, _Tally] = {}
        self._models = _Names()
        self._endpoints = _Names()
        self.in_flight = 0

    def observe(self, r: RequestLogRecord) -> None:
        key = (r.route, r.model, r.status)
        cell = self._cells.get(key)
        if cell is None:
            cell = self._cell(key)
        cell.requests += 1
        cell.latency.observe(r.latency_ms / 1000.0)
        if r.error_code is not None and r.status >= 429:
            self._refused(r.error_code)
        if cell.capability:  # its model calls were counted as they finished
            return
        self.in_flight -= 1
        if r.ttft_ms is not None:
            cell.ttft.observe(r.ttft_ms / 1000.0)
        if r.attempts > 1:
            cell.failovers += r.attempts - 1
        cell.prompt += r.prompt_tokens
        cell.completion += r.completion_tokens
        cell.cost += r.cost
        if r.attempt_log:
            attempts = self._attempts
            for a in r.attempt_log:
                akey = (a["endpoint"], a["error_code"])
                tally = attempts.get(akey)
                if tally is None:
                    tally = self._attempt_tally(akey)
                tally.n += 1

    def flush(self) -> None:
        for cell in list(self._by_labels.values()):
            cell.flush()
        for tally in [*self._attempts_by_labels.values(), *self._refusals.values()]:
            tally.flush()

    def _cell(self, key: tuple[str, str | None, int]) -> _ModelCell:
        route, model, status = key
        labels = (route if route in ROUTES else OTHER, self._models.label(model), status_class(status))
        cell = self._by_labels.get(labels)
        if cell is None:  # another key may have the same labels (500 and 503 are both 5xx): one cell for both
            cell = self._by_labels[labels] = _ModelCell(*labels)
        if len(self._cells) < _MAX_KEYS:
            self._cells[key] = cell
        return cell

    def _attempt_tally(self, key: tuple[str, str | None]) -> _Tally:
        endpoint, code = key
        labels = (self._endpoints.label(endpoint), "ok" if code is None else code if code in CATALOG else OTHER)
        tally = self._attempts_by_labels.get(labels)
        if tally is None:
            tally = self._attempts_by_labels[labels] = _Tally(ATTEMPTS.labels(*labels))
        if len(self._attempts) < _MAX_KEYS:
            self._attempts[key] = tally
        return tally

    def _refused(self, code: str) -> None:
        tally = self._refusals.get(code)
        if tally is None:
            if not is_admission_refusal(code):
                return
            tally = self._refusals[code] = _Tally(ADMISSION_REFUSALS.labels(code))
        tally.n += 1


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
    CALLS.flush()
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
