"""The record of one logical call: who asked, what was decided, what happened — what its log says.

A plain record: the gateway writes it as the call moves on; resources (leases, reservations) are
not here but in :class:`~hearth.gateway.call.Call`, which owns and releases them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from hearth.gateway.budget import Applicable
from hearth.providers.base import HeaderExchange
from hearth.registry.snapshot import Caller, Endpoint


@dataclass(slots=True, frozen=True)
class AttemptRecord:
    """One endpoint tried: how it ended and how long it took (the request log lists them in order).

    ``status`` is the upstream's HTTP status, or the gateway's for what has none: 502 for a network
    failure, 504 for a timeout, 499 when the client left; ``error_code`` is the stable code of that
    outcome (None on success). A stream's attempt lasts until the stream ended."""

    endpoint: str
    status: int
    error_code: str | None
    latency_ms: float


@dataclass(slots=True)
class CallContext:
    request_id: str
    caller: Caller | None
    route: str  # chat | embeddings
    end_user: str | None = None
    tenant: str | None = None
    client_ip: str | None = None
    requested_scene: str | None = None
    stream: bool = False
    include_usage: bool = False  # a stream's caller asked for the usage chunk (stream_options.include_usage)
    started: float = field(default_factory=time.perf_counter)
    deadline: float = 0.0  # time.monotonic() by which the whole call must be over
    attempts: int = 0
    attempt_log: list[AttemptRecord] = field(default_factory=list)
    model: str | None = None
    endpoint: Endpoint | None = None
    ttft_ms: float | None = None
    scene: str | None = None
    attempted_models: list[str] = field(default_factory=list)
    fallback_used: bool = False
    effective_max_tokens: int | None = None
    estimated_cost: float | None = None
    pending_nonce: tuple[str, float] | None = None  # a signed request's nonce, claimed at admission
    timeout_s: float | None = None  # the caller's own deadline: narrows the server's, never widens it
    max_attempts: int | None = None  # the caller's own attempt budget: likewise
    budget_left: list[tuple[Applicable, int]] = field(default_factory=list)  # after settlement (or reservation)
    headers: HeaderExchange | None = None  # client headers forwarded upstream, upstream headers relayed back
    capability: str | None = None  # set by the capability API: which capability and prompt version this call serves
    prompt_code: str | None = None
    prompt_version: int | None = None
    task_id: str | None = None  # set by a task's capability call: the request-log row links task → call
    guardrails: dict[str, Any] | None = None  # guardrail actions taken for the call (counts, rule ids)

    @property
    def caller_name(self) -> str | None:
        return self.caller.name if self.caller is not None else None
