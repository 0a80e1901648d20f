"""Relaying an admitted upstream stream to the caller as SSE; the stream's :class:`Call` is finished once.

The caller-facing response (see :mod:`hearth.api.event_stream`) iterates :meth:`RelayStream.frames`
and *always* awaits :meth:`RelayStream.close`, whether the stream finished, failed, or the client
went away; ``close`` closes the upstream connection and finishes the call (leases released, budgets
settled with the stream's usage, request log written). After the first byte reached the client a
stream is never retried: an upstream failure, or the call's absolute deadline passing, ends it with
an explicit OpenAI-style error event instead of a silent, truncated 200.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import orjson

from hearth.errors import UpstreamNetworkError
from hearth.gateway.call import Call
from hearth.gateway.context import CallContext
from hearth.providers.base import UpstreamStream, Usage
from hearth.wire.sse import encode_event

DONE_FRAME = b"data: [DONE]\n\n"


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

    async def frames(self) -> AsyncIterator[bytes]:
        remaining = self._call.ctx.deadline - time.monotonic()
        try:
            async with asyncio.timeout(max(0.0, remaining)):
                async for payload in self._upstream.events():
                    if b"\n" in payload or b"\r" in payload:
                        yield encode_event(payload)
                    else:
                        yield b"data: " + payload + b"\n\n"
        except TimeoutError:
            self._status, self._error_code = 504, "deadline_exceeded"
            yield error_frame("deadline_exceeded", "The call's deadline passed while the stream was running.")
            return
        except UpstreamNetworkError as exc:
            self._status, self._error_code = (504 if exc.timeout else 502), exc.code
            self._call.deps.health.failed(self._endpoint.name, time.time())
            what = {"upstream_stream_error": "The upstream stream failed",
                    "upstream_stream_idle": "The upstream stream went idle"}.get(exc.code,
                                                                              "The upstream stream was interrupted")
            yield error_frame(exc.code, f"{what}: {exc}.")
            return
        self._status, self._error_code = 200, None
        yield DONE_FRAME

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
                usage = Usage(self._prompt_estimate, self._upstream.completion_estimate)
            await self._call.finish(self._status, self._error_code, usage, estimated)
