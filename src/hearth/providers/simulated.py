"""The built-in ``simulated`` provider: answers locally, with no network, for demos and smoke tests.

Its replies say plainly that they are simulated, so nobody mistakes the demo for a real model.
Output is deterministic: the same request always gets the same answer.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import struct
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import orjson

from hearth.providers.base import HeaderExchange, UpstreamReply, Usage
from hearth.providers.png_label import label_png
from hearth.providers.simulated_json import json_answer
from hearth.registry.snapshot import Endpoint
from hearth.wire.image_size import parse_size
from hearth.wire.tokens import estimate_messages, estimate_text, requested_choices, requested_max_tokens

FINGERPRINT = "hearth-simulated"


def _last_user_text(body: dict[str, Any]) -> str:
    for m in reversed(body.get("messages") or []):
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return " ".join(str(p.get("text", "")) for p in c if isinstance(p, dict))
    return ""


def reply_text(body: dict[str, Any]) -> str:
    """The answer: a labelled echo of the last user turn, cut to the request's output limit; a JSON document
    when ``response_format`` asks for one (:mod:`hearth.providers.simulated_json`, never cut)."""
    said = " ".join(_last_user_text(body).split())
    if len(said) > 160:
        said = said[:157] + "..."
    as_json = json_answer(body, said)
    if as_json is not None:
        return as_json
    text = f"[simulated] Hearth's built-in simulated model received: \u201c{said}\u201d. No real model was called."
    limit = requested_max_tokens(body)
    if limit is not None:
        words = text.split(" ")
        while len(words) > 1 and estimate_text(" ".join(words)) > limit:
            words.pop()
        text = " ".join(words)
    return text


class SimulatedStream:
    def __init__(self, body: dict[str, Any], model: str, text: str, include_usage: bool) -> None:
        self._body = body
        self._model = model
        self._text = text
        self._include_usage = include_usage
        self._choices = requested_choices(body)
        self.usage: Usage | None = None
        self.completion_estimate = estimate_text(text) * self._choices

    async def prime(self) -> None:
        return None  # the first event is computed, not awaited

    async def batches(self) -> AsyncIterator[list[bytes]]:
        async for payload in self._events():  # one word at a time, as a model would stream
            yield [payload]

    async def _events(self) -> AsyncIterator[bytes]:
        cid = f"chatcmpl-sim{uuid.uuid4().hex[:20]}"
        created = int(time.time())
        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": self._model,
                "system_fingerprint": FINGERPRINT}
        indexes = range(self._choices)
        for index in indexes:
            yield orjson.dumps({**base, "choices": [{"index": index, "delta": {"role": "assistant", "content": ""},
                                                     "logprobs": None, "finish_reason": None}]})
        words = self._text.split(" ")
        for i, word in enumerate(words):
            piece = word if i == 0 else " " + word
            for index in indexes:
                yield orjson.dumps({**base, "choices": [{"index": index, "delta": {"content": piece},
                                                         "logprobs": None, "finish_reason": None}]})
            await asyncio.sleep(0)
        for index in indexes:
            yield orjson.dumps({**base, "choices": [{"index": index, "delta": {}, "logprobs": None,
                                                     "finish_reason": "stop"}]})
        usage = Usage(estimate_messages(self._body.get("messages")), self.completion_estimate)
        self.usage = usage
        if self._include_usage:
            yield orjson.dumps({**base, "choices": [], "usage": _usage_dict(usage)})

    async def aclose(self) -> None:
        return None


def _usage_dict(u: Usage) -> dict[str, int]:
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens}


def _no_upstream_headers(headers: HeaderExchange | None) -> None:
    if headers is not None:  # an earlier attempt's upstream headers are not this answer's
        headers.relayed = {}


class SimulatedProvider:
    async def chat(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                   headers: HeaderExchange | None = None) -> UpstreamReply:
        _no_upstream_headers(headers)
        text = reply_text(body)
        n = requested_choices(body)  # each the same text, billed each
        usage = Usage(estimate_messages(body.get("messages")), estimate_text(text) * n)
        reply = {
            "id": f"chatcmpl-sim{uuid.uuid4().hex[:20]}", "object": "chat.completion", "created": int(time.time()),
            "model": ep.upstream_model, "system_fingerprint": FINGERPRINT,
            "choices": [{"index": i, "message": {"role": "assistant", "content": text, "refusal": None},
                         "logprobs": None, "finish_reason": "stop"} for i in range(n)],
            "usage": _usage_dict(usage),
        }
        return UpstreamReply(orjson.dumps(reply), usage)

    async def chat_stream(self, ep: Endpoint, body: dict[str, Any], first_byte_timeout_s: float,
                          idle_timeout_s: float, *, headers: HeaderExchange | None = None) -> SimulatedStream:
        _no_upstream_headers(headers)
        opts = body.get("stream_options")
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        stream = SimulatedStream(body, ep.upstream_model, reply_text(body), include_usage)
        await stream.prime()
        return stream

    async def embeddings(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                         headers: HeaderExchange | None = None) -> UpstreamReply:
        _no_upstream_headers(headers)
        inputs = body.get("input")
        items = [inputs] if isinstance(inputs, str) else list(inputs or [])
        dims = int(body.get("dimensions") or 64)
        data = []
        tokens = 0
        for i, item in enumerate(items):
            text = item if isinstance(item, str) else orjson.dumps(item).decode()
            tokens += estimate_text(text)
            data.append({"object": "embedding", "index": i, "embedding": _vector(text, dims)})
        usage = Usage(tokens, 0)
        reply = {"object": "list", "data": data, "model": ep.upstream_model,
                 "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        return UpstreamReply(orjson.dumps(reply), usage)

    async def images(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                     headers: HeaderExchange | None = None) -> UpstreamReply:
        _no_upstream_headers(headers)
        return await simulated_images(ep, body)


def _vector(text: str, dims: int) -> list[float]:
    out: list[float] = []
    counter = 0
    while len(out) < dims:
        digest = hashlib.sha256(f"{counter}:{text}".encode()).digest()
        out.extend((v / 2**31) - 1.0 for v in struct.unpack("<8I", digest))
        counter += 1
    vec = out[:dims]
    norm = sum(v * v for v in vec) ** 0.5 or 1.0
    return [v / norm for v in vec]


DEFAULT_IMAGE_SIZE = "1024x1024"  # OpenAI's default


def _draw_size(ep: Endpoint, size: Any) -> tuple[int, int]:
    """The requested size, or (none, ``auto``) 1024x1024 if the endpoint draws it, else its smallest size."""
    if isinstance(size, str) and (parsed := parse_size(size)) is not None:
        return parsed
    sizes = [s for s in (ep.image_sizes or ()) if parse_size(s) is not None]
    if not sizes or DEFAULT_IMAGE_SIZE in sizes:
        sizes = [DEFAULT_IMAGE_SIZE]
    width, height = min((parse_size(s) or (0, 0) for s in sizes), key=lambda wh: wh[0] * wh[1])
    return width, height


def image_label(prompt: str, index: int, n: int, *, words: int = 6, line_chars: int = 16) -> list[str]:
    """What a simulated image shows: ``[SIMULATED i/n]`` and the prompt's first ``words`` words, wrapped."""
    lines: list[str] = []
    for word in prompt.split()[:words]:
        word = word[:line_chars]
        if lines and len(lines[-1]) + 1 + len(word) <= line_chars:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return [f"[SIMULATED {index}/{n}]", *lines[:3]]


def _draw_images(prompt: str, n: int, width: int, height: int) -> list[str]:
    return [base64.b64encode(label_png(image_label(prompt, i + 1, n), width=width, height=height)).decode()
            for i in range(n)]


async def simulated_images(ep: Endpoint, body: dict[str, Any]) -> UpstreamReply:
    """Labelled PNGs (:mod:`hearth.providers.png_label`), drawn off the event loop; always ``b64_json``."""
    prompt = str(body.get("prompt") or "")
    n = body["n"] if isinstance(body.get("n"), int) else 1
    width, height = _draw_size(ep, body.get("size"))
    images = await asyncio.to_thread(_draw_images, prompt, n, width, height)
    tokens = estimate_text(prompt)
    reply = {"created": int(time.time()), "data": [{"b64_json": b64, "revised_prompt": None} for b64 in images],
             "usage": {"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens,
                       "input_tokens_details": {"text_tokens": tokens, "image_tokens": 0}}}
    return UpstreamReply(orjson.dumps(reply), Usage(tokens, 0, images=len(images)))
