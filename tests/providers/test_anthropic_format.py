"""Specification of the OpenAI ⇄ Anthropic Messages translation."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest

from hearth.providers.anthropic_format import (
    MessagesStreamTranslator,
    TranslationError,
    UpstreamStreamError,
    anthropic_error_to_openai,
    chat_to_messages_request,
    messages_response_to_chat,
)


def translate(**body: Any) -> dict[str, Any]:
    body.setdefault("model", "caller-model")
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return chat_to_messages_request(body, "claude-upstream")


# ----------------------------------------------------------------------------- requests


class TestRequestBasics:
    def test_minimal_request_uses_upstream_model_and_default_max_tokens(self) -> None:
        assert translate() == {
            "model": "claude-upstream",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4096,
        }

    def test_default_max_tokens_is_configurable(self) -> None:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        assert chat_to_messages_request(body, "u", default_max_tokens=123)["max_tokens"] == 123

    def test_max_tokens_is_forwarded(self) -> None:
        assert translate(max_tokens=50)["max_tokens"] == 50

    def test_max_completion_tokens_wins_over_max_tokens(self) -> None:
        assert translate(max_tokens=50, max_completion_tokens=70)["max_tokens"] == 70

    @pytest.mark.parametrize("value", [0, -1, "10", True, 1.5])
    def test_invalid_max_tokens_is_rejected(self, value: Any) -> None:
        with pytest.raises(TranslationError, match="max_tokens"):
            translate(max_tokens=value)

    def test_sampling_parameters_are_forwarded(self) -> None:
        request = translate(temperature=0.3, top_p=0.9)
        assert request["temperature"] == 0.3
        assert request["top_p"] == 0.9

    def test_temperature_above_anthropic_range_is_clamped(self) -> None:
        assert translate(temperature=1.7)["temperature"] == 1.0

    def test_negative_temperature_is_rejected(self) -> None:
        with pytest.raises(TranslationError, match="temperature"):
            translate(temperature=-0.1)

    def test_stop_string_becomes_stop_sequences(self) -> None:
        assert translate(stop="END")["stop_sequences"] == ["END"]

    def test_stop_list_becomes_stop_sequences_without_empty_strings(self) -> None:
        assert translate(stop=["a", "", "b"])["stop_sequences"] == ["a", "b"]

    def test_empty_stop_is_omitted(self) -> None:
        assert "stop_sequences" not in translate(stop=[])

    def test_non_string_stop_is_rejected(self) -> None:
        with pytest.raises(TranslationError, match="stop"):
            translate(stop=[1])

    @pytest.mark.parametrize("stream", [True, False])
    def test_stream_flag_is_forwarded(self, stream: bool) -> None:
        assert translate(stream=stream, stream_options={"include_usage": True})["stream"] is stream

    def test_stream_options_are_not_forwarded(self) -> None:
        assert "stream_options" not in translate(stream=True, stream_options={"include_usage": True})

    def test_user_becomes_metadata_user_id(self) -> None:
        assert translate(user="u-42")["metadata"] == {"user_id": "u-42"}

    def test_openai_only_parameters_are_dropped(self) -> None:
        request = translate(
            logprobs=True,
            top_logprobs=3,
            presence_penalty=0.5,
            frequency_penalty=0.5,
            logit_bias={"1": 2},
            seed=7,
            service_tier="auto",
            store=True,
            n=1,
            response_format={"type": "text"},
        )
        assert set(request) == {"model", "messages", "max_tokens"}

    def test_n_greater_than_one_is_rejected(self) -> None:
        with pytest.raises(TranslationError, match="'n'"):
            translate(n=2)

    @pytest.mark.parametrize("kind", ["json_object", "json_schema"])
    def test_json_response_formats_are_rejected(self, kind: str) -> None:
        with pytest.raises(TranslationError, match=kind):
            translate(response_format={"type": kind})

    @pytest.mark.parametrize("legacy", [{"functions": [{"name": "f"}]}, {"function_call": "auto"}])
    def test_legacy_function_calling_is_rejected(self, legacy: dict[str, Any]) -> None:
        with pytest.raises(TranslationError, match="tools"):
            translate(**legacy)

    def test_the_caller_body_is_not_mutated(self) -> None:
        body: dict[str, Any] = {
            "model": "m",
            "messages": [
                {"role": "system", "content": "s"},
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "tool", "tool_call_id": "c", "content": "r"},
            ],
            "tools": [WEATHER],
            "parallel_tool_calls": False,
            "stop": "x",
        }
        snapshot = orjson.dumps(body)
        chat_to_messages_request(body, "u")
        assert orjson.dumps(body) == snapshot

    @pytest.mark.parametrize("messages", [None, [], "hi"])
    def test_messages_must_be_a_non_empty_array(self, messages: Any) -> None:
        with pytest.raises(TranslationError, match="messages"):
            translate(messages=messages)


class TestRequestMessages:
    def test_system_and_developer_messages_are_hoisted_and_joined(self) -> None:
        request = translate(
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
                {"role": "developer", "content": [{"type": "text", "text": "Use English."}]},
                {"role": "assistant", "content": "hello"},
            ]
        )
        assert request["system"] == "Be brief.\n\nUse English."
        assert request["messages"] == [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
        ]

    def test_system_message_with_non_text_part_is_rejected(self) -> None:
        with pytest.raises(TranslationError, match=r"messages\[0\]"):
            translate(
                messages=[
                    {
                        "role": "system",
                        "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
                    },
                    {"role": "user", "content": "hi"},
                ]
            )

    def test_only_system_messages_is_rejected(self) -> None:
        with pytest.raises(TranslationError, match="at least one"):
            translate(messages=[{"role": "system", "content": "Be brief."}])

    def test_consecutive_same_role_messages_are_merged_into_blocks(self) -> None:
        request = translate(
            messages=[
                {"role": "user", "content": "one"},
                {"role": "user", "content": [{"type": "text", "text": "two"}]},
                {"role": "assistant", "content": "three"},
                {"role": "assistant", "content": "four"},
            ]
        )
        assert request["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "three"}, {"type": "text", "text": "four"}],
            },
        ]

    def test_empty_messages_are_dropped_so_neighbours_merge(self) -> None:
        request = translate(
            messages=[
                {"role": "user", "content": "one"},
                {"role": "assistant", "content": ""},
                {"role": "user", "content": "two"},
            ]
        )
        assert request["messages"] == [
            {"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}
        ]

    def test_single_text_part_collapses_to_a_string(self) -> None:
        request = translate(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
        assert request["messages"] == [{"role": "user", "content": "hi"}]

    def test_data_url_image_becomes_base64_block(self) -> None:
        request = translate(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,iVBORw0K", "detail": "low"},
                        },
                    ],
                }
            ]
        )
        assert request["messages"][0]["content"] == [
            {"type": "text", "text": "what is this?"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0K"}},
        ]

    def test_http_image_becomes_url_block(self) -> None:
        request = translate(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}}],
                }
            ]
        )
        assert request["messages"][0]["content"] == [
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}}
        ]

    @pytest.mark.parametrize(
        ("url", "complaint"),
        [
            ("data:image/bmp;base64,Qk0=", "not supported"),
            ("data:image/png,rawbytes", "base64"),
            ("data:image/png;base64,", "base64"),
            ("ftp://example.com/cat.png", "http"),
        ],
    )
    def test_unusable_image_urls_are_rejected(self, url: str, complaint: str) -> None:
        with pytest.raises(TranslationError, match=complaint):
            translate(
                messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
            )

    def test_unsupported_content_part_is_rejected(self) -> None:
        part = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
        with pytest.raises(TranslationError, match="input_audio"):
            translate(messages=[{"role": "user", "content": [part]}])

    @pytest.mark.parametrize("role", ["function", "critic", None])
    def test_unsupported_roles_are_rejected(self, role: Any) -> None:
        with pytest.raises(TranslationError, match=r"messages\[0\]"):
            translate(messages=[{"role": role, "content": "x", "name": "f"}])

    def test_assistant_tool_calls_become_tool_use_blocks(self) -> None:
        request = translate(
            messages=[
                {"role": "user", "content": "weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                        },
                        {
                            "id": "call_2",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
                        },
                    ],
                },
            ]
        )
        assert request["messages"][1] == {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "call_2", "name": "weather", "input": {"city": "Rome"}},
            ],
        }

    def test_assistant_tool_call_without_content_or_arguments(self) -> None:
        request = translate(
            messages=[
                {"role": "user", "content": "now?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "now", "arguments": ""}}
                    ],
                },
            ]
        )
        assert request["messages"][1]["content"] == [
            {"type": "tool_use", "id": "c", "name": "now", "input": {}}
        ]

    @pytest.mark.parametrize(
        ("arguments", "complaint"), [("{city: Paris", "not valid JSON"), ("[1]", "object")]
    )
    def test_bad_tool_call_arguments_are_rejected(self, arguments: str, complaint: str) -> None:
        call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
        with pytest.raises(TranslationError, match=complaint):
            translate(messages=[{"role": "assistant", "content": None, "tool_calls": [call]}])

    def test_tool_messages_become_user_tool_results_merged_in_one_turn(self) -> None:
        request = translate(
            messages=[
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{}"}},
                        {"id": "call_2", "type": "function", "function": {"name": "w", "arguments": "{}"}},
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
                {"role": "user", "content": "thanks"},
            ]
        )
        assert request["messages"][2] == {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "rain"},
                {"type": "text", "text": "thanks"},
            ],
        }

    def test_tool_results_are_moved_before_user_text_in_a_merged_turn(self) -> None:
        request = translate(
            messages=[
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "w", "arguments": "{}"}}
                    ],
                },
                {"role": "user", "content": "by the way"},
                {"role": "tool", "tool_call_id": "c", "content": ""},
            ]
        )
        assert request["messages"][1]["content"] == [
            {"type": "tool_result", "tool_use_id": "c"},
            {"type": "text", "text": "by the way"},
        ]

    def test_tool_message_without_tool_call_id_is_rejected(self) -> None:
        with pytest.raises(TranslationError, match="tool_call_id"):
            translate(messages=[{"role": "tool", "content": "x"}])


WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Current weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
        "strict": True,
    },
}


class TestRequestTools:
    def test_function_tools_become_anthropic_tools(self) -> None:
        bare = {"type": "function", "function": {"name": "now"}}
        assert translate(tools=[WEATHER, bare])["tools"] == [
            {
                "name": "weather",
                "description": "Current weather",
                "input_schema": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            },
            {"name": "now", "input_schema": {"type": "object", "properties": {}}},
        ]

    def test_non_function_tools_are_rejected(self) -> None:
        with pytest.raises(TranslationError, match="custom"):
            translate(tools=[{"type": "custom", "custom": {"name": "x"}}])

    @pytest.mark.parametrize(
        ("openai", "anthropic"),
        [
            ("auto", {"type": "auto"}),
            ("none", {"type": "none"}),
            ("required", {"type": "any"}),
            ({"type": "function", "function": {"name": "weather"}}, {"type": "tool", "name": "weather"}),
        ],
    )
    def test_tool_choice_mapping(self, openai: Any, anthropic: dict[str, Any]) -> None:
        assert translate(tools=[WEATHER], tool_choice=openai)["tool_choice"] == anthropic

    def test_no_tool_choice_by_default(self) -> None:
        assert "tool_choice" not in translate(tools=[WEATHER])

    def test_tool_choice_without_tools_is_dropped(self) -> None:
        request = translate(tool_choice="required")
        assert "tool_choice" not in request
        assert "tools" not in request

    @pytest.mark.parametrize("choice", ["sometimes", {"type": "allowed_tools"}, 3])
    def test_unknown_tool_choice_is_rejected(self, choice: Any) -> None:
        with pytest.raises(TranslationError, match="tool_choice"):
            translate(tools=[WEATHER], tool_choice=choice)

    def test_parallel_tool_calls_false_disables_parallel_tool_use(self) -> None:
        assert translate(tools=[WEATHER], parallel_tool_calls=False)["tool_choice"] == {
            "type": "auto",
            "disable_parallel_tool_use": True,
        }
        assert translate(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)[
            "tool_choice"
        ] == {"type": "any", "disable_parallel_tool_use": True}
        assert translate(tools=[WEATHER], tool_choice="none", parallel_tool_calls=False)["tool_choice"] == {
            "type": "none"
        }


# ---------------------------------------------------------------------------- responses


def anthropic_message(**overrides: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-upstream",
        "content": [{"type": "text", "text": "Hello!"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }
    message.update(overrides)
    return message


class TestResponse:
    def test_text_response(self) -> None:
        assert messages_response_to_chat(anthropic_message(), "caller-model", created=1700000000) == {
            "id": "chatcmpl-msg_01",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "caller-model",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello!", "refusal": None},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        }

    def test_created_defaults_to_now(self) -> None:
        before = int(time.time())
        created = messages_response_to_chat(anthropic_message(), "m")["created"]
        assert before <= created <= int(time.time())

    def test_text_blocks_are_joined_and_thinking_is_dropped(self) -> None:
        resp = anthropic_message(
            content=[
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "The answer "},
                {"type": "text", "text": "is 4."},
            ]
        )
        message = messages_response_to_chat(resp, "m")["choices"][0]["message"]
        assert message["content"] == "The answer is 4."

    def test_tool_use_becomes_tool_calls(self) -> None:
        resp = anthropic_message(
            content=[
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}},
            ],
            stop_reason="tool_use",
        )
        choice = messages_response_to_chat(resp, "m")["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert choice["message"]["content"] == "Let me check."
        calls = choice["message"]["tool_calls"]
        assert calls == [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
            },
            {"id": "toolu_2", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        ]
        assert orjson.loads(calls[0]["function"]["arguments"]) == {"city": "Paris"}

    def test_content_is_null_when_there_is_no_text(self) -> None:
        resp = anthropic_message(
            content=[{"type": "tool_use", "id": "t", "name": "now", "input": {}}], stop_reason="tool_use"
        )
        assert messages_response_to_chat(resp, "m")["choices"][0]["message"]["content"] is None

    @pytest.mark.parametrize(
        ("stop_reason", "finish_reason"),
        [
            ("end_turn", "stop"),
            ("stop_sequence", "stop"),
            ("max_tokens", "length"),
            ("tool_use", "tool_calls"),
            ("refusal", "content_filter"),
            ("something_new", "stop"),
        ],
    )
    def test_finish_reason_mapping(self, stop_reason: str, finish_reason: str) -> None:
        resp = anthropic_message(stop_reason=stop_reason)
        assert messages_response_to_chat(resp, "m")["choices"][0]["finish_reason"] == finish_reason

    def test_cache_tokens_count_as_prompt_tokens(self) -> None:
        resp = anthropic_message(
            usage={
                "input_tokens": 10,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20,
                "output_tokens": 5,
            }
        )
        assert messages_response_to_chat(resp, "m")["usage"] == {
            "prompt_tokens": 130,
            "completion_tokens": 5,
            "total_tokens": 135,
            "prompt_tokens_details": {"cached_tokens": 100},
        }


# ------------------------------------------------------------------------------ streams


def event(kind: str, **fields: Any) -> tuple[str, bytes]:
    return kind, orjson.dumps({"type": kind, **fields})


def feed_all(translator: MessagesStreamTranslator, events: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    for kind, data in events:
        chunks.extend(orjson.loads(payload) for payload in translator.feed(kind, data))
    return chunks


def chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-msg_42",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "caller-model",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        **extra,
    }


MESSAGE_START = event(
    "message_start",
    message={
        "id": "msg_42",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-upstream",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 25, "cache_read_input_tokens": 5, "output_tokens": 1},
    },
)

TEXT_AND_TOOL_STREAM = [
    MESSAGE_START,
    event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    event("ping"),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Let me "}),
    event("content_block_delta", index=0, delta={"type": "text_delta", "text": "check."}),
    event("content_block_stop", index=0),
    event(
        "content_block_start",
        index=1,
        content_block={"type": "tool_use", "id": "toolu_9", "name": "weather", "input": {}},
    ),
    event("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": ""}),
    event("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '{"city": '}),
    event("content_block_delta", index=1, delta={"type": "input_json_delta", "partial_json": '"Paris"}'}),
    event("content_block_stop", index=1),
    event(
        "content_block_start",
        index=2,
        content_block={"type": "tool_use", "id": "toolu_10", "name": "now", "input": {}},
    ),
    event("content_block_stop", index=2),
    event(
        "message_delta", delta={"stop_reason": "tool_use", "stop_sequence": None}, usage={"output_tokens": 40}
    ),
    event("message_stop"),
]


class TestStream:
    def test_full_text_and_tool_use_stream(self) -> None:
        translator = MessagesStreamTranslator("caller-model", include_usage=False, created=1700000000)
        assert feed_all(translator, TEXT_AND_TOOL_STREAM) == [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Let me "}),
            chunk({"content": "check."}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "toolu_9",
                            "type": "function",
                            "function": {"name": "weather", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            chunk(
                {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "toolu_10",
                            "type": "function",
                            "function": {"name": "now", "arguments": ""},
                        }
                    ]
                }
            ),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
            chunk({}, "tool_calls"),
        ]
        assert translator.finished
        assert translator.usage == (30, 40)

    def test_include_usage_adds_null_usage_and_a_final_usage_chunk(self) -> None:
        translator = MessagesStreamTranslator("caller-model", include_usage=True, created=1700000000)
        chunks = feed_all(
            translator,
            [
                MESSAGE_START,
                event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
                event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hi"}),
                event("content_block_stop", index=0),
                event("message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 7}),
                event("message_stop"),
            ],
        )
        assert chunks == [
            chunk({"role": "assistant", "content": ""}, usage=None),
            chunk({"content": "Hi"}, usage=None),
            chunk({}, "length", usage=None),
            {
                "id": "chatcmpl-msg_42",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": "caller-model",
                "choices": [],
                "usage": {
                    "prompt_tokens": 30,
                    "completion_tokens": 7,
                    "total_tokens": 37,
                    "prompt_tokens_details": {"cached_tokens": 5},
                },
            },
        ]

    def test_usage_and_finished_track_progress(self) -> None:
        translator = MessagesStreamTranslator("m", include_usage=False)
        assert translator.usage == (0, 0)
        assert not translator.finished
        translator.feed(*MESSAGE_START)
        assert translator.usage == (30, 1)
        translator.feed(
            *event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": 12})
        )
        assert translator.usage == (30, 12)
        assert not translator.finished
        translator.feed(*event("message_stop"))
        assert translator.finished

    def test_message_delta_input_tokens_update_prompt_usage(self) -> None:
        translator = MessagesStreamTranslator("m", include_usage=False)
        translator.feed(*MESSAGE_START)
        translator.feed(*event("message_delta", delta={}, usage={"input_tokens": 26, "output_tokens": 3}))
        assert translator.usage == (31, 3)

    def test_event_type_may_come_from_the_payload(self) -> None:
        translator = MessagesStreamTranslator("caller-model", include_usage=False, created=1700000000)
        assert [orjson.loads(p) for p in translator.feed(None, MESSAGE_START[1])] == [
            chunk({"role": "assistant", "content": ""})
        ]
        assert translator.feed(None, b'{"type": "ping"}') == []

    def test_ping_and_unknown_events_produce_nothing(self) -> None:
        translator = MessagesStreamTranslator("m", include_usage=False)
        translator.feed(*MESSAGE_START)
        assert translator.feed("ping", b"") == []
        assert translator.feed(*event("brand_new_event", stuff=1)) == []

    def test_thinking_blocks_are_not_forwarded(self) -> None:
        translator = MessagesStreamTranslator("m", include_usage=False)
        translator.feed(*MESSAGE_START)
        thinking = [
            event("content_block_start", index=0, content_block={"type": "thinking", "thinking": ""}),
            event("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "hmm"}),
            event("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "sig"}),
            event("content_block_stop", index=0),
        ]
        assert feed_all(translator, thinking) == []

    def test_missing_stop_reason_still_yields_a_finish_chunk(self) -> None:
        translator = MessagesStreamTranslator("caller-model", include_usage=False, created=1700000000)
        chunks = feed_all(translator, [MESSAGE_START, event("message_stop")])
        assert chunks[-1] == chunk({}, "stop")

    def test_events_after_message_stop_are_ignored(self) -> None:
        translator = MessagesStreamTranslator("m", include_usage=True)
        feed_all(translator, [MESSAGE_START, event("message_stop")])
        assert translator.feed(*event("message_stop")) == []

    def test_error_event_raises_with_message_and_type(self) -> None:
        translator = MessagesStreamTranslator("m", include_usage=False)
        translator.feed(*MESSAGE_START)
        with pytest.raises(UpstreamStreamError, match="Overloaded") as info:
            translator.feed(*event("error", error={"type": "overloaded_error", "message": "Overloaded"}))
        assert info.value.message == "Overloaded"
        assert info.value.error_type == "overloaded_error"

    def test_malformed_event_raises(self) -> None:
        translator = MessagesStreamTranslator("m", include_usage=False)
        with pytest.raises(UpstreamStreamError, match="malformed"):
            translator.feed("message_start", b"{not json")

    def test_content_before_message_start_raises(self) -> None:
        translator = MessagesStreamTranslator("m", include_usage=False)
        with pytest.raises(UpstreamStreamError, match="message_start"):
            translator.feed(*event("content_block_delta", index=0, delta={"type": "text_delta", "text": "x"}))


# ------------------------------------------------------------------------------- errors


class TestErrors:
    @pytest.mark.parametrize(
        ("status", "anthropic_type", "openai_type", "code"),
        [
            (400, "invalid_request_error", "invalid_request_error", None),
            (413, "request_too_large", "invalid_request_error", "request_too_large"),
            (401, "authentication_error", "authentication_error", "invalid_api_key"),
            (403, "permission_error", "permission_error", "permission_denied"),
            (404, "not_found_error", "invalid_request_error", "not_found"),
            (429, "rate_limit_error", "rate_limit_error", "rate_limit_exceeded"),
            (500, "api_error", "server_error", None),
            (529, "overloaded_error", "server_error", "overloaded"),
        ],
    )
    def test_anthropic_error_types_map_to_openai(
        self, status: int, anthropic_type: str, openai_type: str, code: str | None
    ) -> None:
        body = orjson.dumps({"type": "error", "error": {"type": anthropic_type, "message": "details here"}})
        assert anthropic_error_to_openai(status, body) == {
            "error": {"message": "details here", "type": openai_type, "param": None, "code": code}
        }

    @pytest.mark.parametrize(
        ("status", "openai_type"), [(418, "invalid_request_error"), (503, "server_error")]
    )
    def test_unknown_error_type_falls_back_on_status(self, status: int, openai_type: str) -> None:
        body = orjson.dumps({"type": "error", "error": {"type": "novel_error", "message": "odd"}})
        assert anthropic_error_to_openai(status, body)["error"] == {
            "message": "odd",
            "type": openai_type,
            "param": None,
            "code": None,
        }

    def test_error_without_message_gets_a_generic_one(self) -> None:
        body = orjson.dumps({"type": "error", "error": {"type": "overloaded_error"}})
        error = anthropic_error_to_openai(529, body)["error"]
        assert error["message"] == "upstream returned HTTP 529"
        assert error["code"] == "overloaded"

    def test_short_garbage_body_is_quoted(self) -> None:
        assert anthropic_error_to_openai(502, b"Bad Gateway")["error"] == {
            "message": "upstream returned HTTP 502: Bad Gateway",
            "type": "server_error",
            "param": None,
            "code": None,
        }

    def test_large_garbage_body_is_not_echoed(self) -> None:
        body = b"<html>" + b"x" * 10_000 + b"</html>"
        error = anthropic_error_to_openai(503, body)["error"]
        assert error["message"] == "upstream returned HTTP 503"
        assert error["type"] == "server_error"

    @pytest.mark.parametrize("body", [b"", b'{"detail": "nope"}', b"[1, 2]", b"\xff\xfe\x00"])
    def test_non_error_bodies_get_a_generic_message(self, body: bytes) -> None:
        error = anthropic_error_to_openai(400, body)["error"]
        assert error["message"] == "upstream returned HTTP 400"
        assert error["type"] == "invalid_request_error"
