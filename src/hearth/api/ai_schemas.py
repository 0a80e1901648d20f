"""Request and answer models of the capability API: they validate bodies (unknown fields refused) and
make ``/openapi.json`` describe every capability for generated clients."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hearth.api.admin_schemas import ErrorEnvelope


class CapabilityRequest(BaseModel):
    """The fields every capability request takes."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    locale: str | None = Field(default=None, max_length=35, description="e.g. `zh-CN`: picks the prompt's "
                               "localized content (zh-CN → zh → the prompt's default)", examples=["zh-CN"])
    scene: str | None = Field(default=None, max_length=128, description="the business scene (model rules)")
    model: str | None = Field(default=None, max_length=128, description="a public model name allowed in the scene; "
                              "default: the prompt's, the role's, or the scene's default model")
    max_tokens: int | None = Field(default=None, ge=1, le=2**31 - 1)
    user: str | None = Field(default=None, max_length=256, description="the end user (limits, budgets)")
    tenant: str | None = Field(default=None, max_length=256)
    prompt_code: str | None = Field(default=None, max_length=128, description="default: the capability's own")
    variables: dict[str, Any] | None = Field(default=None, description="the prompt's declared variables")


class _Input(CapabilityRequest):
    text: str | None = Field(default=None, description="the input text (first of text, ocr_text, file_id, "
                             "file_url that is given)")
    ocr_text: str | None = None
    file_id: str | None = Field(default=None, description="a relative path inside HEARTH_FILE_ROOT")
    file_url: str | None = Field(default=None, description="http(s); private addresses refused unless "
                                 "allowlisted (HEARTH_FILE_URL_ALLOW)")


class SummarizeRequest(_Input):
    max_sentences: int | None = Field(default=None, ge=1, le=50)

    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "Hearth is a self-hosted AI service. ...",
                                                               "locale": "en", "max_sentences": 2}]})


class ExtractRequest(_Input):
    schema_: dict[str, Any] | None = Field(default=None, alias="schema", description="an inline JSON Schema")
    schema_code: str | None = Field(default=None, max_length=128, description="`bill`, or a prompt code whose "
                                    "active version has an output schema")

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "text": "Order 42 shipped to Alice on 2026-03-01.",
        "schema": {"type": "object", "properties": {"order": {"type": "integer"}, "name": {"type": "string"}},
                   "required": ["order", "name"]}}]})


class BillRequest(_Input):
    model_config = ConfigDict(json_schema_extra={"examples": [{"ocr_text": "Invoice INV-7\nTotal: $12.50"}]})


class GenerateRequest(CapabilityRequest):
    role: str | None = Field(default=None, max_length=128, description="a role bound to a prompt")

    model_config = ConfigDict(json_schema_extra={"examples": [{"prompt_code": "question_generation",
                                                               "variables": {"topic": "fractions", "count": 3}}]})


class CapabilityChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system"]
    content: str


class ChatRequest(CapabilityRequest):
    role: str | None = Field(default=None, max_length=128, description="the persona (system prompt), its "
                             "default prompt and model")
    messages: list[CapabilityChatMessage] = Field(min_length=1, max_length=500)
    stream: bool = False
    request_id: str | None = Field(default=None, max_length=64, description="makes the call idempotent (planned)")

    model_config = ConfigDict(json_schema_extra={"examples": [{"messages": [{"role": "user", "content": "Hi"}]}]})


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
