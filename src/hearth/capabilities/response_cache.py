"""The capability API's response cache (seed 002 §3.4), opt-in per scene (``cache_ttl_s``).

Identical requests — same caller and tenant, capability, model, scene, prompt version, rendered (and
redacted) messages, generation parameters and schema — within the TTL answer from the state backend:
``cache_hit: true``, no model call, no charge. The key is a SHA-256 of those fields, so nothing readable
of a prompt is stored as a key; values live in the state backend (Redis: shared by every process).
Streams are never cached. A state backend that does not answer makes the call uncached, never failed.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from hearth.observability.logging import get_logger
from hearth.state.base import StateBackend, StateUnavailable

log = get_logger("hearth.capabilities")


def cache_key(fields: dict[str, Any]) -> str:
    return hashlib.sha256(orjson.dumps(fields, option=orjson.OPT_SORT_KEYS, default=str)).hexdigest()


async def lookup(state: StateBackend, key: str) -> dict[str, Any] | None:
    try:
        raw = await state.cache_get(key)
    except StateUnavailable:
        log.warning("response_cache_unavailable", op="get")
        return None
    if raw is None:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


async def store(state: StateBackend, key: str, result: dict[str, Any], ttl_s: float) -> None:
    try:
        await state.cache_set(key, orjson.dumps(result), ttl_s)
    except StateUnavailable:
        log.warning("response_cache_unavailable", op="set")
