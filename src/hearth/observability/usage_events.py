"""The ``AIUsageRecorded`` event (seed 002 §3.3, §5.2): what one settled gateway call used.

An event is built from the call's request-log record, off the hot path (by the outbox writer, after the
request-log writer wrote the record's batch). Only gateway calls are announced: the ``capability`` rows
sum their calls' usage, so announcing them too would count every token twice.

**The event id** is assigned once, when the settled call is handed to the outbox, and stored with each
sink's row: every delivery of the event (each retry, each sink) carries the same id, which is the
consumer's deduplication key (NATS ``Nats-Msg-Id``, AMQP ``message_id``, the webhook body). It is the
process-unique call id of :mod:`hearth.ids` written as a UUID (8-4-4-4-12 hex digits).

**degraded** is true when the call was served by a fallback model (the scene's route fell back) or the
record says so. ``provider`` is the name of the endpoint's provider in the registry (``None`` when the
call never reached an endpoint, e.g. refused at admission).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from hearth.ids import new_id
from hearth.observability.request_log import RequestLogRecord

EVENT_TYPE = "AIUsageRecorded"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MILLISECOND = timedelta(milliseconds=1)

#: ``endpoint name → provider name`` as the registry says now (the relay looks it up, not the hot path).
ProviderOf = Callable[[str], str | None]


def new_event_id() -> str:
    """A new event id: unique across processes (see :mod:`hearth.ids`), in UUID form."""
    h = new_id()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def is_settled_call(record: RequestLogRecord) -> bool:
    """Whether ``record`` is a gateway call's (announced), not a capability's sum of calls (not announced)."""
    return record.route != "capability"


def usage_event(record: RequestLogRecord, *, event_id: str, provider_of: ProviderOf) -> dict[str, Any]:
    """The event for one settled call, as JSON-ready values (``occurred_at``: Unix milliseconds)."""
    created = record.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    occurred_ms = (created - _EPOCH) // _MILLISECOND
    operation = record.capability or record.route
    success = record.status < 400
    return {
        "event_type": EVENT_TYPE,
        "event_id": event_id,
        "aggregate_id": record.task_id or record.request_id,
        "occurred_at": occurred_ms,
        "occurred_at_iso": created.isoformat(),
        "caller": record.caller,
        "tenant": record.tenant,
        "user": record.end_user,
        "request_id": record.request_id,
        "task_id": record.task_id,
        "provider": provider_of(record.endpoint) if record.endpoint else None,
        "endpoint": record.endpoint,
        "model": record.model,
        "upstream_model": record.upstream_model,
        "operation": operation,
        "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens,
        "total_tokens": record.prompt_tokens + record.completion_tokens,
        "usage_estimated": record.usage_estimated,
        "latency_ms": round(record.latency_ms, 3),
        "cost": record.cost,
        "success": success,
        "degraded": bool(record.degraded) or record.fallback_used,
        "status": record.status,
        "error_code": record.error_code,
        "metadata": {"route": record.route, "stream": record.stream, "scene": record.scene,
                     "attempts": record.attempts, "prompt_code": record.prompt_code,
                     "prompt_version": record.prompt_version},
    }
