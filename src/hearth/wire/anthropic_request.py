"""An Anthropic Messages request, checked and turned into the gateway core's chat body (OpenAI's format).

``POST /v1/messages`` is one more door onto the same core as ``/v1/chat/completions``: the core plans,
admits, routes, budgets and logs an OpenAI-format chat body, so an Anthropic request is translated into
one before anything else happens (even when the call is then passed natively to an Anthropic endpoint,
the translated body is what admission estimates and capability routing read). Pure functions, no I/O.

Mappings (the reverse of :mod:`hearth.providers.anthropic_format`):

* ``system`` (a string or text blocks) → one leading ``system`` message (blocks joined by blank lines);
* ``text`` blocks → text parts; ``image`` blocks (``base64`` or ``url`` sources) → ``image_url`` parts;
* an assistant's ``tool_use`` blocks → its ``tool_calls`` (``input`` as a JSON string);
* a user's ``tool_result`` blocks → ``tool`` messages, in order, before the rest of that user turn; an
  image inside a tool result goes into a user message right after them (OpenAI's tool messages carry
  text only);
* ``thinking`` / ``redacted_thinking`` blocks of earlier turns are dropped (only Anthropic reads them);
* ``max_tokens`` (required), ``temperature``, ``top_p``, ``stop_sequences`` → their OpenAI names;
  ``metadata.user_id`` → ``user`` (Hearth's end user); ``tools``/``tool_choice`` → function tools;
  ``disable_parallel_tool_use`` → ``parallel_tool_calls: false``; ``output_config.format`` (a JSON
  schema) → ``response_format``; a stream asks for the usage chunk.

What a translated call cannot honour — document blocks, file sources, server tools (``web_search_…``,
``bash_…``), ``mcp_servers``, ``container`` — is refused with 400 (a message naming the field), or, when the
door asks (:class:`NativeOnly`), noted as needing a native Anthropic endpoint. Accepted and
not translated (documented in docs/anthropic.md): ``top_k``, ``thinking``, ``cache_control``,
``output_config.effort``, ``service_tier``, ``speed``, ``inference_geo`` and other fields Hearth does not
know — hints and account settings whose absence still gives a valid answer.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from hearth.errors import HearthError

__all__ = ["MAX_STOP_SEQUENCES", "NativeOnly", "messages_to_chat"]

MAX_STOP_SEQUENCES: Final = 64
_MAX_USER_ID: Final = 256
_REFUSED_FIELDS: Final = ("mcp_servers", "container")
_DROPPED_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})
_IMAGE_TYPES: Final = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_TOOL_CHOICES: Final = {"auto": "auto", "any": "required", "none": "none"}


def _bad(param: str, message: str) -> HearthError:
    return HearthError("invalid_request", f"{param}: {message}", param=param)


class NativeOnly(list[str]):
    """The request's features only a native Anthropic endpoint can serve (their field paths).

    Given to :func:`messages_to_chat`, such a feature is recorded here and left out of the chat body
    instead of being refused: the door then routes the call to Anthropic endpoints only (the caller's
    body goes to them as it is), and answers 400 ``unsupported_feature`` if the model has none."""


def _inexpressible(native: NativeOnly | None, param: str, message: str) -> None:
    if native is None:
        raise _bad(param, message)
    native.append(param)


def messages_to_chat(body: dict[str, Any], native: NativeOnly | None = None) -> dict[str, Any]:
    """The chat body the core runs for the Anthropic request ``body`` (400 ``invalid_request`` if invalid).

    What only Anthropic can serve is refused, or, with ``native``, recorded there and left out."""
    for name in _REFUSED_FIELDS:
        if body.get(name) is not None:
            _inexpressible(native, name, "not supported by Hearth's translated Messages route.")
    model = body.get("model")
    if model is not None and (not isinstance(model, str) or not model):
        raise _bad("model", "must be a non-empty string.")
    max_tokens = body.get("max_tokens")
    if type(max_tokens) is not int or max_tokens < 1:
        raise _bad("max_tokens", "required: a positive integer.")
    messages: list[dict[str, Any]] = []
    system = _system_text(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise _bad("messages", "must be a non-empty array.")
    for i, message in enumerate(raw):
        messages.extend(_message(message, f"messages.{i}", native))
    chat: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens}
    _sampling(body, chat)
    _tools(body, chat, native)
    _output_format(body, chat)
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise _bad("stream", "must be a boolean.")
    if stream:
        chat["stream"] = True
        chat["stream_options"] = {"include_usage": True}
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise _bad("metadata", "must be an object.")
        user = metadata.get("user_id")
        if user is not None:
            if not isinstance(user, str) or len(user) > _MAX_USER_ID:
                raise _bad("metadata.user_id", f"must be a string of at most {_MAX_USER_ID} characters.")
            if user:
                chat["user"] = user
    return chat


def _system_text(system: Any) -> str:
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, list):
        raise _bad("system", "must be a string or an array of text blocks.")
    texts = []
    for i, block in enumerate(system):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise _bad(f"system.{i}", "must be a text block ({\"type\": \"text\", \"text\": ...}).")
        if block["text"]:
            texts.append(block["text"])
    return "\n\n".join(texts)


def _message(message: Any, where: str, native: NativeOnly | None) -> list[dict[str, Any]]:
    """One Anthropic message as the OpenAI messages it becomes (several for a turn with tool results)."""
    if not isinstance(message, dict):
        raise _bad(where, "must be an object.")
    role = message.get("role")
    if role not in ("user", "assistant"):
        raise _bad(f"{where}.role", "must be `user` or `assistant`.")
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise _bad(f"{where}.content", "must be a string or an array of content blocks.")
    return _assistant(content, where, native) if role == "assistant" else _user(content, where, native)


def _assistant(blocks: list[Any], where: str, native: NativeOnly | None) -> list[dict[str, Any]]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        at = f"{where}.content.{i}"
        kind = _block_type(block, at)
        if kind == "text":
            texts.append(_text(block, at))
        elif kind == "tool_use":
            calls.append(_tool_call(block, at))
        elif kind not in _DROPPED_BLOCKS:
            _inexpressible(native, f"{at}.type", f"`{kind}` blocks are not supported in assistant turns here.")
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if calls:
        out["tool_calls"] = calls
    return [out]


def _user(blocks: list[Any], where: str, native: NativeOnly | None) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    result_images: list[dict[str, Any]] = []
    for i, block in enumerate(blocks):
        at = f"{where}.content.{i}"
        kind = _block_type(block, at)
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, at)})
        elif kind == "image":
            parts.extend(_image(block, at, native))
        elif kind == "tool_result":
            results.append(_tool_result(block, at, result_images, native))
        elif kind not in _DROPPED_BLOCKS:
            _inexpressible(native, f"{at}.type",
                           f"`{kind}` blocks are not supported by Hearth's translated Messages route.")
    out = list(results)
    if result_images:
        out.append({"role": "user", "content": result_images})
    if parts or not results:
        only_text = all(p["type"] == "text" for p in parts)
        out.append({"role": "user", "content": "".join(p["text"] for p in parts) if only_text and len(parts) == 1
                    else parts})
    return out


def _block_type(block: Any, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _bad(where, "must be a content block with a `type`.")
    kind: str = block["type"]
    return kind


def _text(block: dict[str, Any], where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise _bad(f"{where}.text", "must be a string.")
    return text


def _image(block: dict[str, Any], where: str, native: NativeOnly | None) -> list[dict[str, Any]]:
    """The image as an ``image_url`` part (none when only a native endpoint can read its source)."""
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "base64":
        assert isinstance(source, dict)
        media, data = source.get("media_type"), source.get("data")
        if media not in _IMAGE_TYPES:
            raise _bad(f"{where}.source.media_type", f"must be one of {', '.join(sorted(_IMAGE_TYPES))}.")
        if not isinstance(data, str) or not data:
            raise _bad(f"{where}.source.data", "must be non-empty base64 data.")
        return [{"type": "image_url", "image_url": {"url": f"data:{media};base64,{data}"}}]
    if kind == "url":
        assert isinstance(source, dict)
        url = source.get("url")
        if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")):
            raise _bad(f"{where}.source.url", "must be an http(s) URL.")
        return [{"type": "image_url", "image_url": {"url": url}}]
    _inexpressible(native, f"{where}.source.type", "must be `base64` or `url` here.")
    return []


def _tool_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
    if not isinstance(call_id, str) or not call_id:
        raise _bad(f"{where}.id", "must be a non-empty string.")
    if not isinstance(name, str) or not name:
        raise _bad(f"{where}.name", "must be a non-empty string.")
    if not isinstance(arguments, dict):
        raise _bad(f"{where}.input", "must be an object.")
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(arguments).decode()}}


def _tool_result(block: dict[str, Any], where: str, images: list[dict[str, Any]],
                 native: NativeOnly | None) -> dict[str, Any]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise _bad(f"{where}.tool_use_id", "must be a non-empty string.")
    content = block.get("content", "")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            at = f"{where}.content.{i}"
            kind = _block_type(part, at)
            if kind == "text":
                texts.append(_text(part, at))
            elif kind == "image":
                images.extend(_image(part, at, native))
            else:
                _inexpressible(native, f"{at}.type", f"`{kind}` blocks are not supported in tool results here.")
        text = "\n".join(texts)
    else:
        raise _bad(f"{where}.content", "must be a string or an array of blocks.")
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _number(body: dict[str, Any], key: str, high: float) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= high:
        raise _bad(key, f"must be a number between 0 and {high:g}.")
    return value


def _sampling(body: dict[str, Any], chat: dict[str, Any]) -> None:
    for key in ("temperature", "top_p"):
        value = _number(body, key, 1)
        if value is not None:
            chat[key] = value
    top_k = body.get("top_k")
    if top_k is not None and (type(top_k) is not int or top_k < 0):
        raise _bad("top_k", "must be a non-negative integer.")
    stops = body.get("stop_sequences")
    if stops is None:
        return
    if not isinstance(stops, list) or len(stops) > MAX_STOP_SEQUENCES or not all(
            isinstance(s, str) and s for s in stops):
        raise _bad("stop_sequences", f"must be an array of at most {MAX_STOP_SEQUENCES} non-empty strings.")
    if stops:
        chat["stop"] = stops


def _output_format(body: dict[str, Any], chat: dict[str, Any]) -> None:
    """``output_config.format`` (structured output: a JSON schema) → ``response_format``; ``effort`` is a hint."""
    config = body.get("output_config")
    if config is None:
        return
    if not isinstance(config, dict):
        raise _bad("output_config", "must be an object.")
    fmt = config.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise _bad("output_config.format", "must be {\"type\": \"json_schema\", \"schema\": {...}}.")
    chat["response_format"] = {"type": "json_schema", "json_schema": {"name": "output", "schema": fmt["schema"]}}


def _tools(body: dict[str, Any], chat: dict[str, Any], native: NativeOnly | None) -> None:
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools", "must be an array.")
        functions = [f for i, tool in enumerate(tools) if (f := _tool(tool, f"tools.{i}", native)) is not None]
        if functions:
            chat["tools"] = functions
    choice = body.get("tool_choice")
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        assert isinstance(choice, dict)
        name = choice.get("name")
        if not isinstance(name, str) or not name:
            raise _bad("tool_choice.name", "must be a non-empty string.")
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif kind in _TOOL_CHOICES:
        chat["tool_choice"] = _TOOL_CHOICES[kind]
    else:
        raise _bad("tool_choice.type", "must be `auto`, `any`, `tool` or `none`.")
    assert isinstance(choice, dict)
    if choice.get("disable_parallel_tool_use") is True and kind != "none":
        chat["parallel_tool_calls"] = False


def _tool(tool: Any, where: str, native: NativeOnly | None) -> dict[str, Any] | None:
    if not isinstance(tool, dict):
        raise _bad(where, "must be an object.")
    kind = tool.get("type")
    if kind not in (None, "custom"):
        _inexpressible(native, f"{where}.type",
                       f"server tool `{kind}` is not supported by Hearth's translated Messages route.")
        return None
    name, schema = tool.get("name"), tool.get("input_schema")
    if not isinstance(name, str) or not name:
        raise _bad(f"{where}.name", "must be a non-empty string.")
    if not isinstance(schema, dict):
        raise _bad(f"{where}.input_schema", "must be a JSON Schema object.")
    function: dict[str, Any] = {"name": name}
    description = tool.get("description")
    if isinstance(description, str) and description:
        function["description"] = description
    function["parameters"] = schema
    return {"type": "function", "function": function}
