"""Pure translation between OpenAI Chat Completions and Anthropic Messages payloads.

Callers always speak OpenAI; some upstreams speak Anthropic. This module turns an
OpenAI chat request into an Anthropic Messages request, and turns Anthropic
responses, stream events and errors back into their OpenAI shapes. It performs no
I/O and holds no global state, so the gateway can call it from any task.

Requests that Anthropic cannot express raise :class:`TranslationError`, whose
message is safe to show the caller as a 400 ``invalid_request_error``. OpenAI-only
parameters with no behavioural contract the caller depends on (``logprobs``,
``presence_penalty``, ``seed``, ...) are dropped rather than rejected.
"""

from __future__ import annotations

import time
from typing import Any, Final

import orjson

__all__ = [
    "MessagesStreamTranslator",
    "TranslationError",
    "UpstreamStreamError",
    "anthropic_error_to_openai",
    "chat_to_messages_request",
    "messages_response_to_chat",
]


class TranslationError(ValueError):
    """An OpenAI request that cannot be expressed as an Anthropic Messages request.

    The message names the offending field and is meant to reach the caller verbatim.
    """


class UpstreamStreamError(Exception):
    """The upstream reported an error in the middle of a stream, or broke the protocol.

    ``error_type`` is the Anthropic error type (``overloaded_error``, ``api_error``,
    ...) so the gateway can pick an OpenAI error type for the in-stream error chunk.
    """

    def __init__(self, message: str, error_type: str = "api_error") -> None:
        super().__init__(message)
        self.message = message
        self.error_type = error_type


_SUPPORTED_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_MAX_ANTHROPIC_TEMPERATURE: Final = 1.0

_FINISH_REASONS: Final[dict[str, str]] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}

_CONTENT_EVENTS: Final = frozenset(
    {"content_block_start", "content_block_delta", "content_block_stop", "message_delta", "message_stop"}
)

_TOOL_CHOICES: Final[dict[str, str]] = {"auto": "auto", "none": "none", "required": "any"}


# --------------------------------------------------------------------------- requests


def chat_to_messages_request(
    body: dict[str, Any], upstream_model: str, default_max_tokens: int = 4096
) -> dict[str, Any]:
    """Translate an OpenAI chat completion request body into an Anthropic Messages request.

    ``upstream_model`` replaces the caller's model name. ``default_max_tokens`` is used
    when the caller sets neither ``max_completion_tokens`` nor ``max_tokens``, because
    Anthropic requires a limit.

    Notable mappings, each forced by a difference between the APIs:

    * system and developer messages, wherever they appear, are hoisted into the
      top-level ``system`` string, joined by blank lines;
    * consecutive messages that map to the same Anthropic role are merged into one
      turn (``tool`` results become user turns), and within a user turn the
      ``tool_result`` blocks are moved ahead of other content, as Anthropic requires;
    * empty text is dropped, and a message left with no content disappears;
    * ``temperature`` above Anthropic's maximum of 1 is clamped to 1;
    * ``parallel_tool_calls: false`` becomes ``disable_parallel_tool_use``.

    Raises :class:`TranslationError` for ``n`` other than 1, the legacy
    ``functions``/``function_call`` interface, JSON ``response_format`` modes,
    unsupported content parts or roles, and malformed messages or tool calls.
    """
    _reject_inexpressible(body)
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise TranslationError("'messages' must be a non-empty array")

    system_texts: list[str] = []
    turns: list[tuple[str, list[dict[str, Any]]]] = []
    for position, message in enumerate(raw_messages):
        where = f"messages[{position}]"
        if not isinstance(message, dict):
            raise TranslationError(f"{where} must be an object")
        role = message.get("role")
        if role in ("system", "developer"):
            system_texts.extend(_plain_texts(message.get("content"), where))
            continue
        if role == "user":
            blocks = _user_blocks(message.get("content"), where)
        elif role == "assistant":
            blocks = _assistant_blocks(message, where)
        elif role == "tool":
            blocks = [_tool_result_block(message, where)]
        elif role == "function":
            raise TranslationError(f"{where}: legacy 'function' role messages are not supported; use tools")
        else:
            raise TranslationError(f"{where} has unsupported role {role!r}")
        if not blocks:
            continue
        anthropic_role = "assistant" if role == "assistant" else "user"
        if turns and turns[-1][0] == anthropic_role:
            turns[-1][1].extend(blocks)
        else:
            turns.append((anthropic_role, blocks))
    if not turns:
        raise TranslationError("at least one non-empty user, assistant or tool message is required")

    request: dict[str, Any] = {
        "model": upstream_model,
        "messages": [_render_turn(role, blocks) for role, blocks in turns],
        "max_tokens": _max_tokens(body, default_max_tokens),
    }
    if system_texts:
        request["system"] = "\n\n".join(system_texts)
    _copy_sampling(body, request)
    _copy_tools(body, request)
    stream = body.get("stream")
    if stream is not None:
        if not isinstance(stream, bool):
            raise TranslationError("'stream' must be a boolean")
        request["stream"] = stream
    user = body.get("user")
    if isinstance(user, str) and user:
        request["metadata"] = {"user_id": user}
    return request


def _reject_inexpressible(body: dict[str, Any]) -> None:
    n = body.get("n")
    if n is not None and n != 1:
        raise TranslationError("'n' must be 1 for this model: multiple choices are not supported")
    for legacy in ("functions", "function_call"):
        if body.get(legacy) is not None:
            raise TranslationError(f"'{legacy}' is not supported for this model; use 'tools'")
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") not in (None, "text"):
        raise TranslationError(
            f"response_format type {response_format.get('type')!r} is not supported for this model"
        )


def _plain_texts(content: Any, where: str) -> list[str]:
    """Text of a system/developer message: a string or a list of text parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [content] if content else []
    if not isinstance(content, list):
        raise TranslationError(f"{where}.content must be a string or an array of content parts")
    texts: list[str] = []
    for index, part in enumerate(content):
        text = _text_of_part(part, f"{where}.content[{index}]", allow_refusal=False)
        if text:
            texts.append(text)
    return texts


def _text_of_part(part: Any, where: str, *, allow_refusal: bool) -> str:
    if not isinstance(part, dict):
        raise TranslationError(f"{where} must be an object")
    kind = part.get("type")
    key = "text" if kind == "text" else "refusal" if kind == "refusal" and allow_refusal else None
    if key is None:
        raise TranslationError(f"{where}: content part type {kind!r} is not supported here")
    text = part.get(key)
    if not isinstance(text, str):
        raise TranslationError(f"{where}.{key} must be a string")
    return text


def _user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [_text_block(content)] if content else []
    if not isinstance(content, list):
        raise TranslationError(f"{where}.content must be a string or an array of content parts")
    blocks: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        part_where = f"{where}.content[{index}]"
        if isinstance(part, dict) and part.get("type") == "image_url":
            blocks.append(_image_block(part.get("image_url"), part_where))
            continue
        text = _text_of_part(part, part_where, allow_refusal=False)
        if text:
            blocks.append(_text_block(text))
    return blocks


def _text_block(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def _image_block(image_url: Any, where: str) -> dict[str, Any]:
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url:
        raise TranslationError(f"{where}.image_url.url must be a non-empty string")
    if url.startswith("data:"):
        header, comma, data = url[len("data:") :].partition(",")
        media_type, *params = header.split(";")
        media_type = media_type.strip().lower()
        if not comma or "base64" not in params or not data:
            raise TranslationError(f"{where}: data URLs must be base64-encoded (data:<type>;base64,<data>)")
        if media_type not in _SUPPORTED_IMAGE_TYPES:
            supported = ", ".join(sorted(_SUPPORTED_IMAGE_TYPES))
            raise TranslationError(f"{where}: image type {media_type!r} is not supported (use {supported})")
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    if url.lower().startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise TranslationError(f"{where}: image URLs must be http(s) or base64 data URLs")


def _assistant_blocks(message: dict[str, Any], where: str) -> list[dict[str, Any]]:
    if message.get("function_call") is not None:
        raise TranslationError(f"{where}: legacy 'function_call' is not supported; use 'tool_calls'")
    content = message.get("content")
    blocks: list[dict[str, Any]] = []
    if isinstance(content, str):
        if content:
            blocks.append(_text_block(content))
    elif isinstance(content, list):
        for index, part in enumerate(content):
            text = _text_of_part(part, f"{where}.content[{index}]", allow_refusal=True)
            if text:
                blocks.append(_text_block(text))
    elif content is not None:
        raise TranslationError(f"{where}.content must be a string, an array of content parts or null")

    tool_calls = message.get("tool_calls")
    if tool_calls is None:
        return blocks
    if not isinstance(tool_calls, list):
        raise TranslationError(f"{where}.tool_calls must be an array")
    for index, call in enumerate(tool_calls):
        blocks.append(_tool_use_block(call, f"{where}.tool_calls[{index}]"))
    return blocks


def _tool_use_block(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        raise TranslationError(f"{where} must be a function tool call")
    call_id = call.get("id")
    function = call.get("function")
    if not isinstance(call_id, str) or not call_id:
        raise TranslationError(f"{where}.id must be a non-empty string")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise TranslationError(f"{where}.function.name must be a string")
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        raise TranslationError(f"{where}.function.arguments must be a JSON string")
    if arguments.strip():
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError as exc:
            raise TranslationError(f"{where}.function.arguments is not valid JSON") from exc
    else:
        parsed = {}
    if not isinstance(parsed, dict):
        raise TranslationError(f"{where}.function.arguments must encode a JSON object")
    return {"type": "tool_use", "id": call_id, "name": function["name"], "input": parsed}


def _tool_result_block(message: dict[str, Any], where: str) -> dict[str, Any]:
    tool_call_id = message.get("tool_call_id")
    if not isinstance(tool_call_id, str) or not tool_call_id:
        raise TranslationError(f"{where}.tool_call_id must be a non-empty string")
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_call_id}
    texts = _plain_texts(message.get("content"), where)
    if len(texts) == 1:
        block["content"] = texts[0]
    elif texts:
        block["content"] = [_text_block(text) for text in texts]
    return block


def _render_turn(role: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """One Anthropic message: a bare string when it is a single text block."""
    if role == "user":
        blocks = sorted(blocks, key=lambda block: block["type"] != "tool_result")
    if len(blocks) == 1 and blocks[0]["type"] == "text":
        return {"role": role, "content": blocks[0]["text"]}
    return {"role": role, "content": blocks}


def _max_tokens(body: dict[str, Any], default: int) -> int:
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TranslationError(f"'{key}' must be a positive integer")
        return value
    return default


def _copy_sampling(body: dict[str, Any], request: dict[str, Any]) -> None:
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
            raise TranslationError(f"'{key}' must be a non-negative number")
        request[key] = min(float(value), _MAX_ANTHROPIC_TEMPERATURE) if key == "temperature" else value
    stop = body.get("stop")
    if stop is None:
        return
    sequences = [stop] if isinstance(stop, str) else stop
    if not isinstance(sequences, list) or not all(isinstance(item, str) for item in sequences):
        raise TranslationError("'stop' must be a string or an array of strings")
    sequences = [item for item in sequences if item]
    if sequences:
        request["stop_sequences"] = sequences


def _copy_tools(body: dict[str, Any], request: dict[str, Any]) -> None:
    tools = body.get("tools")
    if not tools:
        return
    if not isinstance(tools, list):
        raise TranslationError("'tools' must be an array")
    request["tools"] = [_tool_definition(tool, f"tools[{index}]") for index, tool in enumerate(tools)]

    choice: dict[str, Any] | None = None
    raw_choice = body.get("tool_choice")
    if isinstance(raw_choice, str):
        if raw_choice not in _TOOL_CHOICES:
            raise TranslationError(f"tool_choice {raw_choice!r} is not supported")
        choice = {"type": _TOOL_CHOICES[raw_choice]}
    elif isinstance(raw_choice, dict):
        function = raw_choice.get("function")
        if raw_choice.get("type") != "function" or not isinstance(function, dict):
            raise TranslationError(
                "tool_choice object must be {'type': 'function', 'function': {'name': ...}}"
            )
        name = function.get("name")
        if not isinstance(name, str) or not name:
            raise TranslationError("tool_choice.function.name must be a non-empty string")
        choice = {"type": "tool", "name": name}
    elif raw_choice is not None:
        raise TranslationError("'tool_choice' must be a string or an object")

    if body.get("parallel_tool_calls") is False:
        choice = choice or {"type": "auto"}
        if choice["type"] != "none":
            choice["disable_parallel_tool_use"] = True
    if choice is not None:
        request["tool_choice"] = choice


def _tool_definition(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or tool.get("type") != "function":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise TranslationError(f"{where}: tool type {kind!r} is not supported; only 'function' tools are")
    function = tool.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise TranslationError(f"{where}.function.name must be a non-empty string")
    parameters = function.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    elif not isinstance(parameters, dict):
        raise TranslationError(f"{where}.function.parameters must be a JSON Schema object")
    definition: dict[str, Any] = {"name": function["name"]}
    description = function.get("description")
    if isinstance(description, str) and description:
        definition["description"] = description
    definition["input_schema"] = parameters
    return definition


# -------------------------------------------------------------------------- responses


def messages_response_to_chat(resp: dict[str, Any], model: str, created: int | None = None) -> dict[str, Any]:
    """Translate a successful Anthropic Messages response into an OpenAI ``chat.completion``.

    ``model`` is the name the caller asked for (not the upstream's); ``created``
    defaults to now. Text blocks are concatenated (content is ``None`` when there is
    none, as OpenAI does for pure tool calls); ``tool_use`` blocks become
    ``tool_calls`` with JSON-string arguments; thinking and other block types are
    dropped. Cache reads and writes count towards ``prompt_tokens``, since OpenAI
    has no separate field for them.
    """
    texts: list[str] = []
    tool_calls: list[dict[str, Any]] = []
    for block in resp.get("content") or []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            tool_calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": arguments},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if tool_calls:
        message["tool_calls"] = tool_calls
    message["refusal"] = None

    counts = _UsageCounts()
    counts.update(resp.get("usage"))
    return {
        "id": f"chatcmpl-{resp.get('id', '')}",
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": _finish_reason(resp.get("stop_reason")),
            }
        ],
        "usage": counts.openai(),
    }


def _finish_reason(stop_reason: Any) -> str:
    return _FINISH_REASONS.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


class _UsageCounts:
    """Anthropic token counters; later reports overwrite earlier ones field by field."""

    def __init__(self) -> None:
        self.input = 0
        self.cache_read: int | None = None
        self.cache_creation = 0
        self.output = 0

    def update(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        for key, attribute in (
            ("input_tokens", "input"),
            ("cache_read_input_tokens", "cache_read"),
            ("cache_creation_input_tokens", "cache_creation"),
            ("output_tokens", "output"),
        ):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, attribute, value)

    @property
    def prompt(self) -> int:
        return self.input + (self.cache_read or 0) + self.cache_creation

    def openai(self) -> dict[str, Any]:
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt,
            "completion_tokens": self.output,
            "total_tokens": self.prompt + self.output,
        }
        if self.cache_read is not None:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cache_read}
        return usage


# ---------------------------------------------------------------------------- streams


class MessagesStreamTranslator:
    """Turns one Anthropic Messages event stream into OpenAI ``chat.completion.chunk`` payloads.

    Feed every SSE event in order; each call returns the chunk payloads (orjson
    bytes, one per ``data:`` line) to forward, possibly none. The caller frames them
    and appends ``data: [DONE]``. The shape follows OpenAI: a first chunk carrying
    the assistant role, content and ``tool_calls`` deltas (tool calls are numbered
    from 0 in order of appearance, whatever their Anthropic block index), one chunk
    with ``finish_reason``, and, when ``include_usage``, ``"usage": null`` on every
    chunk plus a final ``choices: []`` chunk with the totals at ``message_stop``.

    Thinking blocks are not forwarded. A tool call whose arguments stream was empty
    gets ``"{}"`` so clients always accumulate valid JSON. An ``error`` event, an
    unparseable event, or content before ``message_start`` raises
    :class:`UpstreamStreamError`. Events after ``message_stop`` are ignored.
    """

    def __init__(self, model: str, include_usage: bool, created: int | None = None) -> None:
        self._model = model
        self._include_usage = include_usage
        self._created = int(time.time()) if created is None else created
        self._id: str | None = None
        self._counts = _UsageCounts()
        self._tool_indexes: dict[int, int] = {}
        self._tools_with_arguments: set[int] = set()
        self._finish_sent = False
        self._finished = False

    @property
    def usage(self) -> tuple[int, int]:
        """``(prompt_tokens, completion_tokens)`` reported so far, counted as OpenAI would."""
        return self._counts.prompt, self._counts.output

    @property
    def finished(self) -> bool:
        """True once ``message_stop`` has been seen; a stream ending earlier was cut short."""
        return self._finished

    def feed(self, event_type: str | None, data: bytes) -> list[bytes]:
        """Translate one Anthropic SSE event (its ``event:`` name, if any, and its data)."""
        if event_type == "ping":
            return []
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise UpstreamStreamError("upstream sent a malformed stream event") from exc
        if not isinstance(payload, dict):
            raise UpstreamStreamError("upstream sent a malformed stream event")
        kind = event_type or payload.get("type")
        if kind == "error":
            error = payload.get("error")
            error = error if isinstance(error, dict) else {}
            message = error.get("message")
            error_type = error.get("type")
            raise UpstreamStreamError(
                message if isinstance(message, str) and message else "upstream stream error",
                error_type if isinstance(error_type, str) and error_type else "api_error",
            )
        if self._finished or kind == "ping":
            return []
        if kind == "message_start":
            return self._on_message_start(payload)
        if kind not in _CONTENT_EVENTS:
            return []
        if self._id is None:
            raise UpstreamStreamError(f"upstream sent {kind} before message_start")
        if kind == "content_block_start":
            return self._on_block_start(payload)
        if kind == "content_block_delta":
            return self._on_block_delta(payload)
        if kind == "content_block_stop":
            return self._on_block_stop(payload)
        if kind == "message_delta":
            return self._on_message_delta(payload)
        return self._on_message_stop()

    def _on_message_start(self, payload: dict[str, Any]) -> list[bytes]:
        if self._id is not None:
            return []
        message = payload.get("message")
        message = message if isinstance(message, dict) else {}
        self._id = f"chatcmpl-{message.get('id', '')}"
        self._counts.update(message.get("usage"))
        return [self._chunk({"role": "assistant", "content": ""})]

    def _on_block_start(self, payload: dict[str, Any]) -> list[bytes]:
        block = payload.get("content_block")
        if not isinstance(block, dict):
            return []
        kind = block.get("type")
        if kind == "text":
            text = block.get("text")
            return [self._chunk({"content": text})] if isinstance(text, str) and text else []
        if kind != "tool_use":
            return []
        tool_index = len(self._tool_indexes)
        self._tool_indexes[_block_index(payload)] = tool_index
        call = {
            "index": tool_index,
            "id": block.get("id"),
            "type": "function",
            "function": {"name": block.get("name"), "arguments": ""},
        }
        return [self._chunk({"tool_calls": [call]})]

    def _on_block_delta(self, payload: dict[str, Any]) -> list[bytes]:
        delta = payload.get("delta")
        if not isinstance(delta, dict):
            return []
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            return [self._chunk({"content": text})] if isinstance(text, str) and text else []
        if kind != "input_json_delta":
            return []
        block_index = _block_index(payload)
        tool_index = self._tool_indexes.get(block_index)
        partial = delta.get("partial_json")
        if tool_index is None or not isinstance(partial, str) or not partial:
            return []
        self._tools_with_arguments.add(block_index)
        call = {"index": tool_index, "function": {"arguments": partial}}
        return [self._chunk({"tool_calls": [call]})]

    def _on_block_stop(self, payload: dict[str, Any]) -> list[bytes]:
        block_index = _block_index(payload)
        tool_index = self._tool_indexes.get(block_index)
        if tool_index is None or block_index in self._tools_with_arguments:
            return []
        self._tools_with_arguments.add(block_index)
        call = {"index": tool_index, "function": {"arguments": "{}"}}
        return [self._chunk({"tool_calls": [call]})]

    def _on_message_delta(self, payload: dict[str, Any]) -> list[bytes]:
        self._counts.update(payload.get("usage"))
        delta = payload.get("delta")
        stop_reason = delta.get("stop_reason") if isinstance(delta, dict) else None
        if stop_reason is None or self._finish_sent:
            return []
        self._finish_sent = True
        return [self._chunk({}, _finish_reason(stop_reason))]

    def _on_message_stop(self) -> list[bytes]:
        self._finished = True
        chunks: list[bytes] = []
        if not self._finish_sent:
            self._finish_sent = True
            chunks.append(self._chunk({}, "stop"))
        if self._include_usage:
            chunks.append(
                orjson.dumps(
                    {
                        "id": self._id,
                        "object": "chat.completion.chunk",
                        "created": self._created,
                        "model": self._model,
                        "choices": [],
                        "usage": self._counts.openai(),
                    }
                )
            )
        return chunks

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        payload: dict[str, Any] = {
            "id": self._id,
            "object": "chat.completion.chunk",
            "created": self._created,
            "model": self._model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if self._include_usage:
            payload["usage"] = None
        return orjson.dumps(payload)


def _block_index(payload: dict[str, Any]) -> int:
    index = payload.get("index")
    if not isinstance(index, int) or isinstance(index, bool):
        raise UpstreamStreamError("upstream sent a content block event without an index")
    return index


# ----------------------------------------------------------------------------- errors

_ERROR_TYPES: Final[dict[str, tuple[str, str | None]]] = {
    "invalid_request_error": ("invalid_request_error", None),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "not_found_error": ("invalid_request_error", "not_found"),
    "authentication_error": ("authentication_error", "invalid_api_key"),
    "permission_error": ("permission_error", "permission_denied"),
    "billing_error": ("insufficient_quota", "insufficient_quota"),
    "rate_limit_error": ("rate_limit_error", "rate_limit_exceeded"),
    "api_error": ("server_error", None),
    "overloaded_error": ("server_error", "overloaded"),
    "timeout_error": ("server_error", "timeout"),
}
_MAX_ECHOED_BODY: Final = 200
_MAX_MESSAGE: Final = 2000


def anthropic_error_to_openai(status: int, body: bytes) -> dict[str, Any]:
    """Map an Anthropic error response (HTTP ``status`` and raw ``body``) to an OpenAI error body.

    Known Anthropic error types map to OpenAI ``type``/``code`` pairs; unknown ones
    fall back on the status (4xx → ``invalid_request_error``, otherwise
    ``server_error``). A body that is not an Anthropic error yields a generic message
    naming the status, quoting the body only when it is a short single line.
    Authentication and permission errors concern the gateway's upstream credential,
    not the caller's key; choosing the status to return is the gateway's business.
    """
    fallback_type = "invalid_request_error" if 400 <= status < 500 else "server_error"
    error: Any = None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        parsed = None
    if isinstance(parsed, dict):
        error = parsed.get("error")
    openai_type, code = fallback_type, None
    message = f"upstream returned HTTP {status}"
    if isinstance(error, dict):
        openai_type, code = _ERROR_TYPES.get(str(error.get("type")), (fallback_type, None))
        if isinstance(error.get("message"), str) and error["message"]:
            message = error["message"][:_MAX_MESSAGE]
    elif parsed is None:
        text = body.decode("utf-8", errors="replace").strip()
        if text and len(text) <= _MAX_ECHOED_BODY and text.isprintable():
            message = f"{message}: {text}"
    return {"error": {"message": message, "type": openai_type, "param": None, "code": code}}
