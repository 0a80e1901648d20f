"""OpenAPI documentation models for the Anthropic Messages door (``/v1/messages``).

The routes parse bodies themselves (:mod:`hearth.wire.anthropic_request`); these models only describe
the requests and answers in the published OpenAPI document.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ContentBlock(BaseModel):
    """``text``, ``image`` (``source``: ``base64`` or ``url``), ``tool_use`` or ``tool_result``."""

    model_config = ConfigDict(extra="allow")
    type: str


class MessageParam(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["user", "assistant"]
    content: str | list[ContentBlock]


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str | None = None
    input_schema: dict[str, Any]


class MessagesRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    max_tokens: int = Field(ge=1)
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[ContentBlock] | None = None
    stream: bool = False
    stop_sequences: list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=1)
    top_p: float | None = Field(default=None, ge=0, le=1)
    tools: list[Tool] | None = None
    tool_choice: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None


class CountTokensRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    model: str
    messages: list[MessageParam] = Field(min_length=1)
    system: str | list[ContentBlock] | None = None
    tools: list[Tool] | None = None


class MessageUsage(BaseModel):
    model_config = ConfigDict(extra="allow")
    input_tokens: int
    output_tokens: int


class Message(BaseModel):
    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[ContentBlock]
    stop_reason: str | None
    stop_sequence: str | None
    usage: MessageUsage


class TokenCount(BaseModel):
    input_tokens: int


class AnthropicErrorBody(BaseModel):
    type: str
    message: str
    code: str | None = None


class AnthropicError(BaseModel):
    type: Literal["error"]
    error: AnthropicErrorBody
    request_id: str | None = None


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{code: {"model": AnthropicError} for code in (400, 401, 403, 404, 413, 429, 500, 502, 503, 504)},
    "4XX": {"model": AnthropicError, "description": "Another client error"},
}
