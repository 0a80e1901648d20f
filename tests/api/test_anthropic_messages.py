"""The Anthropic Messages door, driven by the official ``anthropic`` SDK against a real Hearth server.

Model ``m`` is served by an OpenAI-compatible endpoint (the call is translated both ways); model
``claude`` by an Anthropic endpoint (the caller's request passes through natively). Both endpoints are
the fake upstream, which speaks both APIs.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anthropic
import pytest

from hearth.testing.fake_upstream import prompt_tokens_for, reply_text
from hearth.wire.anthropic_request import messages_to_chat
from hearth.wire.tokens import estimate_messages
from tests.support import ADMIN, PRICE, gateway_registry, request_log_row

KEY = "test-key-123"
WEATHER_TOOL = {"name": "get_weather", "description": "The weather in a city.",
                "input_schema": {"type": "object", "properties": {"location": {"type": "string"}},
                                 "required": ["location"]}}


def _registry(fake: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up", "capabilities": ["chat", "streaming", "tools", "vision"]},
                            {"name": "c", "provider": "anthropic-like", "base_url": fake.base_url,
                             "upstream_model": "up-claude", "capabilities": ["chat", "streaming", "tools", "vision"]}],
                           prices=[{"model": "up", "input_per_1m": PRICE, "output_per_1m": PRICE}])
    reg["models"] = [{"name": "m", "endpoints": ["a"]}, {"name": "claude", "endpoints": ["c"]}]
    return reg


def _client(server: Any, **options: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=server.base_url, api_key=KEY, max_retries=0, **options)


async def test_create_is_translated_for_an_openai_endpoint(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    async with _client(server) as client:
        raw = await client.messages.with_raw_response.create(
            model="m", max_tokens=100, system="Be brief.", stop_sequences=["END"], metadata={"user_id": "user-7"},
            messages=[{"role": "user", "content": "Hello"}], extra_body={"temperature": 0.5})
    message = await raw.parse()
    assert message.type == "message" and message.role == "assistant" and message.model == "m"
    assert [b.type for b in message.content] == ["text"] and message.content[0].text == reply_text(20)
    assert message.stop_reason == "end_turn"
    upstream = fake.stats.last_body
    assert fake.stats.by_path == {"/v1/chat/completions": 1}
    assert upstream["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]
    assert upstream["max_tokens"] == 100 and upstream["stop"] == ["END"] and upstream["user"] == "user-7"
    assert upstream["temperature"] == 0.5
    assert message.usage.input_tokens == prompt_tokens_for(upstream["messages"]) and message.usage.output_tokens == 20
    row = await request_log_row(http, server, raw.headers["x-request-id"])
    assert row["route"] == "messages" and row["status"] == 200 and row["end_user"] == "user-7"
    assert row["completion_tokens"] == 20 and raw.headers["request-id"] == raw.headers["x-request-id"]
    scrape = (await http.get(server.base_url + "/metrics")).text
    assert 'hearth_gateway_requests_total{model="m",route="messages",status_class="2xx"} 1.0' in scrape


async def test_stream_text_equals_the_upstreams(fake, hearth_server):
    server = hearth_server(_registry(fake))
    async with _client(server) as client, client.messages.stream(
            model="m", max_tokens=100, messages=[{"role": "user", "content": "Hello"}]) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text == reply_text(20) and final.content[0].text == reply_text(20)
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 20
    assert final.usage.input_tokens == prompt_tokens_for([{"content": "Hello"}])  # the upstream's usage chunk
    assert fake.stats.last_body["stream_options"] == {"include_usage": True}


async def test_stream_events_are_anthropics(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await http.post(server.base_url + "/v1/messages", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                        json={"model": "m", "max_tokens": 3, "stream": True,
                              "messages": [{"role": "user", "content": "Hi"}]})
    names = [line.removeprefix("event: ") for line in r.text.splitlines() if line.startswith("event: ")]
    assert names == ["message_start", "ping", "content_block_start", *["content_block_delta"] * 3,
                     "content_block_stop", "message_delta", "message_stop"]
    assert '"stop_reason":"max_tokens"' in r.text and "[DONE]" not in r.text


@pytest.mark.parametrize("stream", [False, True])
async def test_tools_round_trip(stream, fake, hearth_server):
    fake.set_defaults(tool_call="get_weather")
    server = hearth_server(_registry(fake))
    question = {"role": "user", "content": "Weather in Paris?"}
    async with _client(server) as client:
        if stream:
            async with client.messages.stream(model="m", max_tokens=100, tools=[WEATHER_TOOL],
                                              messages=[question]) as s:
                first = await s.get_final_message()
        else:
            first = await client.messages.create(model="m", max_tokens=100, tools=[WEATHER_TOOL], messages=[question])
        assert first.stop_reason == "tool_use"
        call = first.content[-1]
        assert call.type == "tool_use" and call.name == "get_weather" and call.input == {"location": "Paris"}
        offered = fake.stats.last_body["tools"]
        assert offered == [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a "
                            "city.", "parameters": WEATHER_TOOL["input_schema"]}}]
        second = await client.messages.create(model="m", max_tokens=100, tools=[WEATHER_TOOL], messages=[
            question, {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "Sunny, 21 C"}]}])
    assert second.stop_reason == "end_turn" and second.content[0].text == reply_text(20)
    turns = fake.stats.last_body["messages"]
    assert turns[1]["tool_calls"][0]["id"] == call.id and turns[1]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert turns[2] == {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 C"}


async def test_images_and_system_blocks_are_translated(fake, hearth_server):
    server = hearth_server(_registry(fake))
    async with _client(server) as client:
        await client.messages.create(model="m", max_tokens=10, system=[{"type": "text", "text": "A"},
                                                                        {"type": "text", "text": "B"}], messages=[
            {"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                {"type": "text", "text": "What is this?"}]}])
    sent = fake.stats.last_body["messages"]
    assert sent[0] == {"role": "system", "content": "A\n\nB"}
    assert sent[1]["content"] == [{"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                                  {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                                  {"type": "text", "text": "What is this?"}]


async def test_count_tokens_estimates_or_asks_an_anthropic_endpoint(fake, hearth_server):
    server = hearth_server(_registry(fake))
    messages = [{"role": "user", "content": "How many tokens is this sentence?"}]
    async with _client(server) as client:
        estimated = await client.messages.count_tokens(model="m", messages=messages, system="Be brief.")
        counted = await client.messages.count_tokens(model="claude", messages=messages, system="Be brief.")
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.count_tokens(model="nope", messages=messages)
    chat = messages_to_chat({"max_tokens": 1, "messages": messages, "system": "Be brief."})
    assert estimated.input_tokens == estimate_messages(chat["messages"])
    assert counted.input_tokens == prompt_tokens_for(messages, "Be brief.")
    assert fake.stats.by_path == {"/v1/messages/count_tokens": 1}
    assert fake.stats.last_body["model"] == "up-claude"


async def test_errors_are_in_anthropics_format(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    async with _client(server) as client:
        with pytest.raises(anthropic.BadRequestError) as bad:
            await client.messages.create(model="m", max_tokens=0, messages=[{"role": "user", "content": "x"}])
        with pytest.raises(anthropic.NotFoundError) as missing:
            await client.messages.create(model="zz", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert bad.value.body == {"type": "error", "error": {"type": "invalid_request_error", "code": "invalid_request",
                                                         "message": "max_tokens: required: a positive integer."},
                              "request_id": bad.value.response.headers["x-request-id"]}
    assert missing.value.body["error"]["type"] == "not_found_error"
    async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="wrong", max_retries=0) as client:
        with pytest.raises(anthropic.AuthenticationError) as denied:
            await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert denied.value.body["error"]["type"] == "authentication_error"
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}
    keyless = await http.post(server.base_url + "/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"})
    assert keyless.status_code == 401 and keyless.json()["error"]["type"] == "authentication_error"
    assert "x-api-key" in keyless.json()["error"]["message"]
    for version, fragment in ((None, "is required"), ("june", "not a version"), ("2023-02-30", "not a version"),
                              ("2022-12-31", "not a version")):
        headers = {"x-api-key": KEY, **({"anthropic-version": version} if version else {})}
        r = await http.post(server.base_url + "/v1/messages", json=body, headers=headers)
        assert r.status_code == 400 and r.json()["type"] == "error" and fragment in r.json()["error"]["message"]
    r = await http.post(server.base_url + "/v1/messages", content=b"{nope",
                        headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"})
    error = r.json()["error"]
    assert r.status_code == 400 and (error["type"], error["code"]) == ("invalid_request_error", "invalid_json")
    assert fake.stats.requests == 0


async def test_claude_codes_bearer_token_is_a_caller_key(fake, hearth_server):
    server = hearth_server(_registry(fake))
    async with anthropic.AsyncAnthropic(base_url=server.base_url, auth_token=KEY, max_retries=0) as client:
        message = await client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert message.content[0].text == reply_text(5)


async def test_a_mid_stream_failure_ends_with_an_error_event(fake, hearth_server, http):
    fake.set_defaults(error_after_chunks=2)
    server = hearth_server(_registry(fake))
    r = await http.post(server.base_url + "/v1/messages", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                        json={"model": "m", "max_tokens": 50, "stream": True,
                              "messages": [{"role": "user", "content": "Hi"}]})
    events = r.text.strip().split("\n\n")
    assert events[-1].startswith("event: error\ndata: ") and '"code":"upstream_stream_error"' in events[-1]
    assert '"type":"api_error"' in events[-1] and "message_stop" not in r.text


async def test_native_pass_through_sends_the_callers_body(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    body = {"model": "claude", "max_tokens": 50, "system": [{"type": "text", "text": "S",
                                                            "cache_control": {"type": "ephemeral"}}],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}]}]}
    async with _client(server, default_headers={"anthropic-beta": "prompt-caching-2024-07-31"}) as client:
        raw = await client.messages.with_raw_response.create(**body, extra_body={"top_k": 5})
    message = await raw.parse()
    assert fake.stats.by_path == {"/v1/messages": 1}
    assert fake.stats.last_body == {**body, "top_k": 5, "model": "up-claude", "stream": False}
    assert fake.stats.last_headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    assert fake.stats.last_headers["anthropic-version"] == raw.http_request.headers["anthropic-version"]
    assert message.id.startswith("msg_fake_") and message.model == "claude"  # Anthropic's own answer, model renamed
    assert message.content[0].text == reply_text(20)
    row = await request_log_row(http, server, raw.headers["x-request-id"])
    assert row["route"] == "messages" and row["endpoint"] == "c"
    assert row["prompt_tokens"] == message.usage.input_tokens and row["completion_tokens"] == 20


async def test_native_streams_relay_anthropics_events(fake, hearth_server):
    fake.set_defaults(tool_call="get_weather")
    server = hearth_server(_registry(fake))
    async with _client(server) as client:
        async with client.messages.stream(model="claude", max_tokens=100,
                                          messages=[{"role": "user", "content": "Hi"}]) as stream:
            text = "".join([piece async for piece in stream.text_stream])
            final = await stream.get_final_message()
        assert text == reply_text(20) and final.model == "claude" and final.usage.output_tokens == 20
        async with client.messages.stream(model="claude", max_tokens=100, tools=[WEATHER_TOOL],
                                          messages=[{"role": "user", "content": "Weather?"}]) as stream:
            called = await stream.get_final_message()
    assert called.stop_reason == "tool_use" and called.content[0].input == {"location": "Paris"}


async def test_features_only_anthropic_serves_need_a_native_endpoint(fake, hearth_server):
    server = hearth_server(_registry(fake))
    search = {"type": "web_search_20250305", "name": "web_search", "max_uses": 1}
    async with _client(server) as client:
        with pytest.raises(anthropic.BadRequestError) as refused:
            await client.messages.create(model="m", max_tokens=5, tools=[search],
                                         messages=[{"role": "user", "content": "x"}])
        assert refused.value.body["error"]["code"] == "unsupported_feature"
        assert "tools.0.type" in refused.value.body["error"]["message"]
        await client.messages.create(model="claude", max_tokens=5, tools=[search],
                                     messages=[{"role": "user", "content": "x"}])
    assert fake.stats.by_path == {"/v1/messages": 1} and fake.stats.last_body["tools"] == [search]


async def test_one_budget_is_spent_through_chat_and_messages(database_url, fake, hearth_server, http):
    reg = _registry(fake)
    reg["budgets"] = [{"name": "daily", "caller": "tester", "scope": "caller", "period": "day", "unit": "tokens",
                       "limit": 150}]
    server = hearth_server(reg, database_url=database_url)
    chat = await http.post(server.base_url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY}"},
                           json={"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "x"}]})
    async with _client(server) as client:
        first = await client.messages.create(model="m", max_tokens=20, messages=[{"role": "user", "content": "x"}])
        with pytest.raises(anthropic.RateLimitError) as refused:
            await client.messages.create(model="m", max_tokens=120, messages=[{"role": "user", "content": "x"}])
        with pytest.raises(anthropic.RateLimitError):
            async with client.messages.stream(model="m", max_tokens=120,
                                              messages=[{"role": "user", "content": "x"}]) as stream:
                await stream.get_final_message()
    error = refused.value.body["error"]
    assert error["type"] == "billing_error" and error["code"] == "budget_exhausted"
    assert refused.value.response.headers["x-should-retry"] == "false"
    assert fake.stats.requests == 2
    budgets = (await http.get(server.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
    used = next(b for b in budgets if b["budget"] == "daily")["used"]
    # both doors' calls settled with their real usage, in the one budget
    assert used == chat.json()["usage"]["total_tokens"] + first.usage.input_tokens + first.usage.output_tokens


@pytest.mark.parametrize("model", ["m", "claude"])
async def test_a_client_leaving_a_stream_closes_the_upstream(model, fake, hearth_server, http):
    fake.set_defaults(chunk_delay_ms=200)  # 20 chunks: four seconds
    server = hearth_server(_registry(fake))
    headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "X-Request-Id": f"leave-{model}"}
    body = {"model": model, "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "Hi"}]}
    async with http.stream("POST", server.base_url + "/v1/messages", json=body, headers=headers) as r:
        async for chunk in r.aiter_bytes():
            assert chunk.startswith(b"event: message_start")
            break
    left = time.monotonic()
    while not (fake.stats.disconnects == 1 and fake.stats.in_flight == 0):  # closed within a second
        assert time.monotonic() - left < 1.0, f"upstream request still open: {fake.stats}"
        await asyncio.sleep(0.01)
    row = await request_log_row(http, server, f"leave-{model}")
    assert (row["status"], row["error_code"], row["route"]) == (499, "client_disconnected", "messages")


async def test_native_tool_use_round_trip(fake, hearth_server):
    fake.set_defaults(tool_call="get_weather")
    server = hearth_server(_registry(fake))
    question = {"role": "user", "content": "Weather in Paris?"}
    async with _client(server) as client:
        first = await client.messages.create(model="claude", max_tokens=100, tools=[WEATHER_TOOL],
                                             messages=[question])
        call = first.content[0]
        assert first.stop_reason == "tool_use" and call.type == "tool_use" and call.input == {"location": "Paris"}
        result = {"type": "tool_result", "tool_use_id": call.id, "content": "Sunny"}
        second = await client.messages.create(model="claude", max_tokens=100, tools=[WEATHER_TOOL], messages=[
            question, {"role": "assistant", "content": first.content}, {"role": "user", "content": [result]}])
    assert second.content[0].text == reply_text(20)
    assert fake.stats.last_body["messages"][2] == {"role": "user", "content": [result]}  # as the caller sent it


def _mixed_registry(fake: Any) -> dict[str, Any]:
    """Model ``mix``: the Anthropic endpoint ``c`` first, the OpenAI-compatible ``a`` second."""
    reg = _registry(fake)
    for ep in reg["endpoints"]:
        ep["priority"] = 0 if ep["name"] == "c" else 1
    reg["models"].append({"name": "mix", "endpoints": ["a", "c"]})
    return reg


async def test_failover_from_a_native_endpoint_to_a_translated_one(fake, hearth_server):
    fake.script({"status": 500})  # the first attempt (Anthropic endpoint `c`) fails
    server = hearth_server(_mixed_registry(fake))
    async with _client(server) as client:
        raw = await client.messages.with_raw_response.create(model="mix", max_tokens=20,
                                                             messages=[{"role": "user", "content": "x"}])
    message = await raw.parse()
    assert fake.stats.by_path == {"/v1/messages": 1, "/v1/chat/completions": 1}
    assert raw.headers["x-hearth-endpoint"] == "a" and raw.headers["x-hearth-attempts"] == "2"
    assert message.content[0].text == reply_text(20) and message.model == "mix"  # translated back


async def test_native_only_features_skip_the_models_other_endpoints(fake, hearth_server):
    server = hearth_server(_mixed_registry(fake))
    search = {"type": "web_search_20250305", "name": "web_search"}
    async with _client(server) as client:
        fake.script({"status": 500})
        with pytest.raises(anthropic.InternalServerError):  # no failover to `a`: it cannot serve the search
            await client.messages.create(model="mix", max_tokens=5, tools=[search],
                                         messages=[{"role": "user", "content": "x"}])
    assert fake.stats.by_path == {"/v1/messages": 1}


async def test_a_stream_failing_after_its_keep_alives_ends_with_an_anthropic_error_event(fake, hearth_server, http):
    fake.set_defaults(status=500, latency_ms=600)  # the stream has started (keep-alives) when the upstream fails
    server = hearth_server(_registry(fake), sse_keepalive_s=0.2)
    r = await http.post(server.base_url + "/v1/messages", headers={"x-api-key": KEY, "anthropic-version": "2023-06-01"},
                        json={"model": "m", "max_tokens": 50, "stream": True,
                              "messages": [{"role": "user", "content": "Hi"}]})
    assert r.status_code == 200 and r.text.startswith(": keep-alive\n\n")
    last = r.text.strip().split("\n\n")[-1]
    assert last.startswith("event: error\ndata: ") and '"type":"error"' in last and '"code":"upstream_error"' in last


async def test_anthropic_clients_list_models_in_anthropics_format(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    async with _client(server) as client:
        page = await client.models.list()
    assert [m.id for m in page.data] == ["claude", "m"] and all(m.type == "model" for m in page.data)
    openai_list = (await http.get(server.base_url + "/v1/models", headers={"Authorization": f"Bearer {KEY}"})).json()
    assert openai_list["object"] == "list" and [m["id"] for m in openai_list["data"]] == ["claude", "m"]
    async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="wrong", max_retries=0) as client:
        with pytest.raises(anthropic.AuthenticationError) as denied:
            await client.models.list()
    assert denied.value.body["error"]["type"] == "authentication_error"
