"""A Responses API stream: the gateway's chat stream re-told as the Responses API's typed events.

Events, each ``event: <type>`` with a JSON ``data`` carrying the same ``type`` and an increasing
``sequence_number`` from 0::

    response.created, response.in_progress                    (the response, status in_progress)
    response.output_item.added                                 (a message item, or a function_call item)
    response.content_part.added                                (the message's output_text part)
    response.output_text.delta …                               (one per chat content delta)
    response.function_call_arguments.delta …                   (one per tool-call arguments delta)
    response.output_text.done, response.content_part.done,
    response.function_call_arguments.done, response.output_item.done
    response.completed | response.incomplete | response.failed (the final response, usage included)

The gateway's relay (:class:`~hearth.gateway.relay.RelayStream`) owns the call: it is read here and
always closed (leases, settlement, request log). A stored response is saved *before* its terminal event is
sent, so a client that chains on ``response.completed`` finds it. An error the relay reports mid-stream
(upstream error, idle, deadline) ends the stream with ``response.failed`` carrying its code and message.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from hearth.gateway.relay import SHUTDOWN_MESSAGE, RelayStream
from hearth.observability.logging import get_logger
from hearth.responses.objects import (
    function_call_item,
    message_item,
    new_item_id,
    response_object,
    response_usage,
    status_of,
)
from hearth.wire.sse import SSEParser

__all__ = ["ResponsesStream"]

log = get_logger("hearth.responses")

Save = Callable[[dict[str, Any]], Awaitable[None]]


@dataclass(slots=True)
class _Call:
    """One tool call being streamed: its output index and what has come of it."""

    index: int
    item_id: str
    call_id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class ResponsesStream:
    """A :class:`~hearth.api.event_stream.FrameSource`: the relay's chat chunks in, Responses events out."""

    def __init__(self, relay: RelayStream, *, response_id: str, model: str, echo: dict[str, Any],
                 save: Save | None) -> None:
        self._relay = relay
        self._id = response_id
        self._model = model
        self._echo = echo
        self._save = save  # stores the final response (None: `store: false`)
        self._created = int(time.time())
        self._seq = 0
        self._output: list[tuple[int, dict[str, Any]]] = []  # finished output items and their output index
        self._text: list[str] | None = None  # the message item being streamed
        self._text_id = ""
        self._text_index = 0
        self._calls: dict[int, _Call] = {}  # chat tool-call index → the call being streamed
        self._next_index = 0
        self._finish: Any = None
        self._usage: dict[str, Any] | None = None
        self._ended = False

    def client_left(self, code: str) -> None:
        self._relay.client_left(code)

    def shutdown_frame(self) -> bytes:
        """Ends an unfinished stream cut by the shutdown with ``response.failed`` (the relay logs it as 503)."""
        self._relay.shutdown_frame()
        if self._ended:
            return b""
        self._ended = True
        return self._failed("service_shutting_down", SHUTDOWN_MESSAGE)

    async def close(self) -> None:
        await self._relay.close()

    async def frames(self) -> AsyncIterator[bytes]:
        yield self._event("response.created", response=self._response("in_progress")) + self._event(
            "response.in_progress", response=self._response("in_progress"))
        parser = SSEParser()
        async for frame in self._relay.frames():
            out: list[bytes] = []
            for event in parser.feed(frame):
                if event.data == b"[DONE]":
                    continue
                try:
                    chunk = orjson.loads(event.data)
                except orjson.JSONDecodeError:
                    continue  # not a chunk (the relay ends a broken upstream stream with an error event)
                if not isinstance(chunk, dict):
                    continue
                error = chunk.get("error")
                if isinstance(error, dict):
                    self._ended = True
                    out.append(self._failed(str(error.get("code") or "upstream_stream_error"),
                                            str(error.get("message") or "")))
                    yield b"".join(out)
                    return
                out += self._chunk(chunk)
            if out:
                yield b"".join(out)
        yield await self._finished()

    # ---- chat chunk → events -----------------------------------------------------------------------
    def _chunk(self, chunk: dict[str, Any]) -> list[bytes]:
        if isinstance(chunk.get("usage"), dict):
            self._usage = response_usage(chunk["usage"])
        out: list[bytes] = []
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                out += self._text_delta(text)
            for call in delta.get("tool_calls") or ():
                out += self._call_delta(call)
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
        return out

    def _text_delta(self, text: str) -> list[bytes]:
        out = []
        if self._text is None:
            self._text, self._text_id, self._text_index = [], new_item_id("msg"), self._take_index()
            out.append(self._event("response.output_item.added", output_index=self._text_index,
                                   item=message_item(self._text_id, None, status="in_progress") | {"content": []}))
            out.append(self._event("response.content_part.added", item_id=self._text_id,
                                   output_index=self._text_index, content_index=0,
                                   part={"type": "output_text", "text": "", "annotations": []}))
        self._text.append(text)
        out.append(self._event("response.output_text.delta", item_id=self._text_id, output_index=self._text_index,
                               content_index=0, delta=text, logprobs=[]))
        return out

    def _call_delta(self, delta: dict[str, Any]) -> list[bytes]:
        index = delta.get("index", 0)
        function = delta.get("function") or {}
        call = self._calls.get(index)
        out = []
        if call is None:
            out += self._end_text()  # a message item before tool calls is complete once they begin
            call = self._calls[index] = _Call(self._take_index(), new_item_id("fc"),
                                              str(delta.get("id") or new_item_id("call")),
                                              str(function.get("name") or ""))
            out.append(self._event("response.output_item.added", output_index=call.index,
                                   item=function_call_item(call.item_id, call.call_id, call.name, "",
                                                           status="in_progress")))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            call.arguments.append(arguments)
            out.append(self._event("response.function_call_arguments.delta", item_id=call.item_id,
                                   output_index=call.index, delta=arguments))
        return out

    def _take_index(self) -> int:
        self._next_index += 1
        return self._next_index - 1

    def _end_text(self) -> list[bytes]:
        if self._text is None:
            return []
        text = "".join(self._text)
        self._text = None
        item = message_item(self._text_id, text)
        part = item["content"][0]
        self._output.append((self._text_index, item))
        at = {"item_id": self._text_id, "output_index": self._text_index, "content_index": 0}
        return [self._event("response.output_text.done", **at, text=text, logprobs=[]),
                self._event("response.content_part.done", **at, part=part),
                self._event("response.output_item.done", output_index=self._text_index, item=item)]

    def _end_calls(self) -> list[bytes]:
        out = []
        for call in self._calls.values():
            arguments = "".join(call.arguments)
            item = function_call_item(call.item_id, call.call_id, call.name, arguments)
            self._output.append((call.index, item))
            out.append(self._event("response.function_call_arguments.done", item_id=call.item_id,
                                   output_index=call.index, name=call.name, arguments=arguments))
            out.append(self._event("response.output_item.done", output_index=call.index, item=item))
        self._calls.clear()
        return out

    async def _finished(self) -> bytes:
        out = self._end_text() + self._end_calls()
        self._output.sort(key=lambda indexed: indexed[0])
        status, incomplete = status_of(self._finish)
        final = self._response(status, incomplete=incomplete)
        if self._save is not None:
            try:
                await self._save(final)
            except Exception as exc:  # the answer was streamed; saying it is not stored beats a silent cut
                log.error("response_not_stored", response_id=self._id, error=type(exc).__name__, exc_info=exc)
                self._ended = True
                return b"".join(out) + self._failed("internal_error", "The response could not be stored.")
        self._ended = True
        kind = "response.completed" if status == "completed" else "response.incomplete"
        return b"".join(out) + self._event(kind, response=final)

    # ---- encoding ----------------------------------------------------------------------------------
    def _response(self, status: str, *, incomplete: dict[str, Any] | None = None,
                  error: dict[str, Any] | None = None) -> dict[str, Any]:
        done = status != "in_progress"
        output = [item for _, item in self._output] if done else []
        return response_object(response_id=self._id, created_at=self._created, model=self._model, echo=self._echo,
                               output=output, usage=self._usage if done else None, status=status,
                               incomplete=incomplete, error=error)

    def _failed(self, code: str, message: str) -> bytes:
        return self._event("response.failed", response=self._response(
            "failed", error={"code": code, "message": message}))

    def _event(self, kind: str, **data: Any) -> bytes:
        seq = self._seq
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, "sequence_number": seq,
                                                                        **data}) + b"\n\n"
