"""The Responses API and legacy completions, driven by the official `openai` SDK against a real Hearth server
with the fake upstream behind it: create, chain, stream, retrieve, delete, ownership, completions, and the
gateway core's budgets and limits on both doors."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hearth.testing.fake_upstream import prompt_tokens_for, reply_text
from tests.support import ADMIN, AUTH, REDIS_URL, budget_registry, gateway_registry, request_log_row

OTHER_KEY = "other-key-456"


def _registry(fake: Any, **caller_limits: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up", "max_concurrency": 100,
                             "capabilities": ["chat", "streaming", "tools", "json", "vision"]}])
    reg["callers"] = [{"name": "tester", "key": "test-key-123", **({"limits": caller_limits} if caller_limits else {})},
                      {"name": "other", "key": OTHER_KEY}]
    return reg


def _client(server: Any, key: str = "test-key-123") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0)


async def test_create_answers_with_the_upstream_text_and_mapped_usage(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=7)
    async with _client(server) as client:
        response = await client.responses.create(model="m", input="Tell me something")
    assert response.object == "response" and response.status == "completed" and response.model == "m"
    assert response.id.startswith("resp_")
    assert response.output_text == reply_text(7)
    prompt = prompt_tokens_for([{"role": "user", "content": "Tell me something"}])
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (prompt, 7)
    assert response.usage.total_tokens == prompt + 7
    assert fake.stats.by_path == {"/v1/chat/completions": 1}
    assert fake.stats.last_body["messages"] == [{"role": "user", "content": "Tell me something"}]


async def test_instructions_and_options_reach_the_upstream_as_a_chat_body(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    async with _client(server) as client:
        response = await client.responses.create(
            model="m", instructions="Answer in French.", max_output_tokens=5, temperature=0.5,
            input=[{"role": "user", "content": [{"type": "input_text", "text": "Hi"},
                                                {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}],
            text={"format": {"type": "json_schema", "name": "answer", "schema": {"type": "object"}, "strict": True}})
    sent = fake.stats.last_body
    assert sent["messages"] == [
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    assert sent["max_tokens"] == 5 and sent["temperature"] == 0.5
    assert sent["response_format"] == {"type": "json_schema", "json_schema": {"name": "answer",
                                                                             "schema": {"type": "object"},
                                                                             "strict": True}}
    # the upstream's answer was cut by the limit: incomplete, as OpenAI reports it
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.instructions == "Answer in French." and response.max_output_tokens == 5


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
async def test_previous_response_id_sends_the_earlier_turns_upstream(database, fake, hearth_server, http, request,
                                                                     tmp_path):
    url = (request.getfixturevalue("postgres_url") if database == "postgres"
           else f"sqlite+aiosqlite:///{tmp_path}/h.db")
    server = hearth_server(_registry(fake), database_url=url)
    fake.set_defaults(chunks=3)
    async with _client(server) as client:
        first = await client.responses.create(model="m", instructions="Be brief.", input="My name is Ada.")
        second = await client.responses.create(model="m", input="What is my name?", previous_response_id=first.id)
        assert fake.stats.last_body["messages"] == [
            {"role": "user", "content": "My name is Ada."},
            {"role": "assistant", "content": reply_text(3)},
            {"role": "user", "content": "What is my name?"}]  # the first turn's instructions are not carried
        await client.responses.create(model="m", input="And again?", previous_response_id=second.id)
    assert [m["content"] for m in fake.stats.last_body["messages"]] == [
        "My name is Ada.", reply_text(3), "What is my name?", reply_text(3), "And again?"]
    assert second.previous_response_id == first.id


async def test_stream_helper_gives_the_upstream_text_with_typed_numbered_events(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=6, split="bytes")
    async with _client(server) as client:
        async with client.responses.stream(model="m", input="Stream to me") as stream:
            events = [event async for event in stream]
            final = await stream.get_final_response()
        kinds = [e.type for e in events]
        assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                             "response.content_part.added"]
        assert kinds[4:10] == ["response.output_text.delta"] * 6
        assert kinds[10:] == ["response.output_text.done", "response.content_part.done",
                              "response.output_item.done", "response.completed"]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == reply_text(6)
        assert final.output_text == reply_text(6) and final.status == "completed"
        assert final.usage is not None and final.usage.output_tokens == 6
        # a streamed response is stored like any other, before its final event: it can be read and continued
        stored = await client.responses.retrieve(final.id)
        assert stored.output_text == reply_text(6)
        raw = await client.responses.create(model="m", input="next", previous_response_id=final.id, stream=True)
        texts = [e.delta async for e in raw if e.type == "response.output_text.delta"]
    assert "".join(texts) == reply_text(6)
    assert fake.stats.last_body["messages"][1] == {"role": "assistant", "content": reply_text(6)}


async def test_a_mid_stream_upstream_error_ends_with_response_failed(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=6, error_after_chunks=2)
    async with _client(server) as client:
        stream = await client.responses.create(model="m", input="x", stream=True)
        events = [e async for e in stream]
    assert events[-1].type == "response.failed"
    assert events[-1].response.error is not None and events[-1].response.error.code == "upstream_stream_error"
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_retrieve_delete_and_store_false(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    async with _client(server) as client:
        kept = await client.responses.create(model="m", input="keep me")
        again = await client.responses.retrieve(kept.id)
        assert again.id == kept.id and again.output_text == kept.output_text
        await client.responses.delete(kept.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(kept.id)
        with pytest.raises(openai.NotFoundError):
            await client.responses.delete(kept.id)
        unstored = await client.responses.create(model="m", input="forget me", store=False)
        assert unstored.store is False
        with pytest.raises(openai.NotFoundError):
            await client.responses.retrieve(unstored.id)
        with pytest.raises(openai.NotFoundError) as chained:
            await client.responses.create(model="m", input="x", previous_response_id=unstored.id)
    assert chained.value.body["param"] == "previous_response_id"  # type: ignore[index]


async def test_another_caller_cannot_see_delete_or_continue_a_response(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    async with _client(server) as mine, _client(server, OTHER_KEY) as theirs:
        response = await mine.responses.create(model="m", input="private")
        calls = fake.stats.requests
        with pytest.raises(openai.NotFoundError):
            await theirs.responses.retrieve(response.id)
        with pytest.raises(openai.NotFoundError):
            await theirs.responses.delete(response.id)
        with pytest.raises(openai.NotFoundError):
            await theirs.responses.create(model="m", input="x", previous_response_id=response.id)
        assert fake.stats.requests == calls  # refused before any model call
        assert (await mine.responses.retrieve(response.id)).id == response.id  # still there for its owner


async def test_function_tools_and_their_outputs_map_to_chat_tool_calls(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    tool = {"type": "function", "name": "get_weather", "description": "Weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": False}
    async with _client(server) as client:
        await client.responses.create(model="m", tools=[tool], tool_choice={"type": "function", "name": "get_weather"},
                                      input=[{"role": "user", "content": "Weather in Paris?"},
                                             {"type": "function_call", "call_id": "call_1", "name": "get_weather",
                                              "arguments": '{"city":"Paris"}'},
                                             {"type": "function_call_output", "call_id": "call_1",
                                              "output": '{"temp":21}'}])
    sent = fake.stats.last_body
    assert sent["tools"] == [{"type": "function", "function": {
        "name": "get_weather", "description": "Weather of a city", "parameters": tool["parameters"], "strict": False}}]
    assert sent["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert sent["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp":21}'}]


@pytest.mark.parametrize(("extra", "param"), [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type"),
    ({"background": True}, "background"),
    ({"include": ["file_search_call.results"]}, "include"),
    ({"truncation": "auto"}, "truncation"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]}, "input[0].content[0].type"),
    ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"temperature": 3}, "temperature"),
    ({"made_up": 1}, "made_up"),
    ({"input": []}, "input"),
])
async def test_unsupported_or_invalid_parameters_are_400s_naming_them(extra, param, fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    body = {"model": "m", "input": "x", **extra}
    r = await http.post(server.base_url + "/v1/responses", json=body, headers=AUTH)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert fake.stats.requests == 0


async def test_legacy_completions_answer_text_completions(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=5)
    async with _client(server) as client:
        completion = await client.completions.create(model="m", prompt="Say this is a test", max_tokens=16)
        assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
        assert completion.choices[0].text == reply_text(5) and completion.choices[0].finish_reason == "stop"
        assert completion.model == "m" and completion.usage is not None and completion.usage.completion_tokens == 5
        assert fake.stats.last_body["messages"] == [{"role": "user", "content": "Say this is a test"}]
        stream = await client.completions.create(model="m", prompt="Stream it", stream=True,
                                                 stream_options={"include_usage": True})
        chunks = [c async for c in stream]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == reply_text(5)
    assert {c.object for c in chunks} == {"text_completion"}
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 5
    r = await http.post(server.base_url + "/v1/completions", json={"model": "m", "prompt": "x", "echo": True},
                        headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"


async def test_each_door_has_its_own_route_in_the_request_log_and_metrics(fake, hearth_server, http):
    server = hearth_server(_registry(fake), metrics_cache_s=0.01)
    before = await _route_counts(http, server)
    r = await http.post(server.base_url + "/v1/responses", json={"model": "m", "input": "x"}, headers=AUTH)
    c = await http.post(server.base_url + "/v1/completions", json={"model": "m", "prompt": "x"}, headers=AUTH)
    assert (await request_log_row(http, server, r.headers["x-request-id"]))["route"] == "responses"
    assert (await request_log_row(http, server, c.headers["x-request-id"]))["route"] == "completions"
    wanted = {route: before.get(route, 0.0) + 1 for route in ("responses", "completions")}
    for _ in range(60):  # the scrape is cached (metrics_cache_s): poll up to 3 s
        counts = await _route_counts(http, server)
        if all(counts.get(route) == n for route, n in wanted.items()):
            break
        await asyncio.sleep(0.05)
    assert {route: counts.get(route) for route in wanted} == wanted


async def _route_counts(http: Any, server: Any) -> dict[str, float]:
    """``hearth_gateway_requests_total`` of model m, 2xx, by route (the registry is the process's: other tests'
    servers in this process count in it too)."""
    scrape = (await http.get(server.base_url + "/metrics")).text
    return {s.labels["route"]: s.value for f in text_string_to_metric_families(scrape) for s in f.samples
            if s.name == "hearth_gateway_requests_total" and s.labels.get("model") == "m"
            and s.labels.get("status_class") == "2xx"}


async def test_a_budget_refuses_responses_and_completions_in_openai_format(fake, hearth_server, http):
    server = hearth_server(budget_registry(fake, limit=0.001))  # less than one call's reservation
    async with _client(server) as client:
        with pytest.raises(openai.RateLimitError) as created:
            await client.responses.create(model="m", input="hello", max_output_tokens=20)
        with pytest.raises(openai.RateLimitError) as streamed:
            await client.responses.create(model="m", input="hello", max_output_tokens=20, stream=True)
        with pytest.raises(openai.RateLimitError) as completed:
            await client.completions.create(model="m", prompt="hello", max_tokens=20)
    for refused in (created.value, streamed.value, completed.value):
        assert refused.code == "budget_exhausted" and refused.type == "insufficient_quota"
        assert refused.response.headers["x-should-retry"] == "false"
    assert fake.stats.requests == 0


async def test_caller_rate_limits_hold_on_the_responses_door(fake, hearth_server, http):
    server = hearth_server(_registry(fake, caller={"rpm": 2}), limit_wait_s=0)
    async with _client(server) as client:
        await client.responses.create(model="m", input="one")
        await client.completions.create(model="m", prompt="two")  # the same caller's limit, through another door
        with pytest.raises(openai.RateLimitError) as refused:
            await client.responses.create(model="m", input="three")
    assert refused.value.code == "caller_rpm_exceeded"
    assert fake.stats.requests == 2


async def test_a_response_answered_by_one_process_is_continued_at_once_by_another(fake, hearth_server, tmp_path,
                                                                                  redis_prefix):
    shared = {"database_url": f"sqlite+aiosqlite:///{tmp_path}/shared.db", "state_backend": "redis",
              "redis_url": REDIS_URL, "redis_prefix": redis_prefix}
    one = hearth_server(_registry(fake), **shared)
    two = hearth_server(_registry(fake), **shared)
    fake.set_defaults(chunks=2)
    async with _client(one) as first, _client(two) as second:
        for turn in range(5):  # the write may still be under way in `one` when `two` is asked
            created = await first.responses.create(model="m", input=f"turn {turn}")
            chained = await second.responses.create(model="m", input="next", previous_response_id=created.id)
            assert fake.stats.last_body["messages"][0] == {"role": "user", "content": f"turn {turn}"}
            assert (await second.responses.retrieve(chained.id)).id == chained.id


@pytest.mark.parametrize(("path", "body"), [("/v1/responses", {"model": "m", "input": "x"}),
                                            ("/v1/responses", {"model": "m", "input": "x", "stream": True}),
                                            ("/v1/completions", {"model": "m", "prompt": "x"})])
async def test_a_client_that_leaves_closes_the_upstream_call_at_once(path, body, fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(latency_ms=5000.0)
    rid = f"leaving-{path.rsplit('/', 1)[1]}-{bool(body.get('stream'))}"
    with pytest.raises(httpx.ReadTimeout):
        await http.post(server.base_url + path, json=body, headers={**AUTH, "X-Request-Id": rid}, timeout=0.3)
    left = time.monotonic()
    for _ in range(75):
        if fake.stats.disconnects:
            break
        await asyncio.sleep(0.02)
    assert fake.stats.disconnects == 1 and time.monotonic() - left < 1.5  # the upstream request was closed
    row = await request_log_row(http, server, rid)
    assert (row["status"], row["error_code"]) == (499, "client_disconnected")


async def test_an_anthropic_endpoint_serves_the_responses_door(fake, hearth_server, http):
    reg = gateway_registry([{"name": "claude", "provider": "anthropic-like", "base_url": fake.base_url,
                             "upstream_model": "fake-claude"}])
    server = hearth_server(reg)
    fake.set_defaults(chunks=4)
    async with _client(server) as client:
        response = await client.responses.create(model="m", instructions="Be brief.", input="Hello")
        async with client.responses.stream(model="m", input="Hello") as stream:
            final = await stream.get_final_response()
    assert response.output_text == reply_text(4) and final.output_text == reply_text(4)
    assert fake.stats.by_path == {"/v1/messages": 2}
    assert response.usage is not None and response.usage.output_tokens == 4


async def test_a_malformed_upstream_stream_ends_the_responses_stream_with_response_failed(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    fake.set_defaults(chunks=4, malformed=True)
    async with _client(server) as client:
        stream = await client.responses.create(model="m", input="x", stream=True)
        events = [e async for e in stream]
    assert events[-1].type == "response.failed"
    assert events[-1].response.error is not None and events[-1].response.error.code == "upstream_stream_interrupted"
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_one_budget_is_spent_through_the_chat_responses_and_completions_doors(fake, hearth_server, http):
    server = hearth_server(budget_registry(fake, 100_000, unit="tokens"))
    async with _client(server) as client:
        chat = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "one"}])
        response = await client.responses.create(model="m", input="two")
        completion = await client.completions.create(model="m", prompt="three")
    assert chat.usage is not None and response.usage is not None and completion.usage is not None
    spent = chat.usage.total_tokens + response.usage.total_tokens + completion.usage.total_tokens
    for _ in range(60):  # settlements are recorded asynchronously: poll up to 3 s
        items = (await http.get(server.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
        if items[0]["used"] == spent:
            break
        await asyncio.sleep(0.05)
    assert items[0]["used"] == spent


async def test_a_scene_names_the_model_and_caps_max_output_tokens(fake, hearth_server, http):
    reg = _registry(fake)
    reg["scenes"] = [{"name": "chat", "default_model": "m", "max_tokens_cap": 8}]
    server = hearth_server(reg)
    scene = {**AUTH, "X-Hearth-Scene": "chat"}
    r = await http.post(server.base_url + "/v1/responses", json={"input": "no model named"}, headers=scene)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "m" and fake.stats.last_body["max_tokens"] == 8
    over = await http.post(server.base_url + "/v1/responses", json={"input": "x", "max_output_tokens": 9},
                           headers=scene)
    assert over.status_code == 400 and over.json()["error"]["code"] == "scene_max_tokens_exceeded"


async def test_the_simulated_provider_answers_the_responses_door_offline(hearth_server, http):
    server = hearth_server(gateway_registry([{"name": "s", "provider": "sim", "upstream_model": "sim-1"}]))
    async with _client(server) as client:
        response = await client.responses.create(model="m", input="Hello, Hearth!")
        async with client.responses.stream(model="m", input="Hello, Hearth!") as stream:
            final = await stream.get_final_response()
    assert "[simulated]" in response.output_text and response.status == "completed"
    assert "[simulated]" in final.output_text
