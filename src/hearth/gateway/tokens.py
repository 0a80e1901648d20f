"""Offline token estimates, used when an upstream does not report usage and for reservations.

Deliberately cheap (no tokenizer download, no per-character loop): ASCII text counts about four
characters per token, other scripts (CJK and the like) about one token per character.
"""

from __future__ import annotations

from typing import Any

DEFAULT_COMPLETION_RESERVATION = 1024


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


def requested_max_tokens(body: dict[str, Any]) -> int | None:
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if isinstance(value, int) and value > 0 else None
