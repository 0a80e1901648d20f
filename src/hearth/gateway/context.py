"""The state of one logical call as it moves through the gateway; what its request log records."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hearth.gateway.caller_admission import CallerGrant
from hearth.registry.snapshot import Caller, Endpoint


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
    started: float = field(default_factory=time.perf_counter)
    deadline: float = 0.0
    attempts: int = 0
    model: str | None = None
    endpoint: Endpoint | None = None
    ttft_ms: float | None = None
    scene: str | None = None
    attempted_models: list[str] = field(default_factory=list)
    fallback_used: bool = False
    effective_max_tokens: int | None = None
    estimated_cost: float | None = None
    grant: CallerGrant | None = None
    pending_nonce: tuple[str, float] | None = None  # a signed request's nonce, claimed at admission

    @property
    def caller_name(self) -> str | None:
        return self.caller.name if self.caller is not None else None
