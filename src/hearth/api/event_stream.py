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

It can also be handed the stream *being opened* (:meth:`EventStreamResponse.opening`), so a slow
first event does not leave the client with silence: a stream still waiting for its first upstream
event after ``keepalive_s`` starts — status 200 and the SSE headers — and gets a ``: keep-alive``
comment every ``keepalive_s`` until the event comes (proxies and clients with read timeouts keep the
connection). Failover goes on behind the comments. A failure within the first ``keepalive_s`` is
answered as before, a JSON error with its status and ``x-should-retry`` (the hot path's rendering);
once the stream has started it can only be an SSE error event. A stream opened within ``keepalive_s``
costs one timer, no task; only a slow one gets the task that sends the comments.

Every open stream is registered with the process's shutdown (:class:`hearth.shutdown.OpenStreams`): an
*answer* (a source with ``shutdown_frame``, or a stream being opened) is ended when the stream grace is
over, with the source's own error event (or, not started yet, a 503 ``service_shutting_down``); any other
stream *follows* events stored elsewhere and is ended as soon as shutdown begins, with an ``error`` event
``service_shutting_down`` (no ``id:``, so the client resumes from its last event elsewhere).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hearth.api.client_watch import ClientWatch, abort_connection, bound_unsent_bytes
from hearth.api.error_handlers import relayed_error, render_error
from hearth.errors import HearthError, UpstreamHTTPError
from hearth.observability.logging import get_logger
from hearth.shutdown import OpenStreams

log = get_logger("hearth.api")

_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no")]
DEFAULT_SEND_TIMEOUT_S = 30.0
_DISCONNECTED = "client_disconnected"
_TOO_SLOW = "client_too_slow"
_FINISHED = "finished"
_SHUTTING_DOWN = "service_shutting_down"
FOLLOWER_SHUTDOWN_FRAME = (b'event: error\ndata: {"code":"service_shutting_down","message":"This Hearth process is '
                           b'shutting down; reconnect with Last-Event-ID to continue."}\n\n')
KERNEL_UNSENT_BYTES = 16 * 1024
KEEPALIVE_FRAME = b": keep-alive\n\n"


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


def serving_runtime(scope: Scope) -> Any:
    """The runtime serving this request (None without one). Looked up once per stream: Starlette's ``State``
    answers an attribute through a failed lookup and ``__getattr__`` (about a microsecond)."""
    return getattr(getattr(scope.get("app"), "state", None), "runtime", None)


def open_streams(runtime: Any) -> OpenStreams | None:
    """The register of open streams of ``runtime`` (None without one)."""
    streams = getattr(getattr(runtime, "shutdown", None), "streams", None)
    return streams if isinstance(streams, OpenStreams) else None


def configured_send_timeout(runtime: Any) -> float:
    """``stream_send_timeout_s`` of ``runtime`` (the module default without one)."""
    value = getattr(getattr(runtime, "settings", None), "stream_send_timeout_s", None)
    return value if isinstance(value, int | float) else DEFAULT_SEND_TIMEOUT_S


class _Started:
    """Whether ``http.response.start`` went out (set just before it is sent: the server writes it at once)."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = False


class FrameSource(Protocol):
    """What the response relays: SSE frames, then ``close`` (always awaited, whatever happened)."""

    def frames(self) -> AsyncIterator[bytes]: ...

    async def close(self) -> None: ...


class EventStreamResponse(Response):
    media_type = "text/event-stream"

    def __init__(self, relay: FrameSource | None, headers: dict[str, str] | None = None, *,
                 send_timeout_s: float | None = None) -> None:
        # Deliberately not calling Response.__init__: there is no body to render up front.
        self.status_code = 200
        self.background = None
        self.relay = relay
        self.extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        self.send_timeout_s = send_timeout_s
        self._opening: Awaitable[FrameSource] | None = None
        self._headers_of: Callable[[], dict[str, str]] | None = None
        self._keepalive_s = 0.0

    @classmethod
    def opening(cls, opening: Awaitable[FrameSource], headers_of: Callable[[], dict[str, str]], *,
                keepalive_s: float, send_timeout_s: float | None = None) -> EventStreamResponse:
        """The response of a stream still being opened (admission, attempts, the first event).

        ``headers_of()`` gives the call's headers once it is open; a stream that had to start early
        (keep-alives) has none of them, since no endpoint had answered yet. ``keepalive_s`` 0: no
        keep-alives, the response waits for the stream (or its error) as a plain handler would."""
        response = cls(None, send_timeout_s=send_timeout_s)
        response._opening = opening
        response._headers_of = headers_of
        response._keepalive_s = keepalive_s
        return response

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
        rt = serving_runtime(scope)
        send_timeout_s = self.send_timeout_s or configured_send_timeout(rt)
        timer = _StallTimer(loop, send_timeout_s, lambda: stop(_TOO_SLOW))
        started = _Started()
        frames = None
        streams = open_streams(rt)

        def shut_down() -> None:
            stop(_SHUTTING_DOWN)

        if streams is not None:
            streams.add(shut_down, answer=self.relay is None or hasattr(self.relay, "shutdown_frame"))
        try:
            if self.relay is None and await self._open(scope, receive, send, timer, started=started) is None:
                return  # the failure has been answered
            assert self.relay is not None
            frames = self.relay.frames()
            if not started.value:
                started.value = True
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
            if streams is not None:
                streams.discard(shut_down)
            timer.cancel()
            if watcher is not None:
                watcher.cancel()
            elif isinstance(watch, ClientWatch):
                watch.on_disconnect(None)
            dropped = False
            relay = self.relay
            if stopped == _TOO_SLOW:
                client_left = getattr(relay, "client_left", None)
                if client_left is not None:
                    client_left(_TOO_SLOW)
                dropped = abort_connection(receive)  # frees the connection and its unsent bytes now
            elif stopped == _SHUTTING_DOWN:
                await self._end_for_shutdown(scope, receive, send, started, send_timeout_s=send_timeout_s)
            if frames is not None:
                with contextlib.suppress(BaseException):
                    await frames.aclose()  # type: ignore[attr-defined]
            if relay is not None:
                await relay.close()
            if dropped:
                await asyncio.sleep(0)  # let the server see the connection lost before we return

    async def _end_for_shutdown(self, scope: Scope, receive: Receive, send: Send, started: _Started, *,
                                send_timeout_s: float) -> None:
        """The explicit end of a stream cut by the shutdown (never a silent truncation); a client that does not
        take it within the send timeout is left (the server closes the connection next)."""
        relay = self.relay
        end = getattr(relay, "shutdown_frame", None)
        frame = end() if end is not None else FOLLOWER_SHUTDOWN_FRAME if relay is not None else None
        try:
            async with asyncio.timeout(send_timeout_s):
                if frame is None and not started.value:  # still being opened: a plain 503 answer
                    await _error_response(scope, receive, HearthError("service_shutting_down"))(scope, receive, send)
                    return
                if frame is None:
                    frame = _error_event(HearthError("service_shutting_down"))
                if not started.value:
                    started.value = True
                    await send({"type": "http.response.start", "status": 200, "headers": _HEADERS + self.extra})
                await send({"type": "http.response.body", "body": frame, "more_body": True})
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except (TimeoutError, OSError, RuntimeError) as exc:
            log.info("shutdown_end_not_sent", error=type(exc).__name__)

    async def _open(self, scope: Scope, receive: Receive, send: Send, timer: _StallTimer,
                    *, started: _Started) -> FrameSource | None:
        """Await the stream being opened, with keep-alives past ``keepalive_s``; None if it failed
        (the failure answered: a JSON error if nothing was sent yet, else an SSE error event)."""
        assert self._opening is not None and self._headers_of is not None
        loop = asyncio.get_running_loop()
        interval = self._keepalive_s
        beat: asyncio.Task[None] | None = None

        async def keep_alive() -> None:
            started.value = True
            timer.since = loop.time()
            await send({"type": "http.response.start", "status": 200, "headers": list(_HEADERS)})
            while True:
                timer.since = loop.time()
                await send({"type": "http.response.body", "body": KEEPALIVE_FRAME, "more_body": True})
                timer.since = None
                await asyncio.sleep(interval)

        def begin() -> None:
            nonlocal beat
            beat = loop.create_task(keep_alive(), name="sse-keep-alive")

        due = loop.call_later(interval, begin) if interval > 0 else None
        failure: BaseException | None = None
        try:
            self.relay = await self._opening  # at once: whatever happens next, __call__ closes it
        except Exception as exc:
            failure = exc
        finally:  # also on cancellation (the client left): no comment may follow
            if due is not None:
                due.cancel()
            if beat is not None:
                beat.cancel()
                await asyncio.wait((beat,))  # a cancellation of ours still propagates from here
                if not beat.cancelled():
                    beat.exception()  # (a send that failed: the client left; the watch ends the stream)
                timer.since = None
        relay = self.relay
        if relay is not None:
            if not started.value:
                self.extra = [(k.lower().encode(), v.encode()) for k, v in self._headers_of().items()]
            return relay
        assert failure is not None
        if started.value:
            timer.since = loop.time()
            await send({"type": "http.response.body", "body": _error_event(failure), "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await _error_response(scope, receive, failure)(scope, receive, send)
        return None


def _known_error(exc: BaseException) -> HearthError | UpstreamHTTPError:
    if isinstance(exc, HearthError | UpstreamHTTPError):
        return exc
    log.error("unhandled_error", error=type(exc).__name__, exc_info=exc)
    return HearthError("internal_error")


def _error_response(scope: Scope, receive: Receive, exc: BaseException) -> Response:
    """What the hot path answers a handler's error with (status, ``x-should-retry``, …)."""
    known = _known_error(exc)
    if isinstance(known, UpstreamHTTPError):
        return relayed_error(known)
    return render_error(Request(scope, receive), known)


def _error_event(exc: BaseException) -> bytes:
    """The same error as an OpenAI-style SSE error event (the stream has started: no status left)."""
    known = _known_error(exc)
    body = known.body if isinstance(known, UpstreamHTTPError) else known.openai_body()
    return b"data: " + orjson.dumps(body) + b"\n\n"


def last_event_id(request: Request, *, default: int = 0, max_digits: int = 9) -> int:
    """The ``Last-Event-ID`` a reconnecting SSE client sends (``default`` without one); 400 if it is not an
    event id of this stream (digits, at most ``max_digits``)."""
    raw = request.headers.get("last-event-id")
    if raw is None or raw == "":
        return default
    if not raw.isdigit() or len(raw) > max_digits:
        raise HearthError("invalid_request", "`Last-Event-ID` must be the id of an event this stream sent.",
                          param="Last-Event-ID")
    return int(raw)
