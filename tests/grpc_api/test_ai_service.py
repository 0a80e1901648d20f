"""hearth.v1.AiService over a real gRPC connection, with a client generated from the .proto and the fake
upstream behind Hearth: the same core as the HTTP door (answers, auth, budgets, logs), its errors as
gRPC statuses with the stable code in the trailers."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import grpc
import orjson
import pytest

from hearth.auth.signing import signed_headers
from hearth.testing.fake_clock import RunningClock
from hearth.testing.fake_upstream import reply_pieces, reply_text
from hearth.v1 import ai_service_pb2 as pb
from tests.support import (
    AUTH,
    SIGNING_KEY,
    budget_registry,
    chat_body,
    gateway_registry,
    request_log_row,
    reservation_tokens,
    signing_registry,
)

KEY = (("authorization", AUTH["Authorization"]),)


def _registry(fake: Any) -> dict[str, Any]:
    return gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                              "upstream_model": "up", "max_concurrency": 100}])


def _chat(content: str = "hello", **extra: Any) -> pb.ChatRequest:
    return pb.ChatRequest(model="m", messages=[pb.ChatMessage(role="user", content=content)], **extra)


def _trailer(exc: grpc.aio.AioRpcError, name: str) -> str | None:
    return next((v for k, v in exc.trailing_metadata() or () if k == name), None)


async def _sse_text(http: Any, base_url: str, body: dict[str, Any]) -> str:
    """The answer's text as an SSE caller of /v1/chat/completions receives it."""
    text = []
    async with http.stream("POST", base_url + "/v1/chat/completions", json={**body, "stream": True},
                           headers=AUTH) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for choice in orjson.loads(line[6:]).get("choices", []):
                    text.append(choice["delta"].get("content") or "")
    return "".join(text)


async def test_stream_chat_receives_the_same_text_as_the_sse_route(fake, grpc_hearth, http):
    fake.set_defaults(chunks=12, split="bytes")  # events cut mid-character on the upstream side
    door = grpc_hearth(_registry(fake))
    sse = await _sse_text(http, door.server.base_url, chat_body("the same prompt"))
    deltas, ends = [], []
    async for chunk in door.stub.StreamChat(_chat("the same prompt"), metadata=KEY):
        assert not ends, "nothing comes after the final message"
        deltas.append(chunk.delta)
        if chunk.HasField("done"):
            ends.append(chunk.done)
    assert "".join(deltas) == sse == reply_text(12)
    assert len(ends) == 1  # text deltas (those that came together in one), the last one with `done`
    assert ends[0].finish_reason == "stop" and ends[0].model == "m"
    assert ends[0].usage.completion_tokens == 12 and ends[0].usage.total_tokens > 12
    row = await request_log_row(http, door.server, ends[0].request_id)
    assert (row["route"], row["status"], row["stream"], row["completion_tokens"]) == ("grpc", 200, True, 12)


async def test_unary_chat_answers_through_the_gateway_and_is_logged_as_grpc(fake, grpc_hearth, http):
    door = grpc_hearth(_registry(fake))
    call = door.stub.Chat(_chat(temperature=0.5, max_tokens=5),
                          metadata=(*KEY, ("x-request-id", "grpc-unary-1"), ("x-hearth-user", "alice")))
    response = await call
    assert response.content == reply_text(5) and response.finish_reason in ("stop", "length")
    assert response.model == "m"  # the public name, not the upstream's `up`
    assert response.usage.completion_tokens == 5 and response.request_id == "grpc-unary-1"
    assert ("x-request-id", "grpc-unary-1") in tuple(await call.trailing_metadata())
    sent = fake.stats.last_body
    assert sent["temperature"] == 0.5 and sent["max_tokens"] == 5 and sent["model"] == "up"
    row = await request_log_row(http, door.server, "grpc-unary-1")
    assert (row["route"], row["status"], row["end_user"], row["caller"]) == ("grpc", 200, "alice", "tester")


async def test_a_capability_call_runs_the_capability_service(fake, grpc_hearth, http):
    door = grpc_hearth(_registry(fake))
    response = await door.stub.Summarize(pb.SummarizeRequest(text="Hearth is a service. It relays calls.", model="m",
                                                             max_sentences=2), metadata=KEY)
    assert response.text == reply_text(20) and response.model == "m" and not response.degraded
    assert response.data["summary"] == response.text and response.data["prompt_code"] == "summary"
    assert response.usage.completion_tokens == 20
    assert "Hearth is a service" in orjson.dumps(fake.stats.last_body["messages"]).decode()
    row = await request_log_row(http, door.server, response.request_id, route="capability")
    assert (row["route"], row["capability"], row["status"]) == ("capability", "summarize", 200)


async def test_extract_takes_an_inline_schema_with_integral_numbers(fake, grpc_hearth):
    fake.set_defaults(content='{"order": 42, "name": "Alice"}')
    door = grpc_hearth(_registry(fake))
    request = pb.ExtractRequest(text="Order 42 shipped to Alice.", model="m")
    request.schema.update({"type": "object", "properties": {"order": {"type": "integer", "maximum": 100},
                                                            "name": {"type": "string"}},
                           "required": ["order", "name"]})
    response = await door.stub.Extract(request, metadata=KEY)
    assert response.data["data"] == {"order": 42, "name": "Alice"}


async def test_role_chat_is_idempotent_per_request_id_as_on_http(fake, grpc_hearth):
    door = grpc_hearth(_registry(fake))
    request = pb.RoleChatRequest(messages=[pb.RoleChatMessage(role="user", content="Hi")], model="m",
                                 request_id="role-chat-1")
    first = await door.stub.RoleChat(request, metadata=KEY)
    again = await door.stub.RoleChat(request, metadata=KEY)
    assert first.text == again.text == reply_text(20)
    assert first.data["message"]["role"] == "assistant" and first.data["prompt_code"] == "chat_assistant"
    assert fake.stats.requests == 1  # the repeat got the stored answer


async def test_scenes_rule_grpc_calls_as_http_ones(fake, grpc_hearth, http):
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"},
                                 {"name": "b", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up-other"}])
    registry["models"] = [{"name": "m", "endpoints": ["a"]}, {"name": "other", "endpoints": ["b"]}]
    registry["scenes"] = [{"name": "summary", "default_model": "m", "allowed_models": ["m"], "max_tokens_cap": 7}]
    door = grpc_hearth(registry)
    no_model = pb.ChatRequest(messages=[pb.ChatMessage(role="user", content="hi")], scene="summary")
    answer = await door.stub.Chat(no_model, metadata=KEY)  # the scene's default model, its max_tokens cap
    assert answer.model == "m" and answer.usage.completion_tokens == 7 and fake.stats.last_body["max_tokens"] == 7
    row = await request_log_row(http, door.server, answer.request_id)
    assert (row["scene"], row["route"]) == ("summary", "grpc")
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # the scene named in the metadata this time
        await door.stub.Chat(pb.ChatRequest(model="other", messages=no_model.messages),
                             metadata=(*KEY, ("x-hearth-scene", "summary")))
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _trailer(caught.value, "hearth-error-code") == "model_not_allowed"


async def test_bad_or_missing_keys_are_unauthenticated_and_never_reach_upstream(fake, grpc_hearth):
    door = grpc_hearth(_registry(fake))
    for metadata in ((), (("authorization", "Bearer wrong-key"),)):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await door.stub.Chat(_chat(), metadata=metadata)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert _trailer(caught.value, "hearth-error-code") == "invalid_api_key"
        assert _trailer(caught.value, "x-should-retry") == "false"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in door.stub.StreamChat(_chat(), metadata=()):
            pass
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert fake.stats.requests == 0


async def test_invalid_requests_are_invalid_argument_with_the_field(fake, grpc_hearth):
    door = grpc_hearth(_registry(fake))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await door.stub.Chat(_chat(temperature=3.0), metadata=KEY)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _trailer(caught.value, "hearth-error-param") == "temperature"
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await door.stub.Chat(pb.ChatRequest(model="nope", messages=[pb.ChatMessage(role="user", content="x")]),
                             metadata=KEY)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert _trailer(caught.value, "hearth-error-code") == "model_not_found"
    assert fake.stats.requests == 0


async def test_malformed_metadata_and_undecodable_messages_are_invalid_argument(fake, grpc_hearth):
    door = grpc_hearth(_registry(fake))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await door.stub.Chat(_chat(), metadata=(*KEY, ("x-hearth-timeout-ms", "soon"), ("x-request-id", "bad-ms-1")))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _trailer(caught.value, "hearth-error-param") == "X-Hearth-Timeout-Ms"
    assert _trailer(caught.value, "x-request-id") == "bad-ms-1"
    raw = door.channel.unary_unary("/hearth.v1.AiService/Chat", request_serializer=None,
                                   response_deserializer=None)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await raw(b"\xff\xff\xff", metadata=KEY)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert _trailer(caught.value, "hearth-error-code") == "invalid_request"
    assert fake.stats.requests == 0


async def test_a_budget_spent_is_resource_exhausted_on_both_doors(database_url, fake, grpc_hearth, http):
    # room for exactly one call's reservation: after it settles, too little is left for another
    door = grpc_hearth(budget_registry(fake, reservation_tokens(), unit="tokens"), database_url=database_url)
    first = await door.stub.Chat(_chat(max_tokens=20), metadata=KEY)
    assert first.content
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await door.stub.Chat(_chat(max_tokens=20), metadata=KEY)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _trailer(caught.value, "hearth-error-code") == "budget_exhausted"
    r = await http.post(door.server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=20), headers=AUTH)
    assert r.status_code == 429 and r.json()["error"]["code"] == "budget_exhausted"  # one budget, both doors
    assert fake.stats.requests == 1


async def test_a_rate_limit_is_resource_exhausted_with_retry_advice(fake, grpc_hearth):
    registry = _registry(fake)
    registry["callers"] = [{"name": "tester", "key": "test-key-123", "limits": {"tenant": {"rpm": 1}}}]
    door = grpc_hearth(registry, limit_wait_s=0)
    door.server.runtime.state.clock = RunningClock.at_minute_start()  # no count straddles a window's end
    assert (await door.stub.Chat(_chat(tenant="t1"), metadata=KEY)).content
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await door.stub.Chat(_chat(), metadata=(*KEY, ("x-hearth-tenant", "t1")))  # the tenant from metadata
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert _trailer(caught.value, "hearth-error-code") == "tenant_rpm_exceeded"
    assert _trailer(caught.value, "x-should-retry") == "true"
    assert 0 < int(_trailer(caught.value, "retry-after-ms") or 0) <= 60_000
    assert (await door.stub.Chat(_chat(tenant="t2"), metadata=KEY)).content  # another tenant's window


async def test_signed_callers_sign_the_method_path_and_the_message_bytes(fake, grpc_hearth):
    door = grpc_hearth(signing_registry(fake))
    request = _chat()
    headers = signed_headers(SIGNING_KEY, "POST", "/hearth.v1.AiService/Chat", request.SerializeToString())
    metadata = (*KEY, *((k.lower(), v) for k, v in headers.items()))
    assert (await door.stub.Chat(request, metadata=metadata)).content
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # the same nonce again
        await door.stub.Chat(request, metadata=metadata)
    assert _trailer(caught.value, "hearth-error-code") == "nonce_replayed"
    with pytest.raises(grpc.aio.AioRpcError) as caught:  # signed for other bytes
        await door.stub.Chat(_chat("other"), metadata=(*KEY, *((k.lower(), v) for k, v in signed_headers(
            SIGNING_KEY, "POST", "/hearth.v1.AiService/Chat", request.SerializeToString()).items())))
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert _trailer(caught.value, "hearth-error-code") == "signature_invalid"
    assert fake.stats.requests == 1


async def test_the_grpc_deadline_narrows_the_calls_deadline(fake, grpc_hearth, http):
    fake.set_defaults(latency_ms=3000)
    door = grpc_hearth(_registry(fake))
    started = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await door.stub.Chat(_chat(), metadata=(*KEY, ("x-request-id", "grpc-deadline-1")), timeout=0.5)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert time.monotonic() - started < 1.5
    row = await request_log_row(http, door.server, "grpc-deadline-1")
    assert row["status"] in (499, 504) and row["attempts"] <= 1  # no failover for a caller already gone
    await _until(lambda: fake.stats.in_flight == 0)  # the upstream request was closed


async def test_x_hearth_timeout_ms_ends_the_call_with_hearths_own_deadline_status(fake, grpc_hearth):
    fake.set_defaults(latency_ms=3000)
    door = grpc_hearth(_registry(fake))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await door.stub.Chat(_chat(), metadata=(*KEY, ("x-hearth-timeout-ms", "300")), timeout=10)
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert _trailer(caught.value, "hearth-error-code") in ("deadline_exceeded", "upstream_timeout")


async def test_a_client_cancelling_a_stream_cancels_the_upstream_call(fake, grpc_hearth, http):
    fake.set_defaults(chunks=200, chunk_delay_ms=20)
    door = grpc_hearth(_registry(fake))
    rid = f"grpc-cancel-{uuid.uuid4().hex[:8]}"
    call = door.stub.StreamChat(_chat(), metadata=(*KEY, ("x-request-id", rid)))
    received = 0
    async for chunk in call:
        received += bool(chunk.delta)
        if received == 3:
            break
    call.cancel()
    await _until(lambda: fake.stats.disconnects == 1)  # the upstream stream was closed
    row = await request_log_row(http, door.server, rid)
    assert (row["status"], row["error_code"], row["route"]) == (499, "client_disconnected", "grpc")
    assert door.server.runtime.shutdown.streams.answers == set()


async def test_a_client_cancelling_a_unary_call_before_the_answer_closes_the_upstream_request(fake, grpc_hearth, http):
    fake.set_defaults(latency_ms=5000)
    door = grpc_hearth(_registry(fake))
    call = door.stub.Chat(_chat(), metadata=(*KEY, ("x-request-id", "grpc-cancel-unary")))
    await _until(lambda: fake.stats.in_flight == 1)
    call.cancel()
    await _until(lambda: fake.stats.disconnects == 1)  # within moments, not after the upstream's 5 s
    row = await request_log_row(http, door.server, "grpc-cancel-unary")
    assert (row["status"], row["error_code"], row["attempts"]) == (499, "client_disconnected", 1)


async def test_a_mid_stream_failure_ends_the_stream_with_its_status(fake, grpc_hearth):
    fake.set_defaults(chunks=10, disconnect_after_chunks=3)
    door = grpc_hearth(_registry(fake))
    deltas = []
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for chunk in door.stub.StreamChat(_chat(), metadata=KEY):
            deltas.append(chunk.delta)
    assert "".join(deltas) == "".join(reply_pieces(10)[:3])  # every piece of text before the cut
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _trailer(caught.value, "hearth-error-code") == "upstream_stream_interrupted"


async def test_shutdown_ends_an_open_stream_with_unavailable_after_the_grace(fake, grpc_hearth, http):
    fake.set_defaults(chunks=500, chunk_delay_ms=20)
    door = grpc_hearth(_registry(fake), shutdown_stream_grace_s=0.3)
    rt = door.server.runtime
    call = door.stub.StreamChat(_chat(), metadata=(*KEY, ("x-request-id", "grpc-shutdown-1")))
    deltas = 0
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in call:
            deltas += 1
            if deltas == 2:
                door.server.call(_begin(rt))
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
    assert _trailer(caught.value, "hearth-error-code") == "service_shutting_down"
    row = await request_log_row(http, door.server, "grpc-shutdown-1")
    assert (row["status"], row["error_code"]) == (503, "service_shutting_down")
    with pytest.raises(grpc.aio.AioRpcError) as refused:  # no new call is taken once shutdown began
        await door.stub.Chat(_chat(), metadata=KEY, timeout=5)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


async def _begin(rt: Any) -> None:
    rt.shutdown.begin()


async def _until(condition: Any) -> None:
    """Poll ``condition`` (every 10 ms, for at most 3 s)."""
    async with asyncio.timeout(3.0):
        while not condition():  # noqa: ASYNC110  # the fake's counters have no event to wait on
            await asyncio.sleep(0.01)
