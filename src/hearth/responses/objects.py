"""Response objects (the Responses API's ``response``) built from the gateway core's chat answers.

One chat choice becomes the response's ``output``: a ``message`` item with one ``output_text`` part (or a
``refusal`` part) when the answer has text, then one ``function_call`` item per tool call. Usage maps
``prompt_tokens`` → ``input_tokens`` and ``completion_tokens`` → ``output_tokens`` (with the cached and
reasoning token details when the upstream reported them). A chat answer cut by its token limit
(``finish_reason: length``) is ``status: incomplete`` with ``incomplete_details.reason:
max_output_tokens``, as OpenAI reports it; ``content_filter`` likewise with reason ``content_filter``.

The conversation a stored response carries forward (for ``previous_response_id``) is kept as chat
messages: :func:`assistant_message` is the answer's turn in that form.
"""

from __future__ import annotations

import time
from typing import Any

from hearth.ids import new_id

__all__ = ["assistant_message", "function_call_item", "message_item", "new_item_id", "new_response_id",
           "response_age_s", "response_object", "response_usage", "status_of"]

_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


_STAMP_DIGITS = 11  # milliseconds since the epoch, in hex (until the year 2527)


def new_response_id(*, stored: bool = True, now: float | None = None) -> str:
    """``resp_``, the creation time (ms, hex) and a unique id: the time lets another process tell an id that may
    still be being written (:mod:`hearth.responses.store`). A response that is not stored has ``resp_n`` and no
    time (nothing will be written: a lookup of it need not wait). Ids need not be secret: every read, chain and
    delete checks the owner."""
    if not stored:
        return f"resp_n{new_id()}"
    at = time.time() if now is None else now
    return f"resp_{int(at * 1000):0{_STAMP_DIGITS}x}{new_id()}"


def response_age_s(response_id: str, *, now: float | None = None) -> float | None:
    """How long ago :func:`new_response_id` made ``response_id`` (None for an id it did not make)."""
    stamp = response_id[5:5 + _STAMP_DIGITS]
    if not response_id.startswith("resp_") or len(stamp) != _STAMP_DIGITS:
        return None
    try:
        made = int(stamp, 16) / 1000
    except ValueError:
        return None
    return (time.time() if now is None else now) - made


def new_item_id(kind: str) -> str:
    return f"{kind}_{new_id()}"


def status_of(finish_reason: Any) -> tuple[str, dict[str, Any] | None]:
    """The response's ``status`` and ``incomplete_details`` for a chat ``finish_reason``."""
    reason = _INCOMPLETE.get(finish_reason) if isinstance(finish_reason, str) else None
    return ("incomplete", {"reason": reason}) if reason is not None else ("completed", None)


def response_usage(usage: Any) -> dict[str, Any] | None:
    """Chat usage → Responses usage; None without one."""
    if not isinstance(usage, dict):
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    reasoning = (usage.get("completion_tokens_details") or {}).get("reasoning_tokens") or 0
    return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": int(cached)},
            "output_tokens": completion, "output_tokens_details": {"reasoning_tokens": int(reasoning)},
            "total_tokens": prompt + completion}


def message_item(item_id: str, text: str | None, *, refusal: str | None = None,
                 status: str = "completed") -> dict[str, Any]:
    if refusal is not None:
        content: list[dict[str, Any]] = [{"type": "refusal", "refusal": refusal}]
    else:
        content = [{"type": "output_text", "text": text or "", "annotations": [], "logprobs": []}]
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": content}


def function_call_item(item_id: str, call_id: str, name: str, arguments: str, *,
                       status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}


def output_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat answer's message as the response's output items."""
    items: list[dict[str, Any]] = []
    text, refusal = message.get("content"), message.get("refusal")
    if isinstance(refusal, str) and refusal:
        items.append(message_item(new_item_id("msg"), None, refusal=refusal))
    elif isinstance(text, str) and (text or not message.get("tool_calls")):
        items.append(message_item(new_item_id("msg"), text))
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        items.append(function_call_item(new_item_id("fc"), str(call.get("id") or new_item_id("call")),
                                        str(function.get("name") or ""), str(function.get("arguments") or "")))
    return items


def assistant_message(output: list[dict[str, Any]]) -> dict[str, Any]:
    """The answer's turn as a chat message (what a chained request sends upstream before its own turn)."""
    text = "".join(part.get("text") or part.get("refusal") or ""
                   for item in output if item["type"] == "message" for part in item["content"])
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in output if item["type"] == "function_call"]
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message


def response_object(*, response_id: str, created_at: int, model: str, echo: dict[str, Any],
                    output: list[dict[str, Any]], usage: dict[str, Any] | None, status: str,
                    incomplete: dict[str, Any] | None = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"id": response_id, "object": "response", "created_at": created_at, "status": status,
            "error": error, "incomplete_details": incomplete, "model": model, "output": output,
            "usage": usage, **echo}


def from_chat_completion(completion: dict[str, Any], *, response_id: str, model: str,
                         echo: dict[str, Any]) -> dict[str, Any]:
    """A non-stream chat completion as a Response object."""
    choices = completion.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], dict) else {}
    status, incomplete = status_of(choice.get("finish_reason"))
    return response_object(response_id=response_id, created_at=int(time.time()), model=model, echo=echo,
                           output=output_items(choice.get("message") or {}),
                           usage=response_usage(completion.get("usage")), status=status, incomplete=incomplete)
