"""Incremental Server-Sent-Events parsing and encoding on raw bytes.

The gateway relays upstream event streams, so parsing sits on the hot path. The
parser follows the WHATWG "event stream interpretation" rules but never decodes
``data``: payloads stay bytes, so a multi-byte UTF-8 character split across TCP
reads is never touched mid-character. Work is done per line (or per whole event)
with ``bytes.split``/``find``; there is no per-byte Python loop.

Deviations in representation (not in behaviour) from the spec's event object:

* ``SSEEvent.event`` is ``None`` where the spec would report the default type
  ``"message"`` (no ``event:`` field, or an empty one).
* ``SSEEvent.id`` is the stream's *last event ID*, which per spec persists across
  events until another ``id:`` field changes it; the empty ID is ``None``.
* ``SSEEvent.retry`` is the value of a valid ``retry:`` field seen in the same
  block as the event (``None`` otherwise); the spec treats it as a stream setting.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEEventTooLarge", "SSEParser", "encode_event"]

_BOM = b"\xef\xbb\xbf"


@dataclass(slots=True, frozen=True)
class SSEEvent:
    """One dispatched event; ``data`` is the joined ``data:`` lines, undecoded."""

    data: bytes
    event: str | None = None
    id: str | None = None
    retry: int | None = None


class SSEEventTooLarge(Exception):
    """One event's lines outgrew the parser's ``max_event_bytes`` limit."""


class SSEParser:
    """Feed-driven parser: bytes in, complete events out.

    ``max_event_bytes`` bounds memory against a peer that never ends an event: it
    caps the total length of the lines forming one event (field names, values and
    comments, excluding line terminators), counting an unterminated trailing line
    as soon as it is buffered. Exceeding it raises :class:`SSEEventTooLarge`;
    the parser then refuses further input until :meth:`flush` resets it, because
    the rest of the stream cannot be framed reliably.
    """

    __slots__ = (
        "_data",
        "_event",
        "_event_bytes",
        "_failed",
        "_last_id",
        "_max",
        "_retry",
        "_skip_lf",
        "_started",
        "_tail",
        "_tail_len",
    )

    def __init__(self, max_event_bytes: int = 1 << 20) -> None:
        if max_event_bytes <= 0:
            raise ValueError("max_event_bytes must be positive")
        self._max = max_event_bytes
        self._last_id: str | None = None
        self._reset_stream()

    def _reset_stream(self) -> None:
        self._tail: list[bytes] = []
        self._tail_len = 0
        self._skip_lf = False
        self._started = False
        self._failed = False
        self._data: list[bytes] = []
        self._event: str | None = None
        self._retry: int | None = None
        self._event_bytes = 0

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Consume the next piece of the stream and return the events it completed.

        Chunks may be split anywhere (inside a line, a ``\\r\\n`` pair or a UTF-8
        character) and may hold any number of events.
        """
        if self._failed:
            raise SSEEventTooLarge("parser failed earlier; call flush() before reuse")
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[0] == 10:
                chunk = chunk[1:]
        if not chunk:
            return []
        if not self._started:
            chunk = self._strip_bom(chunk)
            if not chunk:
                return []
        if b"\n" not in chunk and b"\r" not in chunk:
            self._tail.append(chunk)
            self._tail_len += len(chunk)
            self._check(self._event_bytes + self._tail_len)
            return []
        if self._tail:
            self._tail.append(chunk)
            buf = b"".join(self._tail)
            self._tail = []
            self._tail_len = 0
        else:
            buf = chunk
        if b"\r" in buf:
            if buf[-1] == 13:
                self._skip_lf = True
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        return self._parse(buf)

    def flush(self) -> list[SSEEvent]:
        """Signal end of stream and reset the parser for a new stream.

        Per the WHATWG rules an event not terminated by a blank line before EOF
        is incomplete and is discarded, as is an unterminated last line, so this
        always returns an empty list; it exists so callers can treat the end of
        stream uniformly and so the parser can be reused.
        """
        self._reset_stream()
        self._last_id = None
        return []

    def _strip_bom(self, chunk: bytes) -> bytes:
        if self._tail:
            chunk = b"".join(self._tail) + chunk
            self._tail = []
            self._tail_len = 0
        if len(chunk) < len(_BOM) and _BOM.startswith(chunk):
            self._tail.append(chunk)
            self._tail_len = len(chunk)
            return b""
        self._started = True
        return chunk[3:] if chunk.startswith(_BOM) else chunk

    def _check(self, size: int) -> None:
        if size > self._max:
            self._failed = True
            raise SSEEventTooLarge(f"event exceeds {self._max} bytes")

    def _parse(self, buf: bytes) -> list[SSEEvent]:
        out: list[SSEEvent] = []
        blocks = buf.split(b"\n\n")
        last = blocks.pop()
        for block in blocks:
            if self._event_bytes == 0 and block.startswith(b"data:") and b"\n" not in block:
                self._check(len(block))
                value = block[6:] if block[5:6] == b" " else block[5:]
                out.append(SSEEvent(value, None, self._last_id))
                continue
            for line in block.split(b"\n"):
                self._line(line, out)
            self._dispatch(out)
        if last:
            lines = last.split(b"\n")
            rest = lines.pop()
            for line in lines:
                self._line(line, out)
            if rest:
                self._tail.append(rest)
                self._tail_len = len(rest)
                self._check(self._event_bytes + self._tail_len)
        return out

    def _line(self, line: bytes, out: list[SSEEvent]) -> None:
        if not line:
            self._dispatch(out)
            return
        self._event_bytes += len(line)
        self._check(self._event_bytes)
        if line.startswith(b"data:"):
            self._data.append(line[6:] if line[5:6] == b" " else line[5:])
            return
        if line[0] == 58:
            return
        colon = line.find(b":")
        if colon < 0:
            name, value = line, b""
        else:
            name = line[:colon]
            value = line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace") or None
        elif name == b"id":
            if b"\x00" not in value:
                self._last_id = value.decode("utf-8", "replace") or None
        elif name == b"retry":
            if value.isdigit():
                self._retry = int(value)

    def _dispatch(self, out: list[SSEEvent]) -> None:
        if self._data:
            data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
            out.append(SSEEvent(data, self._event, self._last_id, self._retry))
            self._data = []
        self._event = None
        self._retry = None
        self._event_bytes = 0


def encode_event(data: bytes, event: str | None = None) -> bytes:
    """Frame one event canonically: optional ``event:`` line, one ``data:`` line
    per ``\\n``-separated line of ``data``, then a blank line, all ending in ``\\n``.

    ``data`` must not contain ``\\r`` and ``event`` must not contain ``\\r`` or
    ``\\n``: SSE has no escaping, so they could not round-trip (``ValueError``).
    An empty ``event`` is omitted, matching how the parser reports it (``None``).
    """
    if b"\r" in data:
        raise ValueError("SSE data cannot contain a carriage return")
    body = b"data: " + data.replace(b"\n", b"\ndata: ") + b"\n\n"
    if not event:
        return body
    if "\n" in event or "\r" in event:
        raise ValueError("SSE event name cannot contain a line break")
    return b"event: " + event.encode("utf-8") + b"\n" + body
