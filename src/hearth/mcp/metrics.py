"""Prometheus metrics of the MCP gateway: tool calls by upstream server and outcome, and their latency.

Labels are bounded: ``server`` is a configured server name (``unknown`` when the caller's name did not
resolve to one), ``outcome`` one of the audit's outcomes. A call costs two prometheus-client updates
(a few µs, next to a tool call's milliseconds).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from hearth.observability.metrics import LATENCY_BUCKETS, REGISTRY, UNKNOWN

CALLS = Counter("hearth_mcp_calls", "MCP tools/call requests, by upstream server and outcome (as audited).",
                ("server", "outcome"), registry=REGISTRY)
LATENCY = Histogram("hearth_mcp_call_duration_seconds", "MCP tools/call time in Hearth, upstream included, by "
                    "upstream server.", ("server",), buckets=LATENCY_BUCKETS, registry=REGISTRY)


def observe_call(server: str | None, outcome: str, seconds: float) -> None:
    name = server or UNKNOWN
    CALLS.labels(name, outcome).inc()
    LATENCY.labels(name).observe(seconds)
