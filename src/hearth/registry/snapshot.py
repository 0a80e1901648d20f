"""The in-memory registry snapshot the hot path reads: no database access per request.

A snapshot is immutable once built; a change (admin API, ``hearth apply``, an endpoint disabled
after a 401) builds a new one and swaps it in. Decrypted provider keys live only here, in memory,
and are excluded from ``repr`` so they cannot leak through a log or a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, frozen=True)
class QuotaGroup:
    name: str
    max_concurrency: int = 0
    rpm: int = 0
    tpm: int = 0
    daily_tokens: int = 0


@dataclass(slots=True, frozen=True)
class Endpoint:
    name: str
    provider: str
    kind: str
    base_url: str
    upstream_model: str
    api_key: str | None = field(default=None, repr=False)
    api_key_hint: str | None = None
    key_version: int = 1
    quota_group: QuotaGroup | None = None
    max_concurrency: int = 0
    rpm: int = 0
    tpm: int = 0
    weight: float = 1.0
    priority: int = 0
    timeout_s: float = 60.0
    capabilities: frozenset[str] = frozenset({"chat", "streaming"})
    enabled: bool = True
    disabled_reason: str | None = None
    disabled_by: str | None = None  # config | gateway | admin | provider (see registry/endpoint_holds.py)
    max_tokens_field: str = "max_tokens"  # or "max_completion_tokens": the name the upstream reads
    first_token_timeout_s: float | None = None  # a stream's wait for its first event; None: timeout_s
    stream_idle_timeout_s: float | None = None  # silence allowed between events; None: the setting
    forward_headers: tuple[str, ...] = ()  # its provider's: client headers sent upstream (lower-case names)
    relay_ratelimit_headers: bool = False  # its provider's: the upstream's x-ratelimit-* go back to the caller
    image_sizes: frozenset[str] | None = None  # an `images` endpoint's sizes (WIDTHxHEIGHT); None: any size


@dataclass(slots=True, frozen=True)
class Model:
    name: str
    kind: str
    endpoints: tuple[Endpoint, ...]
    description: str | None = None
    enabled: bool = True
    expose_upstream_model: bool = False  # answers' `model` shows the upstream's name instead of this one


@dataclass(slots=True, frozen=True)
class Price:
    model: str
    input_per_1m: float
    output_per_1m: float
    currency: str = "USD"
    per_image: float = 0.0  # one generated image

    def cost(self, prompt_tokens: int, completion_tokens: int, images: int = 0) -> float:
        return (prompt_tokens * self.input_per_1m + completion_tokens * self.output_per_1m) / 1_000_000 \
            + images * self.per_image


@dataclass(slots=True, frozen=True)
class LimitSet:
    rpm: int = 0
    tpm: int = 0
    concurrency: int = 0
    stream_concurrency: int = 0


@dataclass(slots=True, frozen=True)
class CallerLimits:
    caller: LimitSet = LimitSet()
    tenant: LimitSet = LimitSet()
    user: LimitSet = LimitSet(stream_concurrency=1)
    ip: LimitSet = LimitSet()


@dataclass(slots=True, frozen=True)
class Caller:
    name: str
    enabled: bool = True
    allowed_models: frozenset[str] | None = None
    allowed_scenes: frozenset[str] | None = None
    default_scene: str | None = None
    signing_key: str | None = field(default=None, repr=False)
    require_signature: bool = False
    limits: CallerLimits = CallerLimits()


@dataclass(slots=True, frozen=True)
class Scene:
    name: str
    default_model: str
    allowed_models: frozenset[str]
    max_tokens_cap: int | None = None
    fallback_models: tuple[str, ...] = ()
    enabled: bool = True
    guardrails: Mapping[str, Any] | None = None  # SceneGuardrailsSpec as a dict (the capability API applies it)
    cache_ttl_s: float | None = None


MICRO = 1_000_000  # money amounts are integers in millionths of the currency unit


@dataclass(slots=True, frozen=True)
class Budget:
    name: str
    caller: str
    scope: str  # caller | tenant | user
    subject: str  # an id, or "*" for each
    period: str  # day | month | total
    unit: str  # money (micro-units) | tokens
    limit: int
    estimate: str = "bound"  # bound (never overrun) | approx (cheaper, may overrun)


@dataclass(slots=True)
class Registry:
    version: int = 0
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    models: dict[str, Model] = field(default_factory=dict)
    prices: dict[str, Price] = field(default_factory=dict)
    callers_by_key_hash: dict[str, Caller] = field(default_factory=dict)
    callers_by_name: dict[str, Caller] = field(default_factory=dict)
    scenes: dict[str, Scene] = field(default_factory=dict)
    budgets: tuple[Budget, ...] = ()
    created_at: int = 0
    enabled_providers: frozenset[str] = frozenset()  # for the start-up check (registry/serviceable.py)

    def price_for(self, endpoint: Endpoint, public_model: str) -> Price | None:
        p = self.prices
        return p.get(endpoint.name) or p.get(endpoint.upstream_model) or p.get(public_model)

    def healthy_endpoint_count(self) -> int:
        return sum(1 for e in self.endpoints.values() if e.enabled)
