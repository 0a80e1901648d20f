"""The Messages door's pure translations: Anthropic request → chat body, chat answer / chunks → Anthropic."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from hearth.api.anthropic_stream import native_event, relay_payloads
from hearth.errors import HearthError
from hearth.wire.anthropic_reply import ChunkEvents, chat_to_message, error_payload
from hearth.wire.anthropic_request import NativeOnly, messages_to_chat
from hearth.wire.sse import SSEParser


def _request(**extra: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}], **extra}


def test_a_turn_with_tool_results_becomes_tool_messages_then_the_rest():
    chat = messages_to_chat(_request(messages=[
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "text", "text": "Let me look."},
                                          {"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "text", "text": "and hurry"},
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "rain"},
                {"type": "image", "source": {"type": "url", "url": "https://x.test/radar.png"}}]}]}]))
    assert chat["messages"] == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "w", "arguments": '{"c":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "t1", "content": "rain"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/radar.png"}}]},
        {"role": "user", "content": "and hurry"}]


def test_options_map_to_their_openai_names():
    chat = messages_to_chat(_request(
        stream=True, top_p=0.5, top_k=3, stop_sequences=["a", "b"], metadata={"user_id": "u1"},
        tools=[{"name": "w", "input_schema": {"type": "object"}}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        output_config={"effort": "low", "format": {"type": "json_schema", "schema": {"type": "object"}}}))
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True}
    assert chat["top_p"] == 0.5 and "top_k" not in chat and chat["stop"] == ["a", "b"] and chat["user"] == "u1"
    assert chat["tools"] == [{"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}}]
    assert chat["tool_choice"] == "required" and chat["parallel_tool_calls"] is False
    assert chat["response_format"] == {"type": "json_schema", "json_schema": {"name": "output",
                                                                              "schema": {"type": "object"}}}
    named = messages_to_chat(_request(tools=[{"name": "w", "input_schema": {}}], tool_choice={"type": "tool",
                                                                                              "name": "w"}))
    assert named["tool_choice"] == {"type": "function", "function": {"name": "w"}}


@pytest.mark.parametrize(("body", "param"), [
    ({"max_tokens": None}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"temperature": 1.5}, "temperature"),
    ({"stop_sequences": "END"}, "stop_sequences"),
    ({"system": [{"type": "image"}]}, "system.0"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"metadata": {"user_id": 7}}, "metadata.user_id"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {
        "type": "base64", "media_type": "image/bmp", "data": "AA=="}}]}]}, "messages.0.content.0.source.media_type"),
])
def test_invalid_requests_name_the_field(body, param):
    with pytest.raises(HearthError) as err:
        messages_to_chat({**_request(), **body})
    assert err.value.code == "invalid_request" and err.value.param == param
    assert err.value.message.startswith(param + ": ")


def test_features_only_anthropic_serves_are_refused_or_noted():
    body = _request(mcp_servers=[{"type": "url", "url": "https://mcp.test", "name": "m"}],
                    tools=[{"type": "web_search_20250305", "name": "web_search"},
                           {"name": "w", "input_schema": {"type": "object"}}],
                    messages=[{"role": "user", "content": [
                        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                                        "data": "AA=="}},
                        {"type": "text", "text": "summarize"}]}])
    with pytest.raises(HearthError) as err:
        messages_to_chat(body)
    assert err.value.param == "mcp_servers"
    needs = NativeOnly()
    chat = messages_to_chat(body, needs)
    assert needs == ["mcp_servers", "messages.0.content.0.type", "tools.0.type"]
    assert [t["function"]["name"] for t in chat["tools"]] == ["w"]  # the rest still routes and estimates
    assert chat["messages"] == [{"role": "user", "content": "summarize"}]


def test_a_chat_answer_becomes_a_message():
    chat = {"id": "c1", "model": "up", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "w", "arguments": '{"c": "Oslo"}'}},
            {"id": "t2", "type": "function", "function": {"name": "w", "arguments": "not json"}}]}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 10}}}
    message = chat_to_message(chat, message_id="msg_1", model="m")
    assert message == {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [
        {"type": "text", "text": "Looking."}, {"type": "tool_use", "id": "t1", "name": "w", "input": {"c": "Oslo"}},
        {"type": "tool_use", "id": "t2", "name": "w", "input": {}}], "stop_reason": "tool_use",
        "stop_sequence": None, "usage": {"input_tokens": 20, "cache_creation_input_tokens": 0,
                                         "cache_read_input_tokens": 10, "output_tokens": 5}}


def _events(frames: bytes) -> list[tuple[str | None, dict[str, Any]]]:
    return [(ev.event, orjson.loads(ev.data)) for ev in SSEParser().feed(frames)]


def _chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return orjson.dumps({"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": choices, **extra})


def test_chunks_become_anthropics_events():
    tr = ChunkEvents("msg_1", "fallback", input_estimate=7)
    frames = b"".join([
        tr.feed(_chunk({"role": "assistant", "content": ""})), tr.feed(_chunk({"content": "Hi"})),
        tr.feed(_chunk({"tool_calls": [{"index": 0, "id": "t1", "type": "function",
                                        "function": {"name": "w", "arguments": ""}}]})),
        tr.feed(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"c":'}}]})),
        tr.feed(_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Oslo"}'}}]})),
        tr.feed(_chunk({}, "tool_calls")), tr.feed(_chunk(usage={"prompt_tokens": 9, "completion_tokens": 4})),
        tr.finish()])
    events = _events(frames)
    assert [name for name, _ in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop", "message_delta",
        "message_stop"]
    assert all(name == data["type"] for name, data in events)
    start = events[0][1]["message"]
    assert start["id"] == "msg_1" and start["model"] == "m" and start["usage"]["input_tokens"] == 7
    assert events[2][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert events[5][1]["index"] == 1 and events[5][1]["content_block"]["id"] == "t1"
    assert "".join(e[1]["delta"]["partial_json"] for e in events[6:8]) == '{"c":"Oslo"}'
    delta = events[9][1]
    assert delta["delta"]["stop_reason"] == "tool_use" and delta["usage"]["output_tokens"] == 4
    assert delta["usage"]["input_tokens"] == 9


def test_an_empty_stream_still_starts_and_stops():
    events = _events(ChunkEvents("msg_1", "m", input_estimate=3).finish())
    assert [name for name, _ in events] == ["message_start", "ping", "message_delta", "message_stop"]
    assert events[2][1]["delta"]["stop_reason"] == "end_turn"


def test_native_events_get_their_names_back():
    assert native_event(b'{"type":"ping"}') == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert native_event(b'{ "type": "message_stop"}').startswith(b"event: message_stop\n")
    assert native_event(b'{"id":"chatcmpl-x","choices":[]}') == b""  # the relay's synthesized usage chunk


def test_error_payloads_use_anthropics_types():
    assert error_payload("budget_exhausted", "no room")["error"]["type"] == "billing_error"
    assert error_payload("deadline_exceeded", "late")["error"]["type"] == "timeout_error"
    assert error_payload("service_shutting_down", "bye")["error"]["type"] == "overloaded_error"
    assert error_payload("upstream_bad_request", "no", status=422)["error"]["type"] == "invalid_request_error"
    assert error_payload(None, "boom", status=502) == {"type": "error", "error": {"type": "api_error",
                                                                                  "message": "boom"}}


def test_relay_frames_are_split_and_odd_ones_parsed():
    frame = b'data: {"a":1}\n\ndata: [DONE]\n\n'
    assert relay_payloads(frame, SSEParser()) == [b'{"a":1}', b"[DONE]"]
    multi_line = b'data: {"a":\ndata: 1}\n\n'  # how the relay frames a payload with a line break
    assert relay_payloads(multi_line, SSEParser()) == [b'{"a":\n1}']
