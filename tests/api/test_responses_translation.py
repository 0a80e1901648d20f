"""Translation between the Responses API and chat completions, both ways, for what the fake upstream does not
produce on its own (tool calls in answers and in streams, refusals, chained tool turns)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from hearth.responses.objects import assistant_message, from_chat_completion
from hearth.responses.requests import parse_responses_request, responses_param
from hearth.responses.stream import ResponsesStream
from hearth.wire.sse import SSEParser

ECHO: dict[str, Any] = {"tools": []}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return b"data: " + orjson.dumps(body) + b"\n\n"


class _Relay:
    """What :class:`ResponsesStream` reads of the gateway's relay: frames, then close."""

    def __init__(self, frames: list[bytes]) -> None:
        self._frames = frames
        self.closed = False

    async def frames(self) -> AsyncIterator[bytes]:
        for frame in self._frames:
            yield frame

    async def close(self) -> None:
        self.closed = True


async def _events(frames: list[bytes], saved: list[dict[str, Any]]) -> list[dict[str, Any]]:
    async def save(response: dict[str, Any]) -> None:
        saved.append(response)

    stream = ResponsesStream(_Relay(frames), response_id="resp_1", model="m", echo=ECHO,  # type: ignore[arg-type]
                             save=save)
    raw = b"".join([frame async for frame in stream.frames()])
    events = SSEParser().feed(raw)
    decoded = [orjson.loads(e.data) for e in events]
    assert [e.event for e in events] == [d["type"] for d in decoded]
    return decoded


def test_a_chat_answer_with_text_and_tool_calls_becomes_output_items_and_back():
    message = {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": '{"q":1}'}}]}
    completion = {"id": "chatcmpl-1", "model": "up",
                  "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15,
                  "prompt_tokens_details": {"cached_tokens": 3}}}
    response = from_chat_completion(completion, response_id="resp_1", model="m", echo=ECHO)
    assert response["status"] == "completed"
    text, call = response["output"]
    assert text["type"] == "message" and text["content"][0]["text"] == "Let me check."
    assert (call["type"], call["call_id"], call["name"], call["arguments"]) == (
        "function_call", "call_9", "lookup", '{"q":1}')
    assert response["usage"] == {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 3}, "output_tokens": 4,
                                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 15}
    assert assistant_message(response["output"]) == {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": '{"q":1}'}}]}


def test_a_refusal_is_a_refusal_part():
    completion = {"choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": None,
                                                                    "refusal": "I cannot help with that."}}]}
    response = from_chat_completion(completion, response_id="resp_1", model="m", echo=ECHO)
    assert response["output"][0]["content"] == [{"type": "refusal", "refusal": "I cannot help with that."}]


def test_tool_turns_in_the_input_join_the_assistant_message_before_them():
    parsed = parse_responses_request({"model": "m", "input": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "b", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "one"}]},
        {"type": "function_call_output", "call_id": "c2", "output": "two"}]})
    assert parsed.turn[1:] == [
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "b", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"}]


def test_chat_validation_params_are_named_as_the_responses_api_names_them():
    assert responses_param("max_tokens") == "max_output_tokens"
    assert responses_param("response_format.json_schema") == "text.format.json_schema"
    assert responses_param("messages[3].content") == "input"
    assert responses_param("temperature") == "temperature"


async def test_a_streamed_tool_call_is_a_function_call_item_with_argument_deltas():
    saved: list[dict[str, Any]] = []
    frames = [_chunk({"role": "assistant", "content": "Hm"}), _chunk({"content": "."}),
              _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                      "function": {"name": "lookup", "arguments": ""}}]}),
              _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q":'}}]}),
              _chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}, "tool_calls"),
              b'data: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\n',
              b"data: [DONE]\n\n"]
    events = await _events(frames, saved)
    assert [e["type"] for e in events] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    final = events[-1]["response"]
    assert [item["type"] for item in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["arguments"] == '{"q":1}' and final["output"][1]["call_id"] == "call_1"
    assert events[9]["output_index"] == 1 and events[12]["arguments"] == '{"q":1}'
    assert final["usage"]["input_tokens"] == 5 and final["usage"]["output_tokens"] == 3
    assert saved == [final]  # stored before the final event went out


async def test_an_answer_cut_by_its_limit_ends_with_response_incomplete():
    saved: list[dict[str, Any]] = []
    events = await _events([_chunk({"content": "a"}), _chunk({}, "length"), b"data: [DONE]\n\n"], saved)
    assert events[-1]["type"] == "response.incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
