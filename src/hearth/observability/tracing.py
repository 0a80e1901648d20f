"""OpenTelemetry traces, optional: spans per HTTP request, gateway call and attempt, task and workflow pass.

Tracing is **off** unless an OTLP endpoint is configured (``HEARTH_OTEL_ENDPOINT``, else the standard
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_ENDPOINT``), and off it costs nothing on the hot
path: ``opentelemetry`` is never imported, no span object is made, no context is propagated. Every hook
reads the module attribute :data:`active` (``tracing.active``, never imported by name: it changes when
tracing starts) and does nothing more when it is None; the request middleware is not even installed.

The SDK (``pip install 'hearth[otel]'``) is imported by :func:`start_tracing` only. A process that was
asked for traces by ``HEARTH_OTEL_ENDPOINT`` and lacks it refuses to start (the operator asked for something
it cannot give); one that merely inherits the standard ``OTEL_*`` variables starts without traces and says so.

Spans are parented explicitly (:data:`parent` is the span new work hangs under: the request's, a task's, a
workflow pass's), never through OpenTelemetry's global context, so a call's span and its attempts' can start
and end in different asyncio tasks (a stream's relay closes its call from the response) without attach/detach
bookkeeping. Hearth keeps its own :class:`TracerProvider` (not the global one), so nothing else in the process
is traced by accident.

Attributes are bounded: configured names (models, endpoints, callers, task types, workflow steps), ids Hearth
made or validated, statuses and counts — never prompt text, payloads, user ids or secrets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING

from hearth import __version__
from hearth.observability.logging import get_logger
from hearth.settings import Settings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, SpanContext, Tracer

log = get_logger("hearth.tracing")

ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
Attributes = Mapping[str, str | bool | int | float | None]  # a None value is left out
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$")

# The span new work hangs under (set by the request middleware, a task's execution, a workflow pass).
parent: ContextVar[Span | None] = ContextVar("hearth_trace_parent", default=None)


class Tracing:
    """The process's tracer: starts spans under explicit parents, reads and writes ``traceparent``."""

    __slots__ = ("_provider", "propagate_upstream", "tracer")

    def __init__(self, provider: TracerProvider, *, propagate_upstream: bool) -> None:
        self._provider = provider
        self.tracer: Tracer = provider.get_tracer("hearth", __version__)
        self.propagate_upstream = propagate_upstream

    def start(self, name: str, *, under: Span | SpanContext | None, kind: str = "internal",
              attributes: Attributes | None = None, links: Sequence[SpanContext] = (),
              start_time: float | None = None) -> Span:
        """A started span, child of ``under`` (a span, a remote span context, or None for a new trace);
        ``links`` are span contexts it relates to without being their child; ``start_time`` in epoch seconds."""
        from opentelemetry import trace

        context = None
        if under is not None:
            span = under if isinstance(under, trace.Span) else trace.NonRecordingSpan(under)
            context = trace.set_span_in_context(span)
        return self.tracer.start_span(name, context=context, kind=trace.SpanKind[kind.upper()],
                                      attributes=_present(attributes),
                                      links=[trace.Link(c) for c in links],
                                      start_time=int(start_time * 1e9) if start_time is not None else None)

    def flush(self, timeout_s: float = 5.0) -> None:
        self._provider.force_flush(int(timeout_s * 1000))

    def shutdown(self) -> None:
        self._provider.shutdown()


active: Tracing | None = None  # read as ``tracing.active``; None: tracing is off


def configured_endpoint(settings: Settings) -> str | None:
    """Where traces go, or None (tracing off): ``otel_endpoint``, else the standard ``OTEL_*`` variables."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    if settings.otel_endpoint:
        return settings.otel_endpoint
    for name in ENV_ENDPOINTS:
        if os.environ.get(name, "").strip():
            return os.environ[name].strip()
    return None


def start_tracing(settings: Settings, *, exporter: SpanExporter | None = None) -> Tracing | None:
    """Start tracing for this process if it is configured (or ``exporter`` is given: tests pass the SDK's
    in-memory one, exported synchronously); the running :class:`Tracing` if it was started already."""
    global active
    if active is not None:
        return active
    endpoint = configured_endpoint(settings) if exporter is None else None
    if exporter is None and endpoint is None:
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    except ImportError as exc:
        if settings.otel_endpoint:
            raise SystemExit("HEARTH_OTEL_ENDPOINT is set but OpenTelemetry is not installed: "
                             "pip install 'hearth[otel]'") from exc
        log.warning("tracing_unavailable", reason="OTEL_EXPORTER_OTLP_ENDPOINT is set but OpenTelemetry is not "
                    "installed (pip install 'hearth[otel]'); running without traces")
        return None
    provider = TracerProvider(resource=Resource.create({"service.name": "hearth", "service.version": __version__}),
                              shutdown_on_exit=False)
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        provider.add_span_processor(BatchSpanProcessor(_otlp_exporter(settings)))
        log.info("tracing_started", endpoint=endpoint, propagate_upstream=settings.otel_propagate_upstream)
    active = Tracing(provider, propagate_upstream=settings.otel_propagate_upstream)
    return active


def _otlp_exporter(settings: Settings) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    if not settings.otel_endpoint:
        return OTLPSpanExporter()  # reads the OTEL_EXPORTER_OTLP_* variables itself (path, headers, timeout)
    url = settings.otel_endpoint.rstrip("/")
    return OTLPSpanExporter(endpoint=url if url.endswith("/v1/traces") else url + "/v1/traces")


def stop_tracing() -> None:
    """Export what is buffered and stop (a process's last act; a later :func:`start_tracing` starts anew)."""
    global active
    tracing, active = active, None
    if tracing is not None:
        tracing.shutdown()


# ---- W3C trace context -----------------------------------------------------------------------------------

def remote_parent(header: str | bytes | None) -> SpanContext | None:
    """The caller's span from a W3C ``traceparent`` header (version 00), or None if absent or invalid."""
    if header is None:
        return None
    if isinstance(header, bytes):
        header = header.decode("latin-1")
    m = _TRACEPARENT.fullmatch(header.strip().lower())
    if m is None or int(m[1], 16) == 0 or int(m[2], 16) == 0:
        return None
    from opentelemetry.trace import SpanContext, TraceFlags

    return SpanContext(int(m[1], 16), int(m[2], 16), is_remote=True, trace_flags=TraceFlags(int(m[3], 16)))


def traceparent(span: Span) -> str | None:
    """The W3C ``traceparent`` naming ``span`` (None for an invalid span)."""
    sc = span.get_span_context()
    if not sc.is_valid:
        return None
    return f"00-{sc.trace_id:032x}-{sc.span_id:016x}-{int(sc.trace_flags):02x}"


def current_traceparent() -> str | None:
    """The ``traceparent`` of the span new work hangs under now, or None (tracing off, or no span): what a
    submitted task keeps, so the worker's span links to the request that submitted it."""
    if active is None:
        return None
    span = parent.get()
    return traceparent(span) if span is not None else None


def end(span: Span, *, error: str | None = None, attributes: Attributes | None = None,
        end_time: float | None = None) -> None:
    """Set ``attributes``, mark the span failed with the stable ``error`` code (if any), end it."""
    from opentelemetry.trace import Status, StatusCode

    present = _present(attributes)
    if present:
        span.set_attributes(present)
    if error is not None:
        span.set_attribute("hearth.error_code", error)
        span.set_status(Status(StatusCode.ERROR, error))
    span.end(end_time=int(end_time * 1e9) if end_time is not None else None)


def _present(attributes: Attributes | None) -> dict[str, str | bool | int | float] | None:
    return {k: v for k, v in attributes.items() if v is not None} if attributes else None
