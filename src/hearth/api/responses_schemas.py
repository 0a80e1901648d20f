"""OpenAPI documentation models for ``/v1/responses`` and ``/v1/completions``.

The routes parse and check bodies themselves (:mod:`hearth.responses.requests`,
:mod:`hearth.responses.completions`); these models only describe them in the published document.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hearth.api.chat_validation import MAX_MODEL_NAME, MAX_OUTPUT_TOKENS, MAX_STOP


class ResponseCreateRequest(BaseModel):
    """What ``POST /v1/responses`` accepts (docs/responses.md lists what maps and what is refused)."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"model": "demo-chat", "input": "Hello, Hearth!"},
        {"model": "demo-chat", "instructions": "Be brief.", "max_output_tokens": 64, "store": False,
         "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}]},
    ]})
    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME, examples=["demo-chat"])
    input: str | list[dict[str, Any]] = Field(description="A string, or input items: messages, `function_call` "
                                                          "and `function_call_output` items.")
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, description="Continue a stored response of yours.")
    store: bool = True
    stream: bool = False
    max_output_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    tools: list[dict[str, Any]] | None = Field(default=None, description="Function tools only.")
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    text: dict[str, Any] | None = Field(default=None, description="`format`: text, json_object or json_schema.")
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool | None = None
    user: str | None = None


class ResponseObject(BaseModel):
    """A Response object (``object: response``)."""

    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    model: str
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None


class ResponseDeleted(BaseModel):
    id: str
    object: Literal["response.deleted"]
    deleted: bool


class CompletionRequest(BaseModel):
    """What legacy ``POST /v1/completions`` accepts: one prompt, answered by a chat model."""

    model_config = ConfigDict(extra="allow", json_schema_extra={"examples": [
        {"model": "demo-chat", "prompt": "Say this is a test", "max_tokens": 16}]})
    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME, examples=["demo-chat"])
    prompt: str | list[str] = Field(description="A string, or an array of exactly one string.")
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_OUTPUT_TOKENS)
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    stream: bool = False
    stop: str | list[str] | None = Field(default=None, max_length=MAX_STOP)
    user: str | None = None


class CompletionChoice(BaseModel):
    text: str
    index: int
    logprobs: dict[str, Any] | None = None
    finish_reason: str | None


class TextCompletion(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    object: Literal["text_completion"]
    created: int | None
    model: str | None
    choices: list[CompletionChoice]
    usage: dict[str, int] | None = None
