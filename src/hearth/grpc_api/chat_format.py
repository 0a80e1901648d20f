"""``hearth.v1`` chat messages ⇄ the gateway core's chat body (OpenAI's format), both ways.

The request becomes the body ``POST /v1/chat/completions`` would carry, checked by the same validation
(:func:`hearth.api.chat_validation.validate_chat`), so a gRPC call means exactly what the HTTP one means.
A stream always asks for usage (``stream_options.include_usage``): the final :class:`ChatChunk` carries it,
Hearth's own estimate (``estimated``) when the upstream sent none.

Answers come back as the core gives them to the HTTP door — a JSON body, or the relay's SSE frames — and
are read here: the stream's frames are parsed incrementally (:class:`~hearth.wire.sse.SSEParser`), so
what a gRPC caller receives is, delta for delta, what an SSE caller receives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from hearth.api.chat_validation import validate_chat
from hearth.errors import HearthError
from hearth.v1.ai_service_pb2 import ChatChunk, ChatRequest, ChatResponse, StreamEnd, Usage
from hearth.wire.sse import SSEParser

_OPTIONAL = ("temperature", "top_p", "max_tokens", "presence_penalty", "frequency_penalty", "seed")


def chat_body(request: ChatRequest, *, stream: bool) -> dict[str, Any]:
    """The core's chat body for ``request`` (400 ``invalid_request`` with ``param`` as on HTTP)."""
    messages: list[dict[str, Any]] = []
    for m in request.messages:
        message: dict[str, Any] = {"role": m.role, "content": m.content}
        if m.name:
            message["name"] = m.name
        messages.append(message)
    body: dict[str, Any] = {"messages": messages}
    if request.model:
        body["model"] = request.model
    for name in _OPTIONAL:
        if request.HasField(name):
            body[name] = getattr(request, name)
    if request.stop:
        body["stop"] = list(request.stop)
    if request.user:
        body["user"] = request.user
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    validate_chat(body)
    return body


def _usage(raw: Any) -> Usage | None:
    if not isinstance(raw, dict):
        return None
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    total = raw.get("total_tokens")
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=total if isinstance(total, int) else prompt + completion,
                 estimated=raw.get("hearth_estimated") is True)


def chat_response(body: bytes, request_id: str) -> ChatResponse:
    """A non-stream answer (OpenAI's ``chat.completion``, public model name already shown)."""
    try:
        answer = orjson.loads(body)
        choice = answer["choices"][0]
        content = choice["message"].get("content") or ""
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
        raise HearthError("upstream_error", "The model's answer had no message content.") from None
    return ChatResponse(id=str(answer.get("id") or ""), model=str(answer.get("model") or ""),
                        content=content if isinstance(content, str) else "",
                        finish_reason=str(choice.get("finish_reason") or ""), usage=_usage(answer.get("usage")),
                        request_id=request_id)


class StreamError(Exception):
    """The stream ended with an error event (its stable code and message)."""

    def __init__(self, code: str, message: str, *, pending: ChatChunk | None = None) -> None:
        self.code = code
        self.message = message
        self.pending = pending  # the text that came in the same batch, before the error: sent first
        super().__init__(message)


@dataclass(slots=True)
class ChunkReader:
    """Turns the relay's SSE frames into :class:`ChatChunk` messages: the text deltas, then one final message
    with the finish reason and usage at ``[DONE]`` (its ``delta`` the last text, when that came in the same
    batch); an error event raises :class:`StreamError`."""

    request_id: str
    parser: SSEParser = field(default_factory=SSEParser)
    finish_reason: str = ""
    usage: Usage | None = None
    model: str = ""
    id: str = ""

    def read(self, frames: bytes) -> list[ChatChunk]:
        """The messages for one batch of the relay's frames: the deltas of events that arrived together
        are sent as one message, the final one included (one write, one HTTP/2 frame: a message costs
        more than its text)."""
        out: list[ChatChunk] = []
        text: list[str] = []
        for event in self.parser.feed(frames):
            data = event.data
            if data == b"[DONE]":  # the final message, with the last text if it came in this batch
                out.append(ChatChunk(delta="".join(text), done=StreamEnd(
                    finish_reason=self.finish_reason, usage=self.usage, model=self.model, id=self.id,
                    request_id=self.request_id)))
                text = []
                continue
            try:
                chunk = orjson.loads(data)
            except orjson.JSONDecodeError:
                continue  # the relay only passes JSON events on; nothing to tell the caller
            if not isinstance(chunk, dict):
                continue
            error = chunk.get("error")
            if isinstance(error, dict):
                raise StreamError(str(error.get("code") or "upstream_stream_error"), str(error.get("message") or ""),
                                  pending=ChatChunk(delta="".join(text)) if text else None)
            delta = self._take(chunk)
            if delta:
                text.append(delta)
        if text:
            out.append(ChatChunk(delta="".join(text)))
        return out

    def _take(self, chunk: dict[str, Any]) -> str:
        if not self.id and isinstance(chunk.get("id"), str):
            self.id = chunk["id"]
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        usage = _usage(chunk.get("usage"))
        if usage is not None:
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return ""
        choice = choices[0]
        if isinstance(choice.get("finish_reason"), str):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        content = delta.get("content") if isinstance(delta, dict) else None
        return content if isinstance(content, str) else ""
