"""An ASGI response that relays a :class:`~hearth.gateway.relay.RelayStream` as Server-Sent Events.

Unlike a generic streaming response it watches for the client's disconnect *while* waiting on
the upstream, cancels the relay at once, and always awaits ``relay.close()`` — so the upstream
connection is closed and the lease released within moments of a client going away.

It also ends streams whose client stopped reading. The server's ``send`` returns at once while
its write buffer is below the high-water mark (uvicorn: 64 KiB, plus the kernel's socket buffers)
and blocks on flow control above it, until the client has taken enough bytes. No frame is queued
here — one frame is in flight at a time — so a stream's memory is that buffer plus one frame. A
send still blocked after ``stream_send_timeout_s`` ends the stream: the connection is dropped
(unsent bytes discarded), the relay closed (upstream closed, slots released) and the request logged
as 499 ``client_too_slow``. One timer per stream checks this, not one per frame.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hearth.api.client_watch import ClientWatch, abort_connection, bound_unsent_bytes
from hearth.gateway.relay import RelayStream

_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no")]
DEFAULT_SEND_TIMEOUT_S = 30.0
_DISCONNECTED = "client_disconnected"
_TOO_SLOW = "client_too_slow"
_FINISHED = "finished"
KERNEL_UNSENT_BYTES = 16 * 1024


class _StallTimer:
    """Calls ``on_stall`` when one send has been pending for ``timeout`` seconds.

    The pump stamps :attr:`since` around each send (two attribute writes per frame); the timer
    wakes at most twice per ``timeout`` and re-arms itself for the moment the pending send would
    expire.
    """

    __slots__ = ("_handle", "_loop", "_on_stall", "_timeout", "since")

    def __init__(self, loop: asyncio.AbstractEventLoop, timeout: float, on_stall: Callable[[], None]) -> None:
        self._loop = loop
        self._timeout = timeout
        self._on_stall = on_stall
        self.since: float | None = None  # loop time at which the pending send started
        self._handle = loop.call_later(timeout, self._check)

    def _check(self) -> None:
        since = self.since
        now = self._loop.time()
        if since is not None and now - since >= self._timeout * 0.999:
            self._on_stall()
            return
        self._handle = self._loop.call_at((now if since is None else since) + self._timeout, self._check)

    def cancel(self) -> None:
        self._handle.cancel()


def configured_send_timeout(scope: Scope) -> float:
    """``stream_send_timeout_s`` of the runtime serving this request (the module default without one)."""
    settings = getattr(getattr(getattr(scope.get("app"), "state", None), "runtime", None), "settings", None)
    value = getattr(settings, "stream_send_timeout_s", None)
    return value if isinstance(value, int | float) else DEFAULT_SEND_TIMEOUT_S


class EventStreamResponse(Response):
    media_type = "text/event-stream"

    def __init__(self, relay: RelayStream, headers: dict[str, str] | None = None, *,
                 send_timeout_s: float | None = None) -> None:
        # Deliberately not calling Response.__init__: there is no body to render up front.
        self.status_code = 200
        self.background = None
        self.relay = relay
        self.extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        self.send_timeout_s = send_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump = asyncio.current_task()
        assert pump is not None
        loop = asyncio.get_running_loop()
        ending: str | None = None  # why the pump stopped early, or _FINISHED once it is cleaning up

        def stop(reason: str) -> None:
            nonlocal ending
            if ending is None:
                ending = reason
                pump.cancel()

        watch = getattr(receive, "__self__", None)
        watcher: asyncio.Task[None] | None = None
        if isinstance(watch, ClientWatch):  # the hot path already watches this client: share it
            watch.on_disconnect(lambda: stop(_DISCONNECTED))
        else:
            async def watch_disconnect() -> None:
                while True:
                    message: Any = await receive()
                    if message["type"] == "http.disconnect":
                        stop(_DISCONNECTED)
                        return

            watcher = asyncio.create_task(watch_disconnect())
        bound_unsent_bytes(receive, KERNEL_UNSENT_BYTES)
        frames = self.relay.frames()
        timer = _StallTimer(loop, self.send_timeout_s or configured_send_timeout(scope), lambda: stop(_TOO_SLOW))
        try:
            timer.since = loop.time()
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS + self.extra})
            timer.since = None
            async for frame in frames:
                timer.since = loop.time()
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                timer.since = None
            timer.since = loop.time()
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if ending is None:
                raise
            pump.uncancel()
        except OSError:
            pass  # the transport died under us: same as a disconnect
        finally:
            stopped, ending = ending, _FINISHED  # nothing may cancel the clean-up below
            timer.cancel()
            if watcher is not None:
                watcher.cancel()
            elif isinstance(watch, ClientWatch):
                watch.on_disconnect(None)
            dropped = False
            if stopped == _TOO_SLOW:
                client_left = getattr(self.relay, "client_left", None)
                if client_left is not None:
                    client_left(_TOO_SLOW)
                dropped = abort_connection(receive)  # frees the connection and its unsent bytes now
            with contextlib.suppress(BaseException):
                await frames.aclose()  # type: ignore[attr-defined]
            await self.relay.close()
            if dropped:
                await asyncio.sleep(0)  # let the server see the connection lost before we return
