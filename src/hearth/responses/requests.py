"""A ``POST /v1/responses`` body, checked and translated to the gateway core's chat body.

What maps (Responses → chat completions):

* ``instructions`` → a leading ``system`` message (this turn only: as at OpenAI, the instructions of an
  earlier response are not carried into a chained one);
* ``input`` — a string (one user message) or a list of items: messages (``user``/``system``/
  ``developer``/``assistant``, content a string or ``input_text``/``input_image``/``output_text``/
  ``refusal`` parts), ``function_call`` items (an assistant message's ``tool_calls``) and
  ``function_call_output`` items (``tool`` messages);
* ``tools`` (function tools) → chat tools; ``tool_choice``; ``text.format`` (``text``, ``json_object``,
  ``json_schema``) → ``response_format``; ``max_output_tokens`` → ``max_tokens``; ``reasoning.effort`` →
  ``reasoning_effort``; ``temperature``, ``top_p``, ``parallel_tool_calls``, ``user``, ``service_tier``,
  ``safety_identifier``, ``prompt_cache_key`` as they are.

Everything else the Responses API has but Hearth cannot honour (hosted tools, ``background``, ``include``,
``truncation: auto``, reusable ``prompt``, ``conversation``, file inputs, …) is refused with 400
``invalid_request`` naming the parameter, never silently dropped; an unknown parameter likewise. The chat
body built here is then checked by the chat route's own validation (``hearth.api.chat_validation``, called
by the router), with its parameter names mapped back to the Responses API's by :func:`responses_param`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from hearth.errors import HearthError

__all__ = ["ResponsesRequest", "parse_responses_request", "responses_param"]

_ROLES: Final = frozenset({"user", "system", "developer", "assistant"})
_TOOL_CHOICES: Final = frozenset({"none", "auto", "required"})
# parameters passed to the chat body under the same name
_SAME: Final = ("temperature", "top_p", "parallel_tool_calls", "user", "service_tier", "safety_identifier",
                "prompt_cache_key")
# chat parameter names → the Responses API's, for errors raised by the chat validation
_CHAT_PARAMS: Final = {"max_tokens": "max_output_tokens", "response_format": "text.format", "messages": "input",
                       "reasoning_effort": "reasoning.effort"}


def _invalid(message: str, param: str) -> HearthError:
    return HearthError("invalid_request", message, param=param)


def _unsupported(param: str, what: str) -> HearthError:
    return HearthError("invalid_request", f"{what} is not supported by this server.", param=param)


@dataclass(slots=True)
class ResponsesRequest:
    """A checked Responses request: the chat body of this turn and what the Response object repeats."""

    model: str | None  # None: the caller's scene's default model
    turn: list[dict[str, Any]]  # this turn's input as chat messages
    instructions: str | None
    options: dict[str, Any]  # chat body fields other than model and messages
    previous_response_id: str | None
    store: bool
    stream: bool
    echo: dict[str, Any] = field(default_factory=dict)  # request fields the Response object shows

    def chat_body(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        """The core's chat body: instructions, the earlier conversation (chat messages), this turn."""
        system = [{"role": "system", "content": self.instructions}] if self.instructions else []
        named = {"model": self.model} if self.model is not None else {}
        return {**named, "messages": [*system, *history, *self.turn], **self.options}


def parse_responses_request(body: dict[str, Any]) -> ResponsesRequest:
    """Check ``body`` and translate it; 400 ``invalid_request`` with the Responses API's ``param`` on refusal."""
    for key, value in body.items():
        if key not in _KNOWN:
            raise _invalid(f"Unknown parameter: '{key}'.", key)
        refuse = _REFUSED.get(key)
        if refuse is not None and value is not None:
            refuse(key, value)
    model = body.get("model")  # may be omitted when the caller's scene names a default model (as on chat)
    if model is not None and (type(model) is not str or not model):
        raise _invalid("`model` must be a non-empty string.", "model")
    if "input" not in body or body["input"] is None:
        raise _invalid("`input` is required: a string or an array of input items.", "input")
    turn = _turn(body["input"])
    instructions = body.get("instructions")
    if instructions is not None and type(instructions) is not str:
        raise _invalid("`instructions` must be a string.", "instructions")
    previous = body.get("previous_response_id")
    if previous is not None and (type(previous) is not str or not previous or len(previous) > 64):
        raise _invalid("`previous_response_id` must be a response id.", "previous_response_id")
    store = _flag(body, "store", default=True)
    stream = _flag(body, "stream", default=False)
    if body.get("stream_options") is not None:
        if not stream:
            raise _invalid("`stream_options` is only allowed when `stream` is true.", "stream_options")
        if type(body["stream_options"]) is not dict:
            raise _invalid("`stream_options` must be an object.", "stream_options")
    metadata = body.get("metadata")
    if metadata is not None and (type(metadata) is not dict or len(metadata) > 16
                                 or any(type(v) is not str for v in metadata.values())):
        raise _invalid("`metadata` must be an object of at most 16 string values.", "metadata")
    options = _options(body)
    return ResponsesRequest(model=model, turn=turn, instructions=instructions, options=options,
                            previous_response_id=previous, store=store, stream=stream, echo=_echo(body, metadata))


def _flag(body: dict[str, Any], key: str, *, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if type(value) is not bool:
        raise _invalid(f"`{key}` must be a boolean.", key)
    return value


def _options(body: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {k: body[k] for k in _SAME if body.get(k) is not None}
    if body.get("max_output_tokens") is not None:
        options["max_tokens"] = body["max_output_tokens"]
    if body.get("tools"):
        options["tools"] = _tools(body["tools"])
    elif body.get("tools") is not None and type(body["tools"]) is not list:
        raise _invalid("`tools` must be an array.", "tools")
    if body.get("tool_choice") is not None:
        options["tool_choice"] = _tool_choice(body["tool_choice"])
    text = body.get("text")
    if text is not None:
        response_format = _text(text)
        if response_format is not None:
            options["response_format"] = response_format
    reasoning = body.get("reasoning")
    if reasoning is not None and reasoning.get("effort") is not None:
        options["reasoning_effort"] = reasoning["effort"]
    return options


def _echo(body: dict[str, Any], metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The request fields a Response object repeats, with the API's defaults where the request gave none."""
    reasoning = body.get("reasoning")
    return {
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": metadata or {},
        "parallel_tool_calls": body.get("parallel_tool_calls", True) is not False,
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": {"effort": reasoning.get("effort") if isinstance(reasoning, dict) else None, "summary": None},
        "service_tier": body.get("service_tier") or "default",
        "store": body.get("store") is not False,
        "temperature": body.get("temperature", 1.0),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice") or "auto",
        "tools": body.get("tools") or [],
        "top_p": body.get("top_p", 1.0),
        "truncation": "disabled",
        "user": body.get("user"),
        "background": False,
    }


def responses_param(chat_param: str | None) -> str | None:
    """A chat body's parameter name (as the chat validation names it) in the Responses API's terms."""
    param = chat_param or ""
    head = param.split("[", 1)[0].split(".", 1)[0]
    if head not in _CHAT_PARAMS:
        return chat_param
    return _CHAT_PARAMS[head] + (param[len(head):] if head != "messages" else "")


# ---- input items -------------------------------------------------------------------------------
def _turn(value: Any) -> list[dict[str, Any]]:
    if type(value) is str:
        return [{"role": "user", "content": value}]
    if type(value) is not list or not value:
        raise _invalid("`input` must be a string or a non-empty array of input items.", "input")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if type(item) is not dict:
            raise _invalid(f"`{where}` must be an object.", where)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(_message(where, item))
        elif kind == "function_call":
            _function_call(where, item, messages)
        elif kind == "function_call_output":
            messages.append(_function_call_output(where, item))
        else:
            raise _unsupported(f"{where}.type", f"Input items of type `{kind}`")
    return messages


def _message(where: str, item: dict[str, Any]) -> dict[str, Any]:
    role = item.get("role")
    if type(role) is not str or role not in _ROLES:
        raise _invalid(f"`{where}.role` must be one of {', '.join(sorted(_ROLES))}.", f"{where}.role")
    content = item.get("content")
    if type(content) is str:
        return {"role": role, "content": content}
    if type(content) is not list or not content:
        raise _invalid(f"`{where}.content` must be a string or a non-empty array of content parts.",
                       f"{where}.content")
    parts = [_part(f"{where}.content[{j}]", part) for j, part in enumerate(content)]
    if role == "assistant":  # an earlier answer: its text (chat's assistant content is plain text)
        return {"role": role, "content": "".join(p.get("text") or p.get("refusal") or "" for p in parts)}
    return {"role": role, "content": parts}


def _part(where: str, part: Any) -> dict[str, Any]:
    if type(part) is not dict:
        raise _invalid(f"`{where}` must be an object.", where)
    kind = part.get("type")
    if kind in ("input_text", "output_text"):
        if type(part.get("text")) is not str:
            raise _invalid(f"`{where}.text` must be a string.", f"{where}.text")
        return {"type": "text", "text": part["text"]}
    if kind == "refusal":
        if type(part.get("refusal")) is not str:
            raise _invalid(f"`{where}.refusal` must be a string.", f"{where}.refusal")
        return {"type": "text", "text": part["refusal"]}
    if kind == "input_image":
        if part.get("file_id") is not None:
            raise _unsupported(f"{where}.file_id", "An image given by `file_id`")
        url = part.get("image_url")
        if type(url) is not str or not url:
            raise _invalid(f"`{where}.image_url` must be a non-empty string (a URL or a data URL).",
                           f"{where}.image_url")
        image: dict[str, Any] = {"url": url}
        detail = part.get("detail")
        if detail is not None:
            if detail not in ("auto", "low", "high"):
                raise _invalid(f"`{where}.detail` must be 'auto', 'low' or 'high'.", f"{where}.detail")
            image["detail"] = detail
        return {"type": "image_url", "image_url": image}
    raise _unsupported(f"{where}.type", f"Content parts of type `{kind}`")


def _string_field(where: str, item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    if type(value) is not str or (key != "arguments" and not value):
        raise _invalid(f"`{where}.{key}` must be a non-empty string.", f"{where}.{key}")
    return value


def _function_call(where: str, item: dict[str, Any], messages: list[dict[str, Any]]) -> None:
    """An earlier tool call: joins the assistant message just before it (chat has one message per turn
    with all its ``tool_calls``), or starts one."""
    call = {"id": _string_field(where, item, "call_id"), "type": "function",
            "function": {"name": _string_field(where, item, "name"),
                         "arguments": _string_field(where, item, "arguments")}}
    last = messages[-1] if messages else None
    if last is not None and last["role"] == "assistant":
        last.setdefault("tool_calls", []).append(call)
        return
    messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _function_call_output(where: str, item: dict[str, Any]) -> dict[str, Any]:
    output = item.get("output")
    if type(output) is list:  # an array of input_text parts
        output = "".join(_part(f"{where}.output[{j}]", p).get("text", "") for j, p in enumerate(output))
    if type(output) is not str:
        raise _invalid(f"`{where}.output` must be a string.", f"{where}.output")
    return {"role": "tool", "tool_call_id": _string_field(where, item, "call_id"), "content": output}


# ---- tools and formats -------------------------------------------------------------------------
def _tools(value: Any) -> list[dict[str, Any]]:
    if type(value) is not list:
        raise _invalid("`tools` must be an array.", "tools")
    tools = []
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if type(tool) is not dict:
            raise _invalid(f"`{where}` must be an object.", where)
        if tool.get("type") != "function":
            raise _unsupported(f"{where}.type", f"Tools of type `{tool.get('type')}` (only `function` tools are)")
        name = tool.get("name")
        if type(name) is not str or not name:
            raise _invalid(f"`{where}.name` must be a non-empty string.", f"{where}.name")
        function: dict[str, Any] = {"name": name}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(value: Any) -> Any:
    if type(value) is str:
        if value not in _TOOL_CHOICES:
            raise _invalid("`tool_choice` must be 'none', 'auto', 'required' or a function choice.", "tool_choice")
        return value
    if type(value) is dict and value.get("type") == "function":
        name = value.get("name")
        if type(name) is not str or not name:
            raise _invalid("`tool_choice.name` must be a non-empty string.", "tool_choice.name")
        return {"type": "function", "function": {"name": name}}
    raise _unsupported("tool_choice", "This `tool_choice` (only 'none', 'auto', 'required' and function choices)")


def _text(value: Any) -> dict[str, Any] | None:
    if type(value) is not dict:
        raise _invalid("`text` must be an object.", "text")
    if value.get("verbosity") is not None:
        raise _unsupported("text.verbosity", "`text.verbosity`")
    fmt = value.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if type(fmt) is dict else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        assert type(fmt) is dict
        name, schema = fmt.get("name"), fmt.get("schema")
        if type(name) is not str or not name:
            raise _invalid("`text.format.name` must be a non-empty string.", "text.format.name")
        if type(schema) is not dict:
            raise _invalid("`text.format.schema` must be an object (a JSON Schema).", "text.format.schema")
        spec: dict[str, Any] = {"name": name, "schema": schema}
        for key in ("strict", "description"):
            if fmt.get(key) is not None:
                spec[key] = fmt[key]
        return {"type": "json_schema", "json_schema": spec}
    raise _invalid("`text.format.type` must be 'text', 'json_object' or 'json_schema'.", "text.format.type")


# ---- parameters refused when set ----------------------------------------------------------------
def _refuse_true(key: str, value: Any) -> None:
    if value is not False:
        raise _unsupported(key, f"`{key}`")


def _refuse_set(key: str, value: Any) -> None:
    raise _unsupported(key, f"`{key}`")


def _refuse_nonempty(key: str, value: Any) -> None:
    if value != []:
        raise _unsupported(key, f"`{key}`")


def _truncation(key: str, value: Any) -> None:
    if value != "disabled":
        raise _unsupported(key, "`truncation` other than 'disabled'")


def _top_logprobs(key: str, value: Any) -> None:
    if value != 0:
        raise _unsupported(key, "`top_logprobs`")


def _reasoning(key: str, value: Any) -> None:
    if type(value) is not dict:
        raise _invalid("`reasoning` must be an object.", key)
    for sub in ("summary", "generate_summary"):
        if value.get(sub) is not None:
            raise _unsupported(f"reasoning.{sub}", f"`reasoning.{sub}`")
    effort = value.get("effort")
    if effort is not None and type(effort) is not str:
        raise _invalid("`reasoning.effort` must be a string.", "reasoning.effort")


_REFUSED: Final = {"background": _refuse_true, "conversation": _refuse_set, "prompt": _refuse_set,
                   "max_tool_calls": _refuse_set, "include": _refuse_nonempty, "truncation": _truncation,
                   "top_logprobs": _top_logprobs, "reasoning": _reasoning}
_KNOWN: Final = frozenset({"model", "input", "instructions", "previous_response_id", "store", "stream",
                           "stream_options", "metadata", "max_output_tokens", "tools", "tool_choice", "text",
                           *_SAME, *_REFUSED})
