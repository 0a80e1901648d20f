"""Relaying an admitted upstream stream to the caller as SSE; the stream's :class:`Call` is finished once.

The caller-facing response (see :mod:`hearth.api.event_stream`) iterates :meth:`RelayStream.frames`
and *always* awaits :meth:`RelayStream.close`, whether the stream finished, failed, or the client
went away; ``close`` closes the upstream connection and finishes the call (leases released, budgets
settled with the stream's usage, request log written). After the first byte reached the client a
stream is never retried: an upstream failure, or the call's absolute deadline passing, ends it with
an explicit OpenAI-style error event instead of a silent, truncated 200.

Chunks show the public model name (:func:`~hearth.gateway.model_name.shown_model`), replaced in
each payload (:class:`~hearth.wire.model_name.ChunkRenamer`, about a microsecond a chunk). A caller
that asked for usage (``stream_options.include_usage``) whose upstream sent none gets a final usage
chunk anyway, built
from Hearth's own estimates (the prompt estimate and the counted completion text) and marked
``"hearth_estimated": true`` inside ``usage`` — an extra key the SDKs ignore; the request log then
says ``usage_estimated`` with the same numbers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import orjson

from hearth.errors import UpstreamNetworkError
from hearth.gateway.call import Call
from hearth.gateway.context import CallContext
from hearth.gateway.model_name import shown_model
from hearth.providers.base import UpstreamStream, Usage
from hearth.wire.model_name import ChunkRenamer
from hearth.wire.sse import encode_event
from hearth.wire.usage import estimated_usage

DONE_FRAME = b"data: [DONE]\n\n"
SHUTDOWN_MESSAGE = ("This Hearth process is shutting down and ended the stream before the answer was complete; "
                    "retry the call (another replica answers).")


def error_frame(code: str, message: str) -> bytes:
    body = {"error": {"message": message, "type": "api_error", "param": None, "code": code}}
    return b"data: " + orjson.dumps(body) + b"\n\n"


class RelayStream:
    def __init__(self, call: Call, upstream: UpstreamStream, prompt_estimate: int) -> None:
        assert call.current is not None
        self._call = call
        self._endpoint = call.current.endpoint
        self._upstream = upstream
        self._prompt_estimate = prompt_estimate
        self._status = 499
        self._error_code: str | None = "client_disconnected"
        self._closed = False
        self._model = shown_model(call.deps.registry, call.ctx.model, self._endpoint)
        self._rename = ChunkRenamer(self._endpoint.upstream_model, self._model) if self._model is not None else None
        self._first: bytes | None = None  # the first chunk relayed: a synthesized usage chunk copies its id
        call.deps.health.succeeded(self._endpoint.name, call.ctx.ttft_ms or 0.0)

    @property
    def endpoint_name(self) -> str:
        return self._endpoint.name

    @property
    def context(self) -> CallContext:
        return self._call.ctx

    def client_left(self, code: str) -> None:
        """The response gave up on the client (e.g. ``client_too_slow``): that is what the log says."""
        self._status, self._error_code = 499, code

    def shutdown_frame(self) -> bytes:
        """The process is shutting down and its stream grace is over: the error event that ends the stream
        (empty if the stream had already finished), and what the log says (503 ``service_shutting_down``)."""
        if self._status == 200 and self._error_code is None:
            return b""
        self._status, self._error_code = 503, "service_shutting_down"
        return error_frame("service_shutting_down", SHUTDOWN_MESSAGE)

    async def frames(self) -> AsyncIterator[bytes]:
        remaining = self._call.ctx.deadline - time.monotonic()
        try:
            async with asyncio.timeout(max(0.0, remaining)):
                rename = self._rename
                async for batch in self._upstream.batches():
                    parts: list[bytes] = []
                    for payload in batch:
                        if rename is not None:
                            payload = rename(payload)
                        if self._first is None:
                            self._first = payload
                        if b"\n" in payload or b"\r" in payload:
                            parts.append(encode_event(payload))
                        else:
                            parts += (b"data: ", payload, b"\n\n")
                    yield b"".join(parts)
                if self._call.ctx.include_usage and self._upstream.usage is None:
                    yield b"data: " + self._estimated_usage_chunk() + b"\n\n"
        except TimeoutError:
            self._status, self._error_code = 504, "deadline_exceeded"
            yield error_frame("deadline_exceeded", "The call's deadline passed while the stream was running.")
            return
        except UpstreamNetworkError as exc:
            self._status, self._error_code = (504 if exc.timeout else 502), exc.code
            self._call.deps.health.failed(self._endpoint.name, self._call.deps.health.clock.now())
            what = {"upstream_stream_error": "The upstream stream failed",
                    "upstream_stream_idle": "The upstream stream went idle"}.get(exc.code,
                                                                              "The upstream stream was interrupted")
            yield error_frame(exc.code, f"{what}: {exc}.")
            return
        self._status, self._error_code = 200, None
        yield DONE_FRAME

    def _estimated_usage(self) -> Usage:
        return Usage(self._prompt_estimate, self._upstream.completion_estimate)

    def _estimated_usage_chunk(self) -> bytes:
        """OpenAI's final usage chunk (``choices: []``), from Hearth's estimates: the same id,
        ``created`` and model as the stream's chunks."""
        head: dict[str, object] = {}
        if self._first is not None:
            try:
                first = orjson.loads(self._first)
            except orjson.JSONDecodeError:
                first = None
            if isinstance(first, dict):
                head = {k: first[k] for k in ("id", "created", "model", "system_fingerprint") if k in first}
        if "model" not in head:
            head["model"] = self._model or self._endpoint.upstream_model
        usage = self._estimated_usage()
        return orjson.dumps({
            "id": head.get("id", f"chatcmpl-{self._call.ctx.request_id}"), "object": "chat.completion.chunk",
            "created": head.get("created", int(time.time())), "model": head["model"],
            **({"system_fingerprint": head["system_fingerprint"]} if "system_fingerprint" in head else {}),
            "choices": [], "usage": estimated_usage(usage.prompt_tokens, usage.completion_tokens)})

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await self._upstream.aclose()
        finally:
            usage = self._upstream.usage
            estimated = usage is None
            if usage is None:
                usage = self._estimated_usage()
            await self._call.finish(self._status, self._error_code, usage, estimated)
