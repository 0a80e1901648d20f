"""OpenAPI documentation models for the OpenAI-compatible routes.

The routes parse bodies themselves (fast path, OpenAI-exact errors); these models exist so the
published OpenAPI document describes requests and responses well enough to generate a client.
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hearth.api.chat_validation import (
    MAX_CHOICES,
    MAX_EMBEDDING_INPUTS,
    MAX_MODEL_NAME,
    MAX_OUTPUT_TOKENS,
    MAX_STOP,
    MAX_TOOLS,
)
from hearth.api.route_defaults import DeferredOpenApi


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text"]
    text: str


class ImageURL(BaseModel):
    model_config = ConfigDict(extra="allow")
    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["image_url"]
    image_url: ImageURL


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    arguments: str


class ToolCall(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message. ``content`` is required except on an assistant message that has ``tool_calls``;
    a ``tool`` message needs ``tool_call_id``."""

    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[TextPart | ImagePart] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1)
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["function"]
    function: FunctionSpec


class ResponseFormat(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ChatCompletionRequest(BaseModel):
    """What ``/v1/chat/completions`` accepts; the limits are those :mod:`hearth.api.chat_validation` enforces."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"model": "demo-chat", "messages": [{"role": "user", "content": "Hello, Hearth!"}]},
        {"model": "demo-chat", "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 64,
         "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
    ]})
    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME, examples=["demo-chat"],
                       description="A public model name; may be omitted when the caller's scene names a default.")
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = Field(default=None, description="Only with `stream: true`.")
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    n: int | None = Field(default=None, ge=1, le=MAX_CHOICES)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    seed: int | None = None
    stop: str | list[str] | None = Field(default=None, max_length=MAX_STOP)
    tools: list[Tool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None


class CompletionUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ChatChoice(BaseModel):
    index: int
    message: dict[str, Any]
    finish_reason: str | None
    logprobs: dict[str, Any] | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: CompletionUsage | None = None
    system_fingerprint: str | None = None


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"model": "demo-embedding", "input": ["Hello", "Hearth"]}]})
    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME)
    input: (str | list[str] | list[int] | list[list[int]]) = Field(
        description=f"A non-empty string, or 1 to {MAX_EMBEDDING_INPUTS} non-empty strings or token-id arrays.")
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(default=None, ge=1, le=65_536)
    user: str | None = None


class Embedding(BaseModel):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str


class EmbeddingResponse(BaseModel):
    object: Literal["list"]
    data: list[Embedding]
    model: str
    usage: dict[str, int]


class ModelObject(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelObject]


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIError(BaseModel):
    error: OpenAIErrorBody


def _inline(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            target = _inline(defs[ref.removeprefix("#/$defs/")], defs)
            rest = {k: _inline(v, defs) for k, v in node.items() if k != "$ref"}
            return {**target, **rest}
        return {k: _inline(v, defs) for k, v in node.items() if k != "$defs"}
    if isinstance(node, list):
        return [_inline(v, defs) for v in node]
    return node


def inline_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with every nested model written in place (the documentation models are
    not recursive). A ``$ref`` to ``#/$defs/...`` inside a schema embedded in the OpenAPI document
    would resolve against the document's root, where nothing is defined: a dangling reference."""
    schema = model.model_json_schema()
    inlined: dict[str, Any] = _inline(schema, schema.get("$defs", {}))
    return inlined


def request_body(model: type[BaseModel]) -> dict[str, Any]:
    """A route's ``openapi_extra`` documenting a JSON body of ``model`` (built on the first OpenAPI document)."""
    return {"requestBody": DeferredOpenApi(functools.partial(_json_body, model))}


def _json_body(model: type[BaseModel]) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": inline_schema(model)}}}


#: Every status a ``/v1`` route can answer with an error, in OpenAI's error shape; ``4XX`` covers the
#: rest (and keeps FastAPI from documenting a 422 that Hearth never sends: its validation errors are 400s).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    **{code: {"model": OpenAIError} for code in (400, 401, 403, 404, 413, 429, 500, 502, 503, 504)},
    "4XX": {"model": OpenAIError, "description": "Another client error"},
}
