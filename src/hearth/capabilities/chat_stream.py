"""Streaming chat on the capability API: seed 001's SSE protocol, resumable, and idempotent per request id.

Events (each with an increasing ``id:``)::

    event: message    data: {"answer": "<delta>"}
    event: heartbeat  data: {"timestamp": <unix seconds>}        after ``heartbeat_s`` of silence
    event: busy       data: {"retry_after": s, "code", "message"} admission is full (the 429s: limits, capacity)
    event: error      data: {"code", "message"}
    event: done       data: {"request_id", "prompt_code", "prompt_version", "model", "usage", "cost"}

A :class:`ChatRun` holds a stream's events while it runs, so a second request with the same request id
in this process — or a client resuming with ``Last-Event-ID`` — follows it live from where it left off;
once it finished, the events are stored with the request's row (:mod:`hearth.capabilities.chat_requests`)
and replayed from there, by any process, for ``keep_s``. A duplicate that arrives at another process
while the call runs waits (with heartbeats) for the row to finish, then replays it: the model is called
once. The stream's owner leaving cancels the upstream call (the relay is closed); followers then get an
``error`` event ``client_disconnected``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities import chat_requests
from hearth.capabilities.chat_requests import ChatKey
from hearth.errors import HearthError
from hearth.gateway.relay import SHUTDOWN_MESSAGE, RelayStream
from hearth.providers.base import Usage
from hearth.wire.sse import SSEParser

_HEARTBEAT = object()


@dataclass(slots=True)
class ChatRun:
    """The events of one running stream, for followers in this process."""

    events: list[dict[str, Any]] = field(default_factory=list)
    finished: bool = False
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    def append(self, event: str, data: dict[str, Any]) -> dict[str, Any]:
        item = {"id": len(self.events) + 1, "event": event, "data": data}
        self.events.append(item)
        self._wake()
        return item

    def finish(self) -> None:
        self.finished = True
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def follow(self, after: int, heartbeat_s: float) -> AsyncIterator[dict[str, Any] | object]:
        sent = after
        while True:
            while sent < len(self.events):
                sent += 1
                yield self.events[sent - 1]
            if self.finished:
                return
            waiting = self._changed
            try:
                await asyncio.wait_for(waiting.wait(), heartbeat_s)
            except TimeoutError:
                yield _HEARTBEAT


class ChatRuns:
    """This process's running streams, by request key."""

    def __init__(self) -> None:
        self._runs: dict[ChatKey, ChatRun] = {}

    def start(self, key: ChatKey) -> ChatRun:
        run = self._runs[key] = ChatRun()
        return run

    def get(self, key: ChatKey) -> ChatRun | None:
        return self._runs.get(key)

    def end(self, key: ChatKey) -> None:
        self._runs.pop(key, None)


def encode(item: dict[str, Any]) -> bytes:
    return (f"id: {item['id']}\nevent: {item['event']}\ndata: ".encode() + orjson.dumps(item["data"]) + b"\n\n")


def heartbeat_frame(last_id: int) -> bytes:
    """Heartbeats carry the id of the last real event, so a resume after one repeats nothing."""
    return encode({"id": last_id, "event": "heartbeat", "data": {"timestamp": int(time.time())}})


@dataclass(slots=True)
class StreamOutcome:
    usage: Usage | None = None
    answer: list[str] = field(default_factory=list)
    error: dict[str, Any] | None = None


class OwnedChatStream:
    """The stream that makes the model call: opens it, translates OpenAI chunks into the protocol's
    events, records them in its :class:`ChatRun` and, at the end, in the database."""

    def __init__(self, *, opening: Any, run: ChatRun, runs: ChatRuns, key: ChatKey | None, engine: AsyncEngine,
                 heartbeat_s: float, done: Any, finished: Any) -> None:
        self._opening = opening  # a zero-argument coroutine function: opens the gateway stream
        self._run = run
        self._runs = runs
        self._key = key
        self._engine = engine
        self._heartbeat_s = heartbeat_s
        self._done = done  # (relay context, usage, answer) -> the done event's data and the stored result
        self._finished = finished  # (relay context | None, status, error code, usage) -> None: the capability row
        self._relay: RelayStream | None = None
        self._outcome = StreamOutcome()
        self._closed = False
        self._handed = 0  # the id of the last event handed to the response

    def client_left(self, code: str) -> None:
        if self._relay is not None:
            self._relay.client_left(code)

    def shutdown_frame(self) -> bytes:
        """The process is shutting down and its stream grace is over: an ``error`` event
        ``service_shutting_down`` ends the stream (nothing if it had ended already); stored with the run, so a
        client resuming elsewhere sees it too. Events already recorded but not yet handed out (the response
        was stopped between the two) come first, so the live client misses none of the stored run."""
        if self._relay is not None:
            self._relay.shutdown_frame()  # what the request log says
        if not any(e["event"] in ("done", "error", "busy") for e in self._run.events):
            self._outcome.error = {"code": "service_shutting_down", "message": SHUTDOWN_MESSAGE, "status": 503}
            self._run.append("error", {"code": "service_shutting_down", "message": SHUTDOWN_MESSAGE})
        return b"".join(encode(e) for e in self._run.events[self._handed:])

    async def frames(self) -> AsyncIterator[bytes]:
        try:
            async for item in _with_heartbeats(self._events(), self._heartbeat_s):
                if item is _HEARTBEAT:
                    yield heartbeat_frame(self._handed)
                else:
                    self._handed = item["id"]
                    yield encode(item)
        except asyncio.CancelledError:
            if self._outcome.error is None:
                self._outcome.error = {"code": "client_disconnected", "message": "The client went away.",
                                       "status": 499}
            raise

    async def _events(self) -> AsyncIterator[dict[str, Any]]:
        run = self._run
        try:
            self._relay = await self._opening()
        except HearthError as exc:
            self._outcome.error = {"code": exc.code, "message": exc.message, "status": exc.status}
            if exc.status == 429 or exc.code == "state_backend_unavailable":
                yield run.append("busy", {"retry_after": exc.retry_after or 1, "code": exc.code,
                                          "message": exc.message})
            else:
                yield run.append("error", {"code": exc.code, "message": exc.message})
            return
        parser = SSEParser()
        async for frame in self._relay.frames():
            for event in parser.feed(frame):
                item = self._translate(event.data)
                if item is not None:
                    yield item
        if self._outcome.error is None:
            usage = self._outcome.usage
            yield run.append("done", self._done(self._relay.context, usage, "".join(self._outcome.answer)))

    def _translate(self, data: bytes) -> dict[str, Any] | None:
        if data == b"[DONE]":
            return None
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(chunk, dict):
            return None
        if isinstance(chunk.get("error"), dict):
            error = chunk["error"]
            self._outcome.error = {"code": error.get("code") or "upstream_stream_error",
                                   "message": error.get("message") or "", "status": 502}
            return self._run.append("error", {"code": self._outcome.error["code"],
                                              "message": self._outcome.error["message"]})
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._outcome.usage = Usage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") if isinstance(choice, dict) else None
            text = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(text, str) and text:
                self._outcome.answer.append(text)
                return self._run.append("message", {"answer": text})
        return None

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._relay is not None:
                await self._relay.close()
        finally:
            error = self._outcome.error
            self._finished(self._relay.context if self._relay is not None else None,
                           int(error.get("status") or 502) if error else 200, error["code"] if error else None,
                           self._outcome.usage)
            self._run.finish()
            if self._key is not None:
                self._runs.end(self._key)
                error = self._outcome.error
                if error is not None and not any(e["event"] in ("error", "busy") for e in self._run.events):
                    self._run.append("error", {"code": error["code"], "message": error["message"]})
                done = next((e["data"] for e in self._run.events if e["event"] == "done"), None)
                await chat_requests.finish(self._engine, self._key, status="failed" if done is None else "succeeded",
                                           events=self._run.events, result=done, error=error)


class FollowingChatStream:
    """A duplicate or resuming request: follows a run in this process, or waits for another process's
    run to finish and replays it; ``after`` is the ``Last-Event-ID`` already seen."""

    def __init__(self, *, run: ChatRun | None, key: ChatKey, engine: AsyncEngine, after: int, heartbeat_s: float,
                 stored: list[dict[str, Any]] | None, wait_s: float) -> None:
        self._run, self._key, self._engine, self._after = run, key, engine, after
        self._heartbeat_s, self._stored, self._wait_s = heartbeat_s, stored, wait_s

    def client_left(self, code: str) -> None:
        return None

    async def frames(self) -> AsyncIterator[bytes]:
        last = self._after
        if self._run is not None:
            async for item in self._run.follow(self._after, self._heartbeat_s):
                if item is _HEARTBEAT:
                    yield heartbeat_frame(last)
                else:
                    assert isinstance(item, dict)
                    last = item["id"]
                    yield encode(item)
            return
        events = self._stored
        give_up = time.monotonic() + self._wait_s
        next_beat = time.monotonic() + self._heartbeat_s
        while events is None:  # running in another process: wait for its row to finish
            if time.monotonic() > give_up:
                yield encode({"id": last + 1, "event": "error", "data": {
                    "code": "request_in_progress", "message": "The original request is still running."}})
                return
            await asyncio.sleep(min(0.2, self._heartbeat_s))
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self._heartbeat_s
                yield heartbeat_frame(last)
            row = await chat_requests.read(self._engine, self._key)
            if row is None:
                yield encode({"id": last + 1, "event": "error", "data": {
                    "code": "not_found", "message": "The original request is no longer kept."}})
                return
            if row["status"] != "running":
                events = row["events"] or []
        for item in events:
            if item["id"] > self._after:
                yield encode(item)

    async def close(self) -> None:
        return None


async def _with_heartbeats(items: AsyncIterator[dict[str, Any]], interval: float) -> AsyncIterator[Any]:
    """``items``, with a heartbeat marker whenever ``interval`` passes without one."""
    iterator = items.__aiter__()
    pending: asyncio.Future[dict[str, Any]] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(iterator.__anext__())
            done, _ = await asyncio.wait({pending}, timeout=interval)
            if not done:
                yield _HEARTBEAT
                continue
            current, pending = pending, None
            try:
                item = current.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            await asyncio.gather(pending, return_exceptions=True)
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
