"""OpenAI's ``usage`` object for token counts Hearth estimated, because the upstream reported none.

Callers read usage from every answer (the SDKs' ``response.usage``); when an upstream omits it Hearth shows the
numbers it charged — the offline estimates of :mod:`hearth.wire.tokens` — marked with one extra key,
``hearth_estimated``, that the SDKs ignore. Streams get it as a final usage chunk
(:class:`hearth.gateway.relay.RelayStream`), non-stream answers in their body (:func:`with_estimated_usage`).
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["estimated_usage", "with_estimated_usage"]


def estimated_usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens, "hearth_estimated": True}


def with_estimated_usage(body: bytes, prompt_tokens: int, completion_tokens: int) -> bytes:
    """``body``, a chat answer without usage, with the estimated ``usage`` added (unchanged if it is not a
    JSON object with ``choices``, or already has a usage object)."""
    try:
        answer = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body
    if not isinstance(answer, dict) or "choices" not in answer or isinstance(answer.get("usage"), dict):
        return body
    answer["usage"] = estimated_usage(prompt_tokens, completion_tokens)
    return orjson.dumps(answer)
