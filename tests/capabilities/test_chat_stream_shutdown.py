"""The shutdown end of a capability chat stream never leaves a hole in the live client's events.

The response stops the stream by cancelling the task that pumps it; an event the stream had already
recorded in its run (and so in the stored answer a resumed client replays) may not have been handed out
yet. The shutdown frame carries such events before its ``service_shutting_down`` error, so the ids the
live client sees are the run's ids with no gap (the race behind a flaky e2e test, made deterministic).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from hearth.capabilities.chat_stream import ChatRun, ChatRuns, OwnedChatStream
from hearth.wire.sse import SSEParser


class _OpenedRelay:
    """What the gateway hands the stream once the upstream answered: only the parts the stream uses."""

    context = None

    def __init__(self, pieces: list[str]) -> None:
        self._pieces = pieces
        self.ended_for_shutdown = False

    async def frames(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield b"data: " + orjson.dumps({"choices": [{"delta": {"content": piece}}]}) + b"\n\n"

    def shutdown_frame(self) -> bytes:
        self.ended_for_shutdown = True
        return b""

    def client_left(self, code: str) -> None:
        return None

    async def close(self) -> None:
        return None


def _stream(run: ChatRun, relay: _OpenedRelay) -> OwnedChatStream:
    async def opening() -> Any:
        return relay

    return OwnedChatStream(opening=opening, run=run, runs=ChatRuns(), key=None, engine=None,  # type: ignore[arg-type]
                           heartbeat_s=10, done=lambda *a: {}, finished=lambda *a: None)


def _ids_and_kinds(raw: bytes) -> list[tuple[str | None, str]]:
    return [(e.id, e.event) for e in SSEParser().feed(raw)]


async def test_events_recorded_but_not_handed_out_precede_the_shutdown_error() -> None:
    run = ChatRun()
    relay = _OpenedRelay(["a", "b", "c"])
    stream = _stream(run, relay)
    frames = stream.frames()
    first = await frames.__anext__()
    run.append("message", {"answer": "b"})  # recorded; the response was stopped before taking it

    end = stream.shutdown_frame()

    assert _ids_and_kinds(first + end) == [("1", "message"), ("2", "message"), ("3", "error")]
    assert orjson.loads(list(SSEParser().feed(end))[-1].data)["code"] == "service_shutting_down"
    assert relay.ended_for_shutdown
    await frames.aclose()


async def test_a_stream_whose_done_was_recorded_but_not_sent_ends_with_it_not_with_an_error() -> None:
    run = ChatRun()
    stream = _stream(run, _OpenedRelay(["a"]))
    frames = stream.frames()
    first = await frames.__anext__()
    run.append("done", {"request_id": "r"})

    assert _ids_and_kinds(first + stream.shutdown_frame()) == [("1", "message"), ("2", "done")]
    await frames.aclose()


async def test_nothing_is_repeated_when_every_event_was_handed_out() -> None:
    run = ChatRun()
    stream = _stream(run, _OpenedRelay(["a", "b"]))
    frames = stream.frames()
    raw = await frames.__anext__() + await frames.__anext__()

    assert _ids_and_kinds(raw + stream.shutdown_frame()) == [("1", "message"), ("2", "message"), ("3", "error")]
    await frames.aclose()
