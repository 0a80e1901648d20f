"""The caller's own deadline and attempt budget, from request headers — they narrow, never widen.

* ``X-Hearth-Timeout-Ms``: the caller gives up after this many milliseconds (positive integer);
* ``X-Stainless-Read-Timeout``: what the official OpenAI SDKs send for their own timeout (seconds);
* ``X-Hearth-Max-Attempts``: at most this many endpoint attempts (1–10).

The gateway takes the smaller of these and its own ``request_timeout_s`` / ``max_attempts``: a
caller can never make Hearth wait or retry longer than the operator allows, but a caller with a
short timeout does not leave Hearth working (and failing over) for an answer nobody will read.
"""

from __future__ import annotations

from collections.abc import Mapping

from hearth.errors import HearthError

_MAX_TIMEOUT_MS = 86_400_000


def caller_timeout_s(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("x-hearth-timeout-ms")
    if raw is not None:
        if not raw.isdigit() or not 0 < int(raw) <= _MAX_TIMEOUT_MS:
            raise HearthError("invalid_request", "`X-Hearth-Timeout-Ms` must be a positive integer of milliseconds.",
                              param="X-Hearth-Timeout-Ms")
        return int(raw) / 1000
    sdk = headers.get("x-stainless-read-timeout")
    if sdk is not None:  # the SDK's own value: never refuse a request over it, just ignore nonsense
        try:
            seconds = float(sdk)
        except ValueError:
            return None
        return seconds if 0 < seconds <= _MAX_TIMEOUT_MS / 1000 else None
    return None


def caller_max_attempts(headers: Mapping[str, str]) -> int | None:
    raw = headers.get("x-hearth-max-attempts")
    if raw is None:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= 10:
        raise HearthError("invalid_request", "`X-Hearth-Max-Attempts` must be an integer from 1 to 10.",
                          param="X-Hearth-Max-Attempts")
    return int(raw)
