"""Offline token estimates, used when an upstream does not report usage and for reservations.

Deliberately cheap (no tokenizer download, no per-character loop): ASCII text counts about four
characters per token, other scripts (CJK and the like) about one token per character.
"""

from __future__ import annotations

from typing import Any

import orjson

IMAGE_TOKENS_BOUND = 2_000  # what one image part may cost at most (high detail, large image)
MESSAGE_OVERHEAD_TOKENS = 8  # role and separator tokens around each message
_BILLED_EXTRAS = ("tools", "functions", "tool_choice", "response_format", "input")
_MEDIA_PARTS = frozenset({"image_url", "input_image", "image", "input_audio", "file"})


def estimate_text(text: str) -> int:
    if not text:
        return 0
    chars = len(text)
    extra = len(text.encode()) - chars  # bytes beyond one per char ≈ 2 per CJK char
    non_ascii = extra // 2
    return max(1, (chars - non_ascii + 3) // 4 + non_ascii)


def estimate_messages(messages: Any) -> int:
    total = 3
    if not isinstance(messages, list):
        return total
    for m in messages:
        total += 4
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        if isinstance(content, str):
            total += estimate_text(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict):
                    if part.get("type") == "text":
                        total += estimate_text(str(part.get("text", "")))
                    else:
                        total += 85  # images and other parts: a flat low-detail cost
        for call in m.get("tool_calls") or ():
            if isinstance(call, dict):
                total += estimate_text(str(call.get("function", "")))
    return total


# Every name a request may give its output limit: OpenAI's old and new spellings and the Responses-style one
# some compatible servers read. A scene's cap is checked against each of them.
OUTPUT_LIMIT_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def requested_max_tokens(body: dict[str, Any]) -> int | None:
    """The largest output limit the request names in any of its fields (None when it names none)."""
    best: int | None = None
    for key in OUTPUT_LIMIT_FIELDS:
        value = body.get(key)
        if isinstance(value, int) and value > 0 and (best is None or value > best):
            best = value
    return best


def requested_choices(body: dict[str, Any]) -> int:
    """The choices a chat request asks for (its ``n``; 1 when absent or not a count)."""
    n = body.get("n")
    return n if type(n) is int and n > 1 else 1


def output_reservation(body: dict[str, Any], max_tokens: int) -> int:
    """The output tokens a chat call may be billed: its output limit ``max_tokens`` for each of its ``n``
    choices — an upstream generates and bills every choice up to the limit, so reserving one would let ``n``
    multiply a call past its budget — plus, for a predicted output, the prediction's UTF-8 size: its rejected
    tokens are billed at output rates, beyond ``max_tokens``."""
    prediction = body.get("prediction")
    predicted = len(orjson.dumps(prediction.get("content"))) if type(prediction) is dict else 0
    return (max_tokens + predicted) * requested_choices(body)


def prompt_upper_bound(body: dict[str, Any], image_tokens: int = IMAGE_TOKENS_BOUND) -> int:
    """An upper bound of the prompt tokens an upstream can bill for ``body``, for strict budgets.

    A byte-level BPE token (OpenAI's, Llama's, Qwen's, DeepSeek's tokenizers) covers at least one
    byte, so the UTF-8 size of every billed part — message contents and every other message field,
    tools and their schemas, ``response_format`` schemas, embedding inputs — plus a per-message
    overhead bounds the count; an image part costs at most ``image_tokens``.
    """
    total = 3
    messages = body.get("messages")
    if isinstance(messages, list):
        for m in messages:
            total += MESSAGE_OVERHEAD_TOKENS
            if not isinstance(m, dict):
                total += len(orjson.dumps(m))
                continue
            for key, value in m.items():
                if key == "content" and isinstance(value, list):
                    total += _parts_bound(value, image_tokens)
                elif isinstance(value, str):
                    total += len(value.encode())
                elif value is not None:
                    total += len(orjson.dumps(value))
    for key in _BILLED_EXTRAS:
        value = body.get(key)
        if value is not None:
            total += len(value.encode()) if isinstance(value, str) else len(orjson.dumps(value))
    return total


def _parts_bound(parts: list[Any], image_tokens: int) -> int:
    total = 0
    for part in parts:
        if isinstance(part, dict) and part.get("type") in _MEDIA_PARTS:
            total += image_tokens
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            total += len(part["text"].encode()) + 4
        else:
            total += len(orjson.dumps(part))
    return total
