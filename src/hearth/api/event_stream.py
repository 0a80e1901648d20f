"""An ASGI response that relays a :class:`~hearth.gateway.relay.RelayStream` as Server-Sent Events.

Unlike a generic streaming response it watches for the client's disconnect *while* waiting on
the upstream, cancels the relay at once, and always awaits ``relay.close()`` — so the upstream
connection is closed and the lease released within moments of a client going away.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from hearth.gateway.relay import RelayStream

_HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache"),
            (b"x-accel-buffering", b"no")]


class EventStreamResponse(Response):
    media_type = "text/event-stream"

    def __init__(self, relay: RelayStream, headers: dict[str, str] | None = None) -> None:
        # Deliberately not calling Response.__init__: there is no body to render up front.
        self.status_code = 200
        self.background = None
        self.relay = relay
        self.extra = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pump = asyncio.current_task()
        assert pump is not None
        client_gone = False

        async def watch_disconnect() -> None:
            nonlocal client_gone
            while True:
                message: Any = await receive()
                if message["type"] == "http.disconnect":
                    client_gone = True
                    pump.cancel()
                    return

        frames = self.relay.frames()
        watcher = asyncio.create_task(watch_disconnect())
        try:
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS + self.extra})
            async for frame in frames:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if not client_gone:
                raise
            pump.uncancel()
        except OSError:
            pass  # the transport died under us: same as a disconnect
        finally:
            watcher.cancel()
            with contextlib.suppress(BaseException):
                await frames.aclose()  # type: ignore[attr-defined]
            await self.relay.close()
