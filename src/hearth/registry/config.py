"""The declarative registry: what the YAML file (and the admin API) may say about providers,
quota groups, endpoints, public models, prices and callers.

Validation happens here, before anything touches the database, so a bad file is refused whole.
Names (and references to names) follow one rule, :mod:`hearth.registry.names`.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hearth.registry.mcp_config import McpServerSpec, check_unique_servers
from hearth.registry.names import ExternalName, RegistryName
from hearth.wire.image_size import MAX_SIDE, parse_size

ProviderKind = Literal["openai", "anthropic", "simulated"]
Capability = Literal["chat", "streaming", "tools", "json", "vision", "embeddings", "images"]
_SUBJECT = r"^[^\x00-\x1f\x7f]{1,256}$"  # a tenant or end-user id (from a header), or "*"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


# Client request headers never forwarded upstream, even when a provider lists them: credentials and
# cookies (the caller's, not the upstream's), hop-by-hop headers (RFC 9110 §7.6.1), Hearth's own
# x-hearth-* headers, and those Hearth sets itself for the upstream request.
NEVER_FORWARDED = frozenset({
    "authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key", "api-key",
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding", "upgrade",
    "host", "content-length", "content-type", "content-encoding", "accept", "accept-encoding",
    "anthropic-version", "x-request-id",
})
_HEADER_NAME = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]{1,128}$")  # an RFC 9110 token, lower-cased


class ProviderSpec(_Strict):
    name: RegistryName
    kind: ProviderKind
    base_url: str | None = None
    enabled: bool = True
    forward_headers: list[str] = Field(
        default_factory=list, description="client request headers sent on to this provider's upstreams "
        "(an allowlist, empty by default); credentials, cookies, hop-by-hop and x-hearth-* headers are refused")
    relay_ratelimit_headers: bool = Field(
        default=False, description="relay the upstream's `x-ratelimit-*` response headers to the caller "
        "(non-stream answers and streams)")

    @field_validator("forward_headers")
    @classmethod
    def _forwardable(cls, names: list[str]) -> list[str]:
        out: list[str] = []
        for raw in names:
            name = raw.strip().lower()
            if not _HEADER_NAME.fullmatch(name):
                raise ValueError(f"forward_headers: {raw!r} is not a header name")
            if name in NEVER_FORWARDED or name.startswith(("x-hearth-", "sec-", "proxy-")):
                raise ValueError(f"forward_headers: {name!r} is never forwarded upstream (a credential, a "
                                 "cookie, a hop-by-hop header, Hearth's own, or one Hearth sets itself)")
            if name not in out:
                out.append(name)
        return out


class QuotaGroupSpec(_Strict):
    """Limits of a provider account shared by several endpoints' keys (0 = unlimited)."""

    name: RegistryName
    max_concurrency: int = Field(default=0, ge=0)
    rpm: int = Field(default=0, ge=0)
    tpm: int = Field(default=0, ge=0)
    daily_tokens: int = Field(default=0, ge=0)


class EndpointSpec(_Strict):
    """One (base_url, key, upstream model). ``api_key`` omitted → the stored key is kept."""

    name: RegistryName
    provider: RegistryName
    upstream_model: ExternalName
    base_url: str | None = None
    api_key: str | None = Field(default=None, repr=False)
    quota_group: RegistryName | None = None
    max_concurrency: int = Field(default=0, ge=0)
    rpm: int = Field(default=0, ge=0)
    tpm: int = Field(default=0, ge=0)
    weight: float = Field(default=1.0, gt=0)
    priority: int = 0
    timeout_s: float = Field(default=60.0, gt=0, description="a non-stream answer's whole time; a stream's time "
                             "to its first event unless `first_token_timeout_s` narrows it (both within the "
                             "call's deadline)")
    first_token_timeout_s: float | None = Field(
        default=None, gt=0, description="a stream's longest wait for its first event (connect, headers, first "
        "token); at most `timeout_s`, which it defaults to. The idle timeout plays no part before the first event")
    stream_idle_timeout_s: float | None = Field(
        default=None, gt=0, description="after a stream's first event, the longest silence between events; "
        "default HEARTH_STREAM_IDLE_TIMEOUT_S")
    capabilities: list[Capability] = Field(default_factory=lambda: list[Capability](["chat", "streaming"]))
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = Field(
        default="max_tokens", description="the name this upstream reads for the output limit: a scene's "
        "injected cap and a caller's `max_tokens` are sent under it (OpenAI's reasoning models read only "
        "`max_completion_tokens`)")
    enabled: bool = True
    image_sizes: list[str] | None = Field(
        default=None, description="the sizes (`WIDTHxHEIGHT`) an `images` endpoint can draw; a request for "
        "another size is routed elsewhere (400 `unsupported_feature` if no endpoint has it); unset: any size")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("base_url must start with http:// or https://")
        return v.rstrip("/") if v else v

    @field_validator("image_sizes")
    @classmethod
    def _sizes(cls, sizes: list[str] | None) -> list[str] | None:
        if sizes is None:
            return None
        for size in sizes:
            if parse_size(size) is None:
                raise ValueError(f"image_sizes: {size!r} is not WIDTHxHEIGHT (e.g. 1024x1024, each side at most "
                                 f"{MAX_SIDE})")
        return sorted(set(sizes))

    @model_validator(mode="after")
    def _sizes_need_images(self) -> EndpointSpec:
        if self.image_sizes is not None and "images" not in self.capabilities:
            raise ValueError("image_sizes is set but the endpoint has no `images` capability")
        return self

    @model_validator(mode="after")
    def _first_token_within_timeout(self) -> EndpointSpec:
        # the first event is also bounded by timeout_s: a longer value would be silently cut short
        if self.first_token_timeout_s is not None and self.first_token_timeout_s > self.timeout_s:
            raise ValueError(f"first_token_timeout_s ({self.first_token_timeout_s}) must not exceed timeout_s "
                             f"({self.timeout_s})")
        return self


class ModelSpec(_Strict):
    """A public model name and the pool of endpoints that can serve it."""

    name: RegistryName
    endpoints: list[RegistryName] = Field(min_length=1)
    kind: Literal["chat", "embedding", "image"] = "chat"
    description: str | None = None
    expose_upstream_model: bool = Field(
        default=False, description="answers show the upstream's own model name in `model` (by default they "
        "show this public name; the upstream's is always in the `x-hearth-upstream-model` header)")
    enabled: bool = True


class PriceSpec(_Strict):
    """Price per 1M tokens, looked up by endpoint name, then upstream model, then public model."""

    model: ExternalName
    input_per_1m: float = Field(ge=0)
    output_per_1m: float = Field(ge=0)
    currency: str = "USD"
    per_image: float | None = Field(default=None, ge=0, description="price of one generated image (an `image` "
                                    "model's endpoints; the prompt's tokens are still priced at `input_per_1m`)")


class LimitSetSpec(_Strict):
    """Limits for one subject (0 = unlimited). ``stream_concurrency`` counts streaming generations."""

    rpm: int = Field(default=0, ge=0)
    tpm: int = Field(default=0, ge=0)
    concurrency: int = Field(default=0, ge=0)
    stream_concurrency: int = Field(default=0, ge=0)


def _default_user_limits() -> LimitSetSpec:
    return LimitSetSpec(stream_concurrency=1)


class CallerLimitsSpec(_Strict):
    """Limits applied to the caller as a whole, to each tenant, each end user and each client IP."""

    caller: LimitSetSpec = Field(default_factory=LimitSetSpec)
    tenant: LimitSetSpec = Field(default_factory=LimitSetSpec)
    user: LimitSetSpec = Field(default_factory=_default_user_limits)
    ip: LimitSetSpec = Field(default_factory=LimitSetSpec)


class CallerSpec(_Strict):
    """An internal application. ``key``/``signing_key`` omitted → the stored ones are kept."""

    name: RegistryName
    key: str | None = Field(default=None, min_length=8, repr=False)
    enabled: bool = True
    allowed_models: list[RegistryName] | None = None
    allowed_scenes: list[RegistryName] | None = None
    default_scene: RegistryName | None = None
    signing_key: str | None = Field(default=None, min_length=16, repr=False)
    require_signature: bool = False
    limits: CallerLimitsSpec = Field(default_factory=CallerLimitsSpec)


class SceneGuardrailsSpec(_Strict):
    """What the capability API does around a scene's model calls (seed 002 §9); everything off by default."""

    redact_pii: list[Literal["phone", "id_card", "email", "bank_card"]] | bool = Field(
        default_factory=list, description="PII kinds replaced by placeholders before the model (true: all)")
    restore_pii: bool = Field(default=False, description="put the originals back into the answer")
    injection: Literal["off", "flag", "block"] = "off"
    moderation_terms: list[str] = Field(default_factory=list, description="terms the answer must not contain")
    moderation_action: Literal["block", "regenerate"] = "block"


class SceneSpec(_Strict):
    """A business purpose: its default model, which models it may use, a max_tokens cap, fallbacks."""

    name: RegistryName
    default_model: RegistryName
    allowed_models: list[RegistryName] = Field(default_factory=list)
    max_tokens_cap: int | None = Field(default=None, ge=1)
    fallback_models: list[RegistryName] = Field(default_factory=list)
    enabled: bool = True
    guardrails: SceneGuardrailsSpec | None = Field(default=None, description="capability API guardrails")
    cache_ttl_s: float | None = Field(default=None, gt=0, le=7 * 86400, description="capability API response "
                                      "cache: identical (model, prompt version, messages, parameters) within this "
                                      "many seconds answers from the cache, with no model call and no charge")

    @model_validator(mode="after")
    def _default_is_allowed(self) -> SceneSpec:
        if self.default_model not in self.allowed_models:
            self.allowed_models = [self.default_model, *self.allowed_models]
        return self


class BudgetSpec(_Strict):
    """A hard spending limit. ``subject: "*"`` gives *each* tenant/user of the caller its own budget.

    ``limit`` is in the price table's currency for ``unit: money`` and in tokens for ``unit: tokens``.
    """

    name: RegistryName
    caller: RegistryName | Literal["*"] = "*"
    scope: Literal["caller", "tenant", "user"] = "caller"
    subject: str = Field(default="*", pattern=_SUBJECT)
    period: Literal["day", "month", "total"] = "day"
    unit: Literal["money", "tokens"] = "money"
    limit: float = Field(ge=0)
    enabled: bool = True
    estimate: Literal["bound", "approx"] = Field(
        default="bound", description="how a call's prompt is reserved: `bound` — its UTF-8 size, an upper "
        "bound for byte-level BPE tokenizers, so the budget is never overrun; `approx` — the cheaper ~4 "
        "characters per token estimate, which reserves less but can be overrun (the overrun is charged)")


class RegistrySpec(_Strict):
    """The whole file. An unknown top-level section (a typo such as ``endpiont:``) is refused, never
    silently skipped; ``server:`` holds the process settings, read by :mod:`hearth.settings`."""

    server: dict[str, Any] | None = None
    providers: list[ProviderSpec] = Field(default_factory=list)
    quota_groups: list[QuotaGroupSpec] = Field(default_factory=list)
    endpoints: list[EndpointSpec] = Field(default_factory=list)
    models: list[ModelSpec] = Field(default_factory=list)
    prices: list[PriceSpec] = Field(default_factory=list)
    callers: list[CallerSpec] = Field(default_factory=list)
    scenes: list[SceneSpec] = Field(default_factory=list)
    budgets: list[BudgetSpec] = Field(default_factory=list)
    # Workflow definitions (docs/workflows.md), checked and stored by hearth.workflows.file_apply — which
    # knows the task types and registered workflows — never by apply_registry.
    workflows: list[Any] = Field(default_factory=list)
    # Upstream MCP servers and their tool policy (docs/mcp.md), stored by hearth.mcp.server_store.
    mcp_servers: list[McpServerSpec] = Field(default_factory=list)

    @model_validator(mode="after")
    def _references_resolve(self) -> RegistrySpec:
        """Names must be unique and references must point inside the file or be checked later."""
        for label, items in (("provider", self.providers), ("quota group", self.quota_groups),
                             ("endpoint", self.endpoints), ("model", self.models),
                             ("caller", self.callers), ("scene", self.scenes), ("budget", self.budgets)):
            seen: set[str] = set()
            for item in items:
                if item.name in seen:
                    raise ValueError(f"duplicate {label} name {item.name!r}")
                seen.add(item.name)
        currencies = sorted({p.currency for p in self.prices})
        if len(currencies) > 1:
            # money budgets add up the costs of every call whatever its price's currency
            raise ValueError(f"prices use more than one currency ({', '.join(currencies)}): money budgets "
                             "would add them up; use one currency for every price")
        check_unique_servers(self.mcp_servers)
        return self
