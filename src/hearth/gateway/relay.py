"""Relaying an admitted upstream stream to the caller as SSE, and cleaning up exactly once.

The caller-facing response (see :mod:`hearth.api.event_stream`) iterates :meth:`RelayStream.frames`
and *always* awaits :meth:`RelayStream.close`, whether the stream finished, failed, or the client
went away; ``close`` closes the upstream connection, releases the lease and writes the request log.
After the first byte reached the client a stream is never retried: an upstream failure ends it
with an explicit OpenAI-style error event instead of a silent, truncated 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import orjson

from hearth.errors import UpstreamNetworkError
from hearth.gateway.sse import encode_event
from hearth.providers.base import UpstreamStream, Usage

if TYPE_CHECKING:
    from hearth.gateway.admission import Admitted
    from hearth.gateway.call import Gateway
    from hearth.gateway.context import CallContext

DONE_FRAME = b"data: [DONE]\n\n"


def error_frame(code: str, message: str) -> bytes:
    body = {"error": {"message": message, "type": "api_error", "param": None, "code": code}}
    return b"data: " + orjson.dumps(body) + b"\n\n"


class RelayStream:
    def __init__(self, gateway: Gateway, ctx: CallContext, admitted: Admitted, upstream: UpstreamStream,
                 prompt_estimate: int) -> None:
        self._gw = gateway
        self._ctx = ctx
        self._adm = admitted
        self._upstream = upstream
        self._prompt_estimate = prompt_estimate
        self._status = 499
        self._error_code: str | None = "client_disconnected"
        self._closed = False
        gateway.health.succeeded(admitted.endpoint.name, ctx.ttft_ms or 0.0)
        # A stream may outlive the TTL its slots were admitted with: they (and the budget reservation)
        # are renewed every third of that TTL until the stream is closed. A timer, not a task per
        # stream: most streams end long before it fires.
        self._renewing: asyncio.Task[None] | None = None
        self._renewal = asyncio.get_running_loop().call_later(gateway.lease_ttl_s / 3, self._renew_soon)

    def _renew_soon(self) -> None:
        if self._closed:
            return
        self._renewing = asyncio.create_task(self._gw.renew(self._ctx, self._adm.lease), name="stream-lease-renewal")
        self._renewal = asyncio.get_running_loop().call_later(self._gw.lease_ttl_s / 3, self._renew_soon)

    @property
    def endpoint_name(self) -> str:
        return self._adm.endpoint.name

    @property
    def context(self) -> CallContext:
        return self._ctx

    async def frames(self) -> AsyncIterator[bytes]:
        try:
            async for payload in self._upstream.events():
                if b"\n" in payload or b"\r" in payload:
                    yield encode_event(payload)
                else:
                    yield b"data: " + payload + b"\n\n"
        except UpstreamNetworkError as exc:
            self._status, self._error_code = 502, "upstream_stream_interrupted"
            self._gw.health.failed(self._adm.endpoint.name, time.time())
            yield error_frame("upstream_stream_interrupted", f"The upstream stream was interrupted: {exc}.")
            return
        self._status, self._error_code = 200, None
        yield DONE_FRAME

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._renewal.cancel()
        if self._renewing is not None:  # let a renewal in flight land before the release below
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewing
        try:
            await self._upstream.aclose()
        finally:
            ep = self._adm.endpoint
            self._gw.health.finished(ep.name)
            usage = self._upstream.usage
            estimated = usage is None
            if usage is None:
                usage = Usage(self._prompt_estimate, self._upstream.completion_estimate)
            await self._gw.finish(self._ctx, usage, self._adm.lease)
            self._gw.record(self._ctx, self._status, self._error_code, usage, estimated)
