"""Request and answer models of the capability API: they validate bodies (unknown fields refused) and
make ``/openapi.json`` describe every capability for generated clients."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from hearth.api.admin_schemas import ErrorEnvelope
from hearth.capabilities.requests import (
    BillRequest as BillRequest,
)
from hearth.capabilities.requests import (
    CapabilityChatMessage as CapabilityChatMessage,
)
from hearth.capabilities.requests import (
    CapabilityRequest as CapabilityRequest,
)
from hearth.capabilities.requests import (
    ChatRequest as ChatRequest,
)
from hearth.capabilities.requests import (
    ExtractRequest as ExtractRequest,
)
from hearth.capabilities.requests import (
    GenerateRequest as GenerateRequest,
)
from hearth.capabilities.requests import (
    SummarizeRequest as SummarizeRequest,
)


class AttemptView(BaseModel):
    purpose: Literal["initial", "corrective_retry", "moderation_retry", "quality_judge", "quality_regeneration"]
    model: str | None
    endpoint: str | None
    status: int
    error_code: str | None
    prompt_tokens: int
    completion_tokens: int
    cost: float
    latency_ms: float | None = None


class UsageView(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CapabilityData(BaseModel):
    summary: str | None = Field(default=None, description="summarize")
    data: Any = Field(default=None, description="extract, extract/bill: the validated document")
    text: str | None = Field(default=None, description="text/generate")
    message: dict[str, str] | None = Field(default=None, description="chat: the assistant's message")
    usage: UsageView
    cost: float
    model: str | None
    prompt_code: str
    prompt_version: int = Field(description="0: the built-in default prompt")
    locale: str
    scene: str | None
    fallback_used: bool
    attempted_models: list[str]
    effective_max_tokens: int | None
    degraded: bool = Field(description="answered by the local offline engine, not a model")
    degraded_reason: str | None = None
    cache_hit: bool
    attempts: list[AttemptView] = Field(description="every model call made, corrective retries included")
    input_source: Literal["text", "ocr_text", "file_id", "file_url"] | None = None
    quality: list[dict[str, Any]] | None = Field(default=None, description="the quality gate's evaluations, "
                                                 "when the prompt has one")
    replayed: bool | None = Field(default=None, description="chat with request_id: the stored answer, no model call")


class CapabilityEnvelope(BaseModel):
    success: Literal[True]
    data: CapabilityData
    error: None
    request_id: str | None = None


AI_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{code: {"model": ErrorEnvelope} for code in (400, 401, 403, 404, 409, 413, 415, 422, 429, 500, 502, 503, 504)},
    "4XX": {"model": ErrorEnvelope, "description": "Another client error"},
}
