"""OpenAPI documentation models for ``GET /api/v1/request-logs``: what one request-log row says.

The handler renders rows itself (:func:`hearth.observability.request_log.query_request_logs`); these
models only make ``/openapi.json`` describe the answer, so a generated client can read it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class AttemptEntry(BaseModel):
    """One endpoint tried by the call, in order; the last one served it (or ended it)."""

    endpoint: str
    status: int = Field(description="the upstream's HTTP status; 502 network failure, 504 timeout, 499 the "
                                    "client left (the gateway's own, where the upstream gave none)")
    error_code: str | None = Field(description="the stable code of this attempt's outcome; null on success")
    latency_ms: float = Field(description="from sending to the outcome (a stream's: until the stream ended)")


class RequestLogItem(BaseModel):
    id: int
    request_id: str
    created_at: str = Field(description="ISO-8601 with time zone")
    caller: str | None
    route: str
    model: str | None
    endpoint: str | None = Field(description="the endpoint that served (or last tried) the call")
    upstream_model: str | None
    stream: bool
    status: int
    error_code: str | None
    attempts: int
    prompt_tokens: int
    completion_tokens: int
    usage_estimated: bool = Field(description="the upstream reported no usage: the tokens are Hearth's estimates")
    cost: float
    latency_ms: float
    ttft_ms: float | None
    end_user: str | None
    tenant: str | None
    client_ip: str | None
    scene: str | None
    fallback_used: bool
    attempted_models: list[str] | None
    effective_max_tokens: int | None
    estimated_cost: float | None
    attempt_log: list[AttemptEntry] | None = Field(
        description="every attempt in order (at most 16); null for rows written before this was recorded")
    capability: str | None = Field(default=None, description="the capability this row serves (summarize, extract, "
                                   "extract_bill, generate, chat); route `capability` is the request as a whole")
    prompt_code: str | None = None
    prompt_version: int | None = Field(default=None, description="0: the built-in default prompt")
    guardrails: dict[str, Any] | None = Field(default=None, description="guardrail actions (counts per PII kind, "
                                              "injection rule, moderation matches), never a raw value")
    degraded: bool | None = Field(default=None, description="answered by the offline engine")
    cache_hit: bool | None = None
    task_id: str | None = Field(default=None, description="the task this call ran for")


class RequestLogPage(BaseModel):
    total: int = Field(description="matching rows, counted up to 10,000 (see total_capped)")
    limit: int
    offset: int
    items: list[RequestLogItem]
    total_capped: bool = Field(default=False, description="more than 10,000 rows match: total is 10,000")


class RequestLogEnvelope(BaseModel):
    success: Literal[True]
    data: RequestLogPage
    error: None
    request_id: str | None = None
