"""The built-in ``http_post`` and ``workflow.fail`` task types, against a real local receiver.

``http_post``'s outcomes map onto the engine's retry classes (``hearth.tasks.retry.classify``): a receiver
that is down or answers 5xx/429 is retried, one that refuses the request (other 4xx) fails at once, and an
address the outbound guard refuses is never called.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from aiohttp import web

from hearth.auth.signing import verify_request
from hearth.capabilities.address_guard import AddressGuard
from hearth.errors import HearthError
from hearth.tasks.fail_task import WORKFLOW_FAIL, register_fail_task
from hearth.tasks.http_call import HTTP_POST, HttpPost, post, register_http_tasks
from hearth.tasks.retry import classify
from hearth.tasks.types import TaskContext, TaskRecord, TaskTypes
from hearth.testing.server_thread import free_port

KEY = "http-call-key-0123456789abcdef"
LOCAL = AddressGuard(["127.0.0.1/32"])


@dataclass
class Receiver:
    url: str
    status: int = 200
    delay_s: float = 0.0
    received: list[dict[str, Any]] = field(default_factory=list)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    port = free_port()
    got = Receiver(url=f"http://127.0.0.1:{port}/hook?x=1")
    nonces: set[str] = set()

    async def claim(nonce: str, _: float) -> bool:
        fresh = nonce not in nonces
        nonces.add(nonce)
        return fresh

    async def hook(request: web.Request) -> web.Response:
        raw = await request.read()
        await verify_request(key=KEY, method="POST", path_with_query=request.path_qs, body=raw,
                             headers=request.headers, claim_nonce=claim)
        got.received.append({"body": orjson.loads(raw), "headers": dict(request.headers)})
        await asyncio.sleep(got.delay_s)
        if got.status == 200:
            return web.json_response({"created": 2})
        return web.Response(status=got.status, text="no")

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield got
    finally:
        await runner.cleanup()


async def _post(url: str, *, guard: AddressGuard = LOCAL, **fields: Any) -> dict[str, Any]:
    return await post(HttpPost(url=url, **fields), guard=guard, signing_key=KEY, delivery_id="tsk_1")


async def test_a_2xx_answer_is_the_result_and_the_post_is_signed_and_labelled(receiver: Receiver) -> None:
    result = await _post(receiver.url, body={"questions": ["1 + 1?"], "n": 1}, event="lesson.questions")
    assert result == {"status": 200, "body": {"created": 2}}
    [got] = receiver.received  # the receiver verified the signature (else it would have raised and answered 500)
    assert got["body"] == {"questions": ["1 + 1?"], "n": 1}
    assert got["headers"]["X-Hearth-Event"] == "lesson.questions"
    assert got["headers"]["X-Hearth-Delivery"] == "tsk_1"


@pytest.mark.parametrize(("status", "code", "verdict"), [(503, "upstream_error", "retry"),
                                                         (429, "upstream_error", "retry"),
                                                         (404, "http_call_rejected", "fail"),
                                                         (400, "http_call_rejected", "fail")])
async def test_the_receivers_status_decides_retry_or_fail(receiver: Receiver, status: int, code: str,
                                                          verdict: str) -> None:
    receiver.status = status
    with pytest.raises(HearthError) as failed:
        await _post(receiver.url, body={})
    assert failed.value.code == code and failed.value.details["status"] == status
    assert classify(failed.value)[0] == verdict


async def test_a_receiver_that_is_down_or_slow_is_retried() -> None:
    with pytest.raises(HearthError) as down:
        await _post(f"http://127.0.0.1:{free_port()}/hook", body={})
    assert down.value.code == "upstream_error"
    assert classify(down.value)[0] == "retry"


async def test_a_receiver_past_the_timeout_is_a_retried_timeout(receiver: Receiver) -> None:
    receiver.delay_s = 1.0
    with pytest.raises(HearthError) as slow:
        await _post(receiver.url, body={}, timeout_s=0.2)
    assert slow.value.code == "upstream_timeout"
    assert classify(slow.value)[0] == "retry"


async def test_an_address_the_guard_refuses_is_never_called(receiver: Receiver) -> None:
    with pytest.raises(HearthError) as refused:
        await _post(receiver.url, guard=AddressGuard([]), body={})  # loopback is private: not allowed
    assert refused.value.code == "http_call_refused" and refused.value.status == 400
    assert classify(refused.value)[0] == "fail"
    assert receiver.received == []


def test_the_payload_is_checked_when_the_task_is_submitted() -> None:
    types = TaskTypes()
    register_http_tasks(types, guard=LOCAL, signing_key=KEY)
    http_post = types.get(HTTP_POST)
    assert http_post is not None and http_post.validate is not None
    assert http_post.validate({"url": "https://example.com/x", "body": [1]}) == {"url": "https://example.com/x",
                                                                                 "body": [1]}
    with pytest.raises(HearthError) as scheme:
        http_post.validate({"url": "file:///etc/passwd"})
    assert scheme.value.code == "http_call_refused"
    with pytest.raises(HearthError) as unknown:
        http_post.validate({"url": "https://example.com/x", "method": "DELETE"})
    assert unknown.value.code == "invalid_request"


def _context(task_type: str, payload: dict[str, Any]) -> TaskContext:
    record = TaskRecord(id="tsk_1", task_type=task_type, queue="ai.default", attempt=1, max_attempts=3,
                        payload=payload, caller="app", tenant=None, end_user=None, request_id=None, priority=0)
    return TaskContext(record, None, report=lambda _: None)


async def test_the_task_posts_under_its_own_id(receiver: Receiver) -> None:
    types = TaskTypes()
    register_http_tasks(types, guard=LOCAL, signing_key=KEY)
    http_post = types.get(HTTP_POST)
    assert http_post is not None
    result = await http_post.handler(_context(HTTP_POST, {"url": receiver.url, "body": {"a": 1}}))
    assert result["status"] == 200 and receiver.received[0]["headers"]["X-Hearth-Delivery"] == "tsk_1"


async def test_workflow_fail_always_fails_with_its_message_and_is_never_retried() -> None:
    types = TaskTypes()
    register_fail_task(types)
    fail = types.get(WORKFLOW_FAIL)
    assert fail is not None and fail.validate is not None
    with pytest.raises(HearthError) as failed:
        await fail.handler(_context(WORKFLOW_FAIL, {"message": "no generation passed", "details": {"n": 4}}))
    assert (failed.value.code, failed.value.message, failed.value.details) == ("workflow_failed",
                                                                               "no generation passed", {"n": 4})
    assert classify(failed.value)[0] == "fail"
    with pytest.raises(HearthError) as no_message:
        fail.validate({})
    assert no_message.value.code == "invalid_request"
