"""A ``/v1/messages`` stream: the gateway core's relay, told as Anthropic's event stream.

The core's :class:`~hearth.gateway.relay.RelayStream` owns the call (deadline, upstream errors, usage,
the request log) and yields SSE frames of its payloads, ending with ``[DONE]`` or with an error frame.
This source reads those frames back and writes what an Anthropic client expects. The relay writes whole
events, one ``data:`` line each (a payload with a line break goes through the general SSE parser), so
reading them back is a split, not a parse: about 0.2 µs an event.

* a **translated** call (the endpoint spoke OpenAI's format): each chunk through
  :class:`~hearth.wire.anthropic_reply.ChunkEvents`, ``[DONE]`` as ``message_delta`` + ``message_stop``;
* a **native** call (an Anthropic endpoint got the caller's request as it was): each payload is an
  Anthropic event already, sent on with its ``event:`` line (the name is the payload's ``type``);
* either way the relay's error frames (deadline, idle or cut upstream, shutdown) become ``error``
  events with Anthropic's error type and Hearth's stable code.

Reading the relay's frames rather than its payloads keeps the relay the one place that decides how a
stream ends; the re-parse is what that costs (measured in bench/messages_bench.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import orjson

from hearth.gateway.relay import SHUTDOWN_MESSAGE, RelayStream
from hearth.wire.anthropic_reply import ChunkEvents, error_event
from hearth.wire.sse import SSEParser

_DONE = b"[DONE]"
_TYPED = b'{"type":"'


def native_event(payload: bytes) -> bytes:
    """An Anthropic event payload with its ``event:`` line (none for a payload without a ``type``: the
    relay's synthesized OpenAI usage chunk, which a native stream does not need)."""
    if payload.startswith(_TYPED):
        end = payload.find(b'"', len(_TYPED))
        name = payload[len(_TYPED):end]
    else:
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return b""
        kind = parsed.get("type") if isinstance(parsed, dict) else None
        if not isinstance(kind, str) or not kind:
            return b""
        name = kind.encode()
    return b"event: " + name + b"\ndata: " + payload + b"\n\n"


def relay_payloads(frame: bytes, parser: SSEParser) -> list[bytes]:
    """The payloads of one relay write: ``data: <payload>`` events split apart (else given to ``parser``)."""
    if frame.count(b"\n") == 2 and frame.startswith(b"data: ") and frame.endswith(b"\n\n"):
        return [frame[6:-2]]  # the usual write: one event
    events = frame.split(b"\n\n")
    if not events[-1] and b"\r" not in frame:
        events.pop()
        if all(event.startswith(b"data: ") and b"\n" not in event for event in events):
            return [event[6:] for event in events]
    return [ev.data for ev in parser.feed(frame)]


def _relay_error(payload: bytes) -> bytes:
    """The relay's OpenAI-style error frame as Anthropic's ``error`` event."""
    error = orjson.loads(payload).get("error")
    error = error if isinstance(error, dict) else {}
    code, message = error.get("code"), error.get("message")
    return error_event(code if isinstance(code, str) else None,
                       message if isinstance(message, str) else "The stream failed.")


class MessagesEventStream:
    """A :class:`~hearth.api.event_stream.FrameSource` over one relay; ``events`` None: a native stream."""

    __slots__ = ("_events", "_parser", "_relay")

    def __init__(self, relay: RelayStream, events: ChunkEvents | None, max_event_bytes: int) -> None:
        self._relay = relay
        self._events = events
        self._parser = SSEParser(max_event_bytes)

    async def frames(self) -> AsyncIterator[bytes]:
        async for frame in self._relay.frames():
            out = b"".join(self._event(payload) for payload in relay_payloads(frame, self._parser))
            if out:
                yield out

    def _event(self, payload: bytes) -> bytes:
        if payload == _DONE:
            return self._events.finish() if self._events is not None else b""
        if payload.startswith(b'{"error"'):
            return _relay_error(payload)
        if self._events is not None:
            return self._events.feed(payload)
        return native_event(payload)

    def client_left(self, code: str) -> None:
        self._relay.client_left(code)

    def shutdown_frame(self) -> bytes:
        """As the relay's: the stream's end when the process shuts down (empty if it had finished)."""
        return error_event("service_shutting_down", SHUTDOWN_MESSAGE) if self._relay.shutdown_frame() else b""

    async def close(self) -> None:
        await self._relay.close()
