"""Request validation for ``/v1/chat/completions`` and ``/v1/embeddings``, as OpenAI does it.

Every refusal is a :class:`HearthError` ``invalid_request`` (400) whose ``param`` names the field
in OpenAI's notation (``messages[2].content[0].text``), so a caller's SDK shows the same error it
would get from OpenAI. Bad input must never reach the gateway core as a wrong type (a non-string
role, a list where a number belongs) or as an integer beyond what any model or column can hold.

Why by hand and not a pydantic model: this runs on every call. It is one pass over the body's
keys (a dict lookup per key, most bodies have three to six) plus one pass over the messages, with
``type``/``isinstance`` checks only; unknown top-level fields are passed through untouched, because
providers accept extensions that Hearth relays. A typical body costs a few microseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from hearth.errors import HearthError

__all__ = ["MAX_OUTPUT_TOKENS", "validate_chat", "validate_embeddings"]

ROLES: Final = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
#: Larger than any model's output limit; also keeps every count far inside a 32-bit column.
MAX_OUTPUT_TOKENS: Final = 1_000_000
MAX_CHOICES: Final = 128
MAX_STOP: Final = 4
MAX_TOOLS: Final = 128
MAX_MODEL_NAME: Final = 256
MAX_EMBEDDING_INPUTS: Final = 2048
MAX_TOKEN_ID: Final = 2**31 - 1
_INT64: Final = 2**63
_TOOL_CHOICES: Final = frozenset({"none", "auto", "required"})
_RESPONSE_FORMATS: Final = frozenset({"text", "json_object", "json_schema"})
_ENCODINGS: Final = frozenset({"float", "base64"})


def _invalid(message: str, param: str) -> HearthError:
    return HearthError("invalid_request", message, param=param)


# ---- scalar checks -----------------------------------------------------------------------------
def _number(key: str, value: Any, low: float, high: float) -> None:
    t = type(value)
    if (t is not float and t is not int) or not low <= value <= high:
        raise _invalid(f"`{key}` must be a number between {low:g} and {high:g}.", key)


def _integer(key: str, value: Any, low: int, high: int) -> None:
    if type(value) is not int or not low <= value <= high:
        raise _invalid(f"`{key}` must be an integer between {low} and {high}.", key)


def _string(key: str, value: Any) -> None:
    if type(value) is not str:
        raise _invalid(f"`{key}` must be a string.", key)


def _boolean(key: str, value: Any) -> None:
    if type(value) is not bool:
        raise _invalid(f"`{key}` must be a boolean.", key)


def _object(key: str, value: Any) -> None:
    if type(value) is not dict:
        raise _invalid(f"`{key}` must be an object.", key)


# ---- field checks (called only for fields present and not null) -------------------------------
def _model(key: str, value: Any) -> None:
    if type(value) is not str or not value or len(value) > MAX_MODEL_NAME:
        raise _invalid(f"`model` must be a non-empty string of at most {MAX_MODEL_NAME} characters.", key)


def _max_tokens(key: str, value: Any) -> None:
    if type(value) is not int or not 1 <= value <= MAX_OUTPUT_TOKENS:
        raise _invalid(f"`{key}` must be an integer between 1 and {MAX_OUTPUT_TOKENS}.", key)


def _temperature(key: str, value: Any) -> None:
    _number(key, value, 0, 2)


def _top_p(key: str, value: Any) -> None:
    _number(key, value, 0, 1)


def _penalty(key: str, value: Any) -> None:
    _number(key, value, -2, 2)


def _n(key: str, value: Any) -> None:
    _integer(key, value, 1, MAX_CHOICES)


def _seed(key: str, value: Any) -> None:
    _integer(key, value, -_INT64, _INT64 - 1)


def _top_logprobs(key: str, value: Any) -> None:
    _integer(key, value, 0, 20)


def _stop(key: str, value: Any) -> None:
    if type(value) is str:
        return
    if type(value) is not list or len(value) > MAX_STOP or any(type(s) is not str for s in value):
        raise _invalid(f"`stop` must be a string or an array of at most {MAX_STOP} strings.", key)


def _stream_options(key: str, value: Any) -> None:
    _object(key, value)
    include = value.get("include_usage")
    if include is not None and type(include) is not bool:
        raise _invalid("`stream_options.include_usage` must be a boolean.", "stream_options.include_usage")


def _tools(key: str, value: Any) -> None:
    if type(value) is not list or len(value) > MAX_TOOLS:
        raise _invalid(f"`tools` must be an array of at most {MAX_TOOLS} tools.", key)
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if type(tool) is not dict:
            raise _invalid(f"`{where}` must be an object.", where)
        kind = tool.get("type")
        if kind != "function" and kind != "custom":
            raise _invalid(f"`{where}.type` must be 'function' or 'custom'.", f"{where}.type")
        spec = tool.get(kind)
        if type(spec) is not dict:
            raise _invalid(f"`{where}.{kind}` must be an object.", f"{where}.{kind}")
        name = spec.get("name")
        if type(name) is not str or not name:
            raise _invalid(f"`{where}.{kind}.name` must be a non-empty string.", f"{where}.{kind}.name")
        description = spec.get("description")
        if description is not None and type(description) is not str:
            raise _invalid(f"`{where}.{kind}.description` must be a string.", f"{where}.{kind}.description")
        parameters = spec.get("parameters")
        if parameters is not None and type(parameters) is not dict:
            raise _invalid(f"`{where}.{kind}.parameters` must be an object.", f"{where}.{kind}.parameters")


def _tool_choice(key: str, value: Any) -> None:
    if type(value) is str:
        if value not in _TOOL_CHOICES:
            raise _invalid("`tool_choice` must be 'none', 'auto', 'required' or an object.", key)
        return
    if type(value) is not dict or type(value.get("type")) is not str:
        raise _invalid("`tool_choice` must be a string or an object with a string `type`.", key)
    function = value.get("function")
    if function is not None and (type(function) is not dict or type(function.get("name")) is not str):
        raise _invalid("`tool_choice.function.name` must be a string.", "tool_choice.function.name")


def _response_format(key: str, value: Any) -> None:
    kind = value.get("type") if type(value) is dict else None
    if type(kind) is not str or kind not in _RESPONSE_FORMATS:
        raise _invalid("`response_format.type` must be 'text', 'json_object' or 'json_schema'.",
                       "response_format.type")
    if kind == "json_schema":
        schema = value.get("json_schema")
        if type(schema) is not dict or type(schema.get("name")) is not str:
            raise _invalid("`response_format.json_schema` must be an object with a string `name`.",
                           "response_format.json_schema")


def _logit_bias(key: str, value: Any) -> None:
    _object(key, value)
    for token, bias in value.items():
        t = type(bias)
        if (t is not int and t is not float) or not -100 <= bias <= 100:
            raise _invalid("`logit_bias` values must be numbers between -100 and 100.", f"logit_bias.{token}")


def _string_list(key: str, value: Any) -> None:
    if type(value) is not list or any(type(s) is not str for s in value):
        raise _invalid(f"`{key}` must be an array of strings.", key)


def _ignore(key: str, value: Any) -> None:
    """Checked elsewhere (``messages``) or together with another field (``stream_options``)."""


_Check = Callable[[str, Any], None]

_CHAT_FIELDS: Final[dict[str, _Check]] = {
    "messages": _ignore,
    "model": _model,
    "stream": _boolean,
    "stream_options": _stream_options,
    "max_tokens": _max_tokens,
    "max_completion_tokens": _max_tokens,
    "temperature": _temperature,
    "top_p": _top_p,
    "n": _n,
    "presence_penalty": _penalty,
    "frequency_penalty": _penalty,
    "stop": _stop,
    "tools": _tools,
    "tool_choice": _tool_choice,
    "parallel_tool_calls": _boolean,
    "response_format": _response_format,
    "user": _string,
    "seed": _seed,
    "logprobs": _boolean,
    "top_logprobs": _top_logprobs,
    "logit_bias": _logit_bias,
    "metadata": _object,
    "store": _boolean,
    "modalities": _string_list,
    "reasoning_effort": _string,
    "service_tier": _string,
    "prediction": _object,
    "audio": _object,
    "web_search_options": _object,
    "functions": _ignore,  # legacy: relayed as is (the Anthropic translation refuses it)
    "function_call": _ignore,
}


# ---- messages ----------------------------------------------------------------------------------
def _check_part(where: str, part: Any, role: str) -> None:
    if type(part) is not dict:
        raise _invalid(f"`{where}` must be an object.", where)
    kind = part.get("type")
    if type(kind) is not str or not kind:
        raise _invalid(f"`{where}.type` must be a non-empty string.", f"{where}.type")
    if kind == "text":
        if type(part.get("text")) is not str:
            raise _invalid(f"`{where}.text` must be a string.", f"{where}.text")
    elif kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if type(image) is dict else None
        if type(url) is not str or not url:
            raise _invalid(f"`{where}.image_url.url` must be a non-empty string.", f"{where}.image_url.url")
    elif kind == "refusal":
        if role != "assistant" or type(part.get("refusal")) is not str:
            raise _invalid(f"`{where}`: refusal parts are for assistant messages and need a string `refusal`.",
                           f"{where}.refusal")
    elif kind == "input_audio" or kind == "file":
        if type(part.get(kind)) is not dict:
            raise _invalid(f"`{where}.{kind}` must be an object.", f"{where}.{kind}")


def _check_tool_calls(where: str, calls: Any) -> None:
    if type(calls) is not list:
        raise _invalid(f"`{where}.tool_calls` must be an array.", f"{where}.tool_calls")
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        if type(call) is not dict:
            raise _invalid(f"`{at}` must be an object.", at)
        if type(call.get("id")) is not str:
            raise _invalid(f"`{at}.id` must be a string.", f"{at}.id")
        kind = call.get("type", "function")
        if type(kind) is not str:
            raise _invalid(f"`{at}.type` must be a string.", f"{at}.type")
        function = call.get("function")
        if kind == "function" and (type(function) is not dict or type(function.get("name")) is not str
                                   or type(function.get("arguments", "")) is not str):
            raise _invalid(f"`{at}.function` must be an object with string `name` and `arguments`.",
                           f"{at}.function")


def _check_message(i: int, m: Any) -> None:
    if type(m) is not dict:
        raise _invalid(f"`messages[{i}]` must be an object.", f"messages[{i}]")
    role = m.get("role")
    if type(role) is not str or role not in ROLES:
        raise _invalid(f"`messages[{i}].role` must be one of {', '.join(sorted(ROLES))}.", f"messages[{i}].role")
    content = m.get("content")
    t = type(content)
    if t is str:
        pass
    elif t is list:
        if not content:
            raise _invalid(f"`messages[{i}].content` must not be an empty array.", f"messages[{i}].content")
        for j, part in enumerate(content):
            _check_part(f"messages[{i}].content[{j}]", part, role)
    elif content is None:
        if role != "assistant" or (m.get("tool_calls") is None and m.get("function_call") is None):
            raise _invalid(f"`messages[{i}].content` is required: a string or an array of content parts.",
                           f"messages[{i}].content")
    else:
        raise _invalid(f"`messages[{i}].content` must be a string, an array of content parts or null.",
                       f"messages[{i}].content")
    if len(m) > 2 or role == "tool":
        _check_message_extras(i, m, role)


def _check_message_extras(i: int, m: dict[str, Any], role: str) -> None:
    name = m.get("name")
    if name is not None and type(name) is not str:
        raise _invalid(f"`messages[{i}].name` must be a string.", f"messages[{i}].name")
    calls = m.get("tool_calls")
    if calls is not None:
        _check_tool_calls(f"messages[{i}]", calls)
    call_id = m.get("tool_call_id")
    if role == "tool" and (type(call_id) is not str or not call_id):
        raise _invalid(f"`messages[{i}].tool_call_id` must be a non-empty string.", f"messages[{i}].tool_call_id")
    if call_id is not None and type(call_id) is not str:
        raise _invalid(f"`messages[{i}].tool_call_id` must be a string.", f"messages[{i}].tool_call_id")


# ---- entry points ------------------------------------------------------------------------------
def validate_chat(body: dict[str, Any]) -> None:
    """Refuse a chat completion body OpenAI would refuse (400 ``invalid_request`` with ``param``)."""
    messages = body.get("messages")
    if type(messages) is not list or not messages:
        raise _invalid("`messages` must be a non-empty array.", "messages")
    for i, m in enumerate(messages):
        _check_message(i, m)
    for key, value in body.items():
        if value is not None:
            check = _CHAT_FIELDS.get(key)
            if check is not None:
                check(key, value)
    if body.get("stream_options") is not None and body.get("stream") is not True:
        raise _invalid("`stream_options` is only allowed when `stream` is true.", "stream_options")


def _embedding_input(value: Any) -> None:
    t = type(value)
    if t is str:
        if not value:
            raise _invalid("`input` must not be an empty string.", "input")
        return
    if t is not list or not value or len(value) > MAX_EMBEDDING_INPUTS:
        raise _invalid(f"`input` must be a non-empty string or an array of 1 to {MAX_EMBEDDING_INPUTS} items.",
                       "input")
    first = type(value[0])
    if first is str:
        for i, item in enumerate(value):
            if type(item) is not str or not item:
                raise _invalid("`input` items must all be non-empty strings.", f"input[{i}]")
    elif first is int:
        _token_ids("input", value)
    elif first is list:
        for i, item in enumerate(value):
            if type(item) is not list or not item:
                raise _invalid("`input` items must all be non-empty arrays of token ids.", f"input[{i}]")
            _token_ids(f"input[{i}]", item)
    else:
        raise _invalid("`input` must be a string, an array of strings or an array of token ids.", "input[0]")


def _token_ids(where: str, ids: list[Any]) -> None:
    for j, token in enumerate(ids):
        if type(token) is not int or not 0 <= token <= MAX_TOKEN_ID:
            raise _invalid(f"`{where}` token ids must be integers between 0 and {MAX_TOKEN_ID}.", f"{where}[{j}]")


def _dimensions(key: str, value: Any) -> None:
    _integer(key, value, 1, 65_536)


def _encoding(key: str, value: Any) -> None:
    if type(value) is not str or value not in _ENCODINGS:
        raise _invalid("`encoding_format` must be 'float' or 'base64'.", key)


_EMBEDDING_FIELDS: Final[dict[str, _Check]] = {
    "model": _model,
    "user": _string,
    "dimensions": _dimensions,
    "encoding_format": _encoding,
}


def validate_embeddings(body: dict[str, Any]) -> None:
    """Refuse an embeddings body OpenAI would refuse (400 ``invalid_request`` with ``param``)."""
    _embedding_input(body.get("input"))
    for key, value in body.items():
        if value is not None:
            check = _EMBEDDING_FIELDS.get(key)
            if check is not None:
                check(key, value)
