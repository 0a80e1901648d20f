"""The gateway core's answers (OpenAI's format) told in Anthropic's Messages format: replies, streams, errors.

The core answers every chat call with a ``chat.completion`` or a stream of ``chat.completion.chunk``
payloads; the ``/v1/messages`` door turns them into what an Anthropic client expects:

* :func:`chat_to_message` — a ``message`` object: text then ``tool_use`` blocks, ``stop_reason``
  (``stop`` → ``end_turn``, ``length`` → ``max_tokens``, ``tool_calls`` → ``tool_use``,
  ``content_filter`` → ``refusal``), ``usage`` in input/output tokens;
* :class:`ChunkEvents` — the event stream: ``message_start``, a ``ping``, per block
  ``content_block_start`` / ``content_block_delta`` (``text_delta``, ``input_json_delta``) /
  ``content_block_stop``, then ``message_delta`` (stop reason, usage) and ``message_stop``;
* :func:`error_payload` / :func:`error_event` — ``{"type": "error", "error": {"type", "message"}}``
  with Anthropic's error type for the status, and Hearth's stable ``code`` beside them.

An OpenAI stream tells a stop sequence apart from a natural end by nothing: both are ``end_turn`` here.
Input tokens are known at the end of a translated stream (its usage chunk): ``message_start`` carries
the estimate Hearth admitted the call with, ``message_delta`` the upstream's count.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from hearth.errors import CATALOG
from hearth.wire.tokens import estimate_text

__all__ = ["ChunkEvents", "chat_to_message", "error_event", "error_payload", "error_type", "sse_event"]

STOP_REASONS: Final = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use",
                       "function_call": "tool_use", "content_filter": "refusal"}
_ERROR_TYPES: Final = {400: "invalid_request_error", 401: "authentication_error", 402: "billing_error",
                       403: "permission_error", 404: "not_found_error", 413: "request_too_large",
                       429: "rate_limit_error", 500: "api_error", 503: "overloaded_error", 504: "timeout_error",
                       529: "overloaded_error"}
_ERROR_TYPE_OF_CODE: Final = {"budget_exhausted": "billing_error"}  # not a rate: retrying soon does not help
_TEXT_DELTA_HEAD: Final = b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
_TEXT_DELTA_MIDDLE: Final = b',"delta":{"type":"text_delta","text":'



def error_type(status: int, code: str | None = None) -> str:
    """Anthropic's error type for an answer of ``status`` (Hearth's ``code`` refines a few)."""
    if code in _ERROR_TYPE_OF_CODE:
        return _ERROR_TYPE_OF_CODE[code]
    return _ERROR_TYPES.get(status, "invalid_request_error" if status < 500 else "api_error")


def error_payload(code: str | None, message: str, *, status: int | None = None,
                  request_id: str | None = None) -> dict[str, Any]:
    """Anthropic's error body; ``status`` defaults to the catalog's for ``code``."""
    if status is None:
        status = CATALOG[code].status if code in CATALOG else 500
    body: dict[str, Any] = {"type": "error", "error": {"type": error_type(status, code), "message": message}}
    if code is not None:
        body["error"]["code"] = code
    if request_id:
        body["request_id"] = request_id
    return body


def sse_event(name: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def error_event(code: str | None, message: str, *, status: int | None = None) -> bytes:
    """The ``error`` event that ends a stream already started."""
    return sse_event("error", error_payload(code, message, status=status))


def _usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, dict) else {}
    prompt = int(usage.get("prompt_tokens") or 0)
    details = usage.get("prompt_tokens_details")
    cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
    return {"input_tokens": max(0, prompt - cached), "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached, "output_tokens": int(usage.get("completion_tokens") or 0)}


def _tool_input(arguments: Any) -> dict[str, Any]:
    """A tool call's JSON-string arguments as the object Anthropic's ``input`` is ({} if not an object)."""
    if isinstance(arguments, str) and arguments.strip():
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def chat_to_message(chat: dict[str, Any], *, message_id: str, model: str) -> dict[str, Any]:
    """The Anthropic ``message`` for a ``chat.completion`` (its first choice)."""
    choices = chat.get("choices")
    choice: dict[str, Any] = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) \
        else {}
    message: dict[str, Any] = choice["message"] if isinstance(choice.get("message"), dict) else {}
    content: list[dict[str, Any]] = []
    text = message.get("content")
    if isinstance(text, str) and text:
        content.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or ():
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            content.append({"type": "tool_use", "id": call.get("id") or "", "name": function.get("name") or "",
                            "input": _tool_input(function.get("arguments"))})
    finish = choice.get("finish_reason")
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn",
            "stop_sequence": None, "usage": _usage(chat.get("usage"))}


class ChunkEvents:
    """One translated stream: OpenAI chunk payloads in, Anthropic SSE frames out.

    :meth:`feed` takes each chunk (JSON bytes) and returns the frames it makes (maybe none);
    :meth:`finish` (at the core's ``[DONE]``) closes the open block and sends the stop reason, the
    usage and ``message_stop``. Tool calls become ``tool_use`` blocks, numbered after the text block,
    in the order the upstream started them; text after a tool call opens a new text block. A piece of
    an earlier call's arguments arriving after a later call started (OpenAI streams do not do that,
    but nothing forbids it) is sent with that earlier block's index: clients assemble by index."""

    __slots__ = ("_block", "_blocks", "_id", "_input_estimate", "_model", "_output_chars", "_started",
                 "_stop", "_text_head", "_tools", "_usage")

    def __init__(self, message_id: str, model: str, input_estimate: int) -> None:
        self._id = message_id
        self._model = model
        self._input_estimate = input_estimate
        self._started = False
        self._block: tuple[str, int] | None = None  # ("text" | "tool", its key) of the open block
        self._blocks = 0  # blocks opened so far: the next one's index
        self._tools: dict[int, int] = {}  # OpenAI tool call index → block index
        self._stop: str | None = None
        self._usage: dict[str, Any] | None = None
        self._output_chars: list[str] = []
        self._text_head = b""  # the open text block's delta event up to its text (bytes: the hot path)

    def _start(self, model: Any) -> bytes:
        self._started = True
        message: dict[str, Any] = {"id": self._id, "type": "message", "role": "assistant",
                   "model": model if isinstance(model, str) and model else self._model, "content": [],
                   "stop_reason": None, "stop_sequence": None,
                   "usage": {"input_tokens": self._input_estimate, "output_tokens": 0}}
        return (sse_event("message_start", {"type": "message_start", "message": message})
                + sse_event("ping", {"type": "ping"}))

    def feed(self, payload: bytes) -> bytes:
        chunk = orjson.loads(payload)
        if type(chunk) is not dict:
            return b""
        usage = chunk.get("usage")
        if type(usage) is dict:
            self._usage = usage
        choices = chunk.get("choices")
        if self._started and self._block is not None and self._block[0] == "text" and type(choices) is list \
                and len(choices) == 1:  # the usual chunk: more text of the open text block
            choice = choices[0]
            delta = choice.get("delta") if type(choice) is dict else None
            text = delta.get("content") if type(delta) is dict and len(delta) == 1 else None
            if type(text) is str and choice.get("finish_reason") is None and choice.get("index", 0) == 0:
                if not text:
                    return b""
                self._output_chars.append(text)
                return b"".join((self._text_head, orjson.dumps(text), b"}}\n\n"))
        out = [] if self._started else [self._start(chunk.get("model"))]
        for choice in choices or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text = delta.get("content")
                if isinstance(text, str) and text:
                    out.append(self._text(text))
                for call in delta.get("tool_calls") or ():
                    if isinstance(call, dict):
                        out.append(self._tool(call))
            finish = choice.get("finish_reason")
            if isinstance(finish, str):
                self._stop = STOP_REASONS.get(finish, "end_turn")
        return b"".join(out)

    def _open(self, kind: str, key: int, block: dict[str, Any]) -> bytes:
        frames = self._close()
        self._block = (kind, key)
        index = self._blocks
        self._blocks += 1
        return frames + sse_event("content_block_start", {"type": "content_block_start", "index": index,
                                                          "content_block": block})

    def _close(self) -> bytes:
        if self._block is None:
            return b""
        self._block = None
        return sse_event("content_block_stop", {"type": "content_block_stop", "index": self._blocks - 1})

    def _text(self, text: str) -> bytes:
        opened = b"" if self._block is not None and self._block[0] == "text" else self._open(
            "text", 0, {"type": "text", "text": ""})
        if opened:
            self._text_head = b"".join((_TEXT_DELTA_HEAD, str(self._blocks - 1).encode(), _TEXT_DELTA_MIDDLE))
        self._output_chars.append(text)
        # the hot path of a stream: the event written as bytes, not a dict dumped (a third of the cost)
        return b"".join((opened, self._text_head, orjson.dumps(text), b"}}\n\n"))

    def _tool(self, call: dict[str, Any]) -> bytes:
        key = call.get("index", 0)
        key = key if isinstance(key, int) else 0
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        assert isinstance(function, dict)
        opened = b""
        if key not in self._tools:
            opened = self._open("tool", key, {"type": "tool_use", "id": call.get("id") or "",
                                              "name": function.get("name") or "", "input": {}})
            self._tools[key] = self._blocks - 1
        partial = function.get("arguments")
        if not isinstance(partial, str) or not partial:
            return opened
        self._output_chars.append(partial)
        return opened + sse_event("content_block_delta", {
            "type": "content_block_delta", "index": self._tools[key],
            "delta": {"type": "input_json_delta", "partial_json": partial}})

    def finish(self) -> bytes:
        """The end of the message (at the core's ``[DONE]``)."""
        head = b"" if self._started else self._start(None)
        usage = _usage(self._usage) if self._usage is not None else {
            "input_tokens": self._input_estimate, "output_tokens": estimate_text("".join(self._output_chars))}
        delta = {"type": "message_delta", "delta": {"stop_reason": self._stop or "end_turn", "stop_sequence": None},
                 "usage": usage}
        return head + self._close() + sse_event("message_delta", delta) + sse_event("message_stop",
                                                                                   {"type": "message_stop"})
