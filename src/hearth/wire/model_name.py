"""Setting the top-level ``model`` of an OpenAI JSON answer or stream chunk, cheaply.

Answers and stream chunks show the public model name the caller asked for, not the upstream's
(see :func:`hearth.gateway.model_name.shown_model`); this is the byte-level edit that does it.
"""

from __future__ import annotations

import re

import orjson

__all__ = ["ChunkRenamer", "public_model_body"]

_MODEL_VALUE = re.compile(rb'"model"\s*:\s*(?:"(?:[^"\\]|\\.)*"|null)')


def public_model_body(body: bytes, public: str) -> bytes:
    """``body``, a JSON object, with its top-level ``model`` set to ``public``.

    In valid JSON an unescaped ``"model"`` is always a key, so when it occurs once its value is
    spliced in place. Measured: a 1.3 kB chat answer 4 µs (an orjson parse and dump: 11 µs), four
    1536-float embeddings (119 kB) 85 µs, mostly the copy (parse and dump: 870 µs); a 250-byte
    stream chunk about 1 µs. Several occurrences (a nested key) are parsed and dumped.
    """
    start = body.find(b'"model"')
    if start < 0:
        return body
    if body.find(b'"model"', start + 7) < 0 and (found := _MODEL_VALUE.match(body, start)) is not None:
        return b"".join((body[:start], b'"model":', orjson.dumps(public), body[found.end():]))
    obj = orjson.loads(body)
    if isinstance(obj, dict) and "model" in obj:
        obj["model"] = public
        return orjson.dumps(obj)
    return body


class ChunkRenamer:
    """:func:`public_model_body` for the chunks of one stream, whose ``model`` is known in advance.

    Upstreams write every chunk's model the same way, usually compactly (``"model":"<upstream>"``,
    before ``choices``): the first occurrence of exactly that text is the top-level key (an unescaped
    ``"model"`` is always a key, and nothing nested comes before it), so it is replaced in place — one
    scan and a copy, about a fifth of the general path's cost for a 250-byte chunk. A chunk written
    any other way goes the general way."""

    __slots__ = ("_compact", "_public", "_replacement")

    def __init__(self, upstream: str, public: str) -> None:
        self._public = public
        self._compact = b'"model":' + orjson.dumps(upstream)
        self._replacement = b'"model":' + orjson.dumps(public)

    def __call__(self, payload: bytes) -> bytes:
        renamed = payload.replace(self._compact, self._replacement, 1)
        if renamed is not payload:  # CPython gives the same object back when nothing was replaced
            return renamed
        return public_model_body(payload, self._public)
