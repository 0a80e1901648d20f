"""Dead letters and callbacks, on SQLite and PostgreSQL: a terminal failure opens a dead letter with a
severity; acknowledge and redrive need an operator and a reason; a redriven task that succeeds resolves
it. A callback receiver that is down, then up, gets the delivery once it answers, signed with the
callback key; one that never answers is given up, listed and can be redelivered."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from hearth.auth.signing import HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP, sign
from hearth.capabilities.address_guard import AddressGuard
from hearth.errors import HearthError
from hearth.tasks.callbacks import CallbackPolicy, CallbackSender
from hearth.tasks.dead_letters import SeverityRule
from hearth.tasks.service import Submission
from hearth.tasks.terminal import TerminalRules
from hearth.tasks.types import TaskContext, TaskType, TaskTypes
from hearth.tasks.views import task_view

KEY = "callback-key-0123456789abcdef"
FLAKY: dict[str, int] = {}


async def flaky(ctx: TaskContext) -> dict[str, Any]:
    """Fails with bad input until the test lets it pass (``FLAKY[task id]`` more failures)."""
    if FLAKY.get(ctx.task.id, 0) > 0:
        FLAKY[ctx.task.id] -= 1
        ctx.progress(40, "validating")
        raise HearthError("invalid_request", "the document is corrupt")
    return {"ok": True}


def _types() -> TaskTypes:
    types = TaskTypes()
    types.register(TaskType("flaky", flaky, queue="q.fast"))
    return types


async def test_a_failure_opens_a_dead_letter_that_a_successful_redrive_resolves(harness: Any) -> None:
    h = harness(_types())
    h.service.rules = TerminalRules(severity_rules=(SeverityRule("P2", failure_stage="validating"),))
    await h.worker(concurrency=2, rules=h.service.rules)
    (row, _), = await h.service.submit([Submission("flaky", {}, caller="c", idempotency_key="doc-1")])
    FLAKY[row["id"]] = 1
    failed = (await h.wait_terminal([row["id"]]))[row["id"]]
    assert (failed["state"], failed["error_code"], failed["failure_stage"]) == ("failed", "invalid_request",
                                                                                 "validating")
    letter = await h.service.dead_letter(row["id"])
    assert (letter["status"], letter["severity"], letter["attempts"]) == ("OPEN", "P2", 1)
    for operator, reason in (("", "why"), ("ops", ""), ("  ", "  ")):
        with pytest.raises(HearthError) as refused:
            await h.service.acknowledge(row["id"], operator=operator, reason=reason)
        assert refused.value.code == "invalid_request" and refused.value.status == 400
    assert (await h.service.dead_letter(row["id"]))["status"] == "OPEN"  # nothing half-written
    acked = await h.service.acknowledge(row["id"], operator="ana", reason="known bad scan")
    assert acked["status"] == "ACKNOWLEDGED"
    redriven = await h.service.redrive(row["id"], operator="ana", reason="rescanned")
    assert redriven["status"] == "REDRIVEN"
    done = await _until_state(h, row["id"], "succeeded")
    assert (done["attempt"], done["result"]) == (2, {"ok": True})
    resolved = await h.service.dead_letter(row["id"])
    assert resolved["status"] == "RESOLVED"
    assert [(e["action"], e.get("operator"), e.get("reason")) for e in resolved["history"]] == [
        ("acknowledge", "ana", "known bad scan"), ("redrive", "ana", "rescanned"), ("resolved", None, None)]
    with pytest.raises(HearthError) as again:
        await h.service.redrive(row["id"], operator="ana", reason="twice")
    assert again.value.code == "task_state_conflict"


async def _until_state(h: Any, task_id: str, state: str) -> Any:
    for _ in range(400):
        row = await h.service.get(task_id, caller=None)
        if row["state"] == state:
            return row
        await asyncio.sleep(0.025)
    raise AssertionError(f"task never became {state}: {row['state']}")


class Receiver:
    """A callback receiver on 127.0.0.1 that answers 503 while ``down`` and records what it got."""

    def __init__(self) -> None:
        self.down = True
        self.received: list[dict[str, Any]] = []
        self.refused = 0
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.down:
            self.refused += 1
            return web.Response(status=503)
        self.received.append({"body": orjson.loads(body), "raw": body, "headers": dict(request.headers),
                              "path": request.path_qs})
        return web.Response(status=204)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/hooks/task", r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    r.url = f"http://127.0.0.1:{port}/hooks/task?src=hearth"
    yield r
    await runner.cleanup()


async def _sender(h: Any, session: aiohttp.ClientSession, max_attempts: int = 20) -> CallbackSender:
    policy = CallbackPolicy(signing_key=KEY, max_attempts=max_attempts, base_delay_s=0.05, max_delay_s=0.2)
    sender = CallbackSender(h.engine, session, policy, guard=AddressGuard(["127.0.0.0/8"]),
                            view=lambda row: task_view(row, with_result=True), poll_s=0.05)
    sender.start()
    return sender


async def test_a_receiver_that_is_down_then_up_gets_one_signed_delivery(harness: Any, receiver: Receiver) -> None:
    h = harness(_types())
    await h.worker(concurrency=2)
    async with aiohttp.ClientSession() as session:
        sender = await _sender(h, session)
        try:
            (row, _), = await h.service.submit([Submission("flaky", {}, caller="c", callback_url=receiver.url)])
            for _ in range(200):
                if receiver.refused >= 3:
                    break
                await asyncio.sleep(0.025)
            assert receiver.refused >= 3 and receiver.received == []
            receiver.down = False
            for _ in range(400):
                (delivery,) = await h.service.deliveries(state=None, task_id=row["id"], after_id=None, limit=10)
                if delivery["state"] == "delivered":
                    break
                await asyncio.sleep(0.025)
            await sender.deliver_due()  # nothing is due any more: a duplicate would go out now
        finally:
            await sender.stop()
    assert len(receiver.received) == 1
    got = receiver.received[0]
    assert got["body"]["event"] == "task.finished"
    assert (got["body"]["task"]["task_id"], got["body"]["task"]["state"]) == (row["id"], "succeeded")
    assert got["body"]["task"]["result"] == {"ok": True}
    h_ = got["headers"]
    expected = sign(KEY, "POST", got["path"], got["raw"], timestamp=h_[HEADER_TIMESTAMP], nonce=h_[HEADER_NONCE])
    assert h_[HEADER_SIGNATURE] == expected
    assert sign("another-key-0123456789", "POST", got["path"], got["raw"], timestamp=h_[HEADER_TIMESTAMP],
                nonce=h_[HEADER_NONCE]) != expected
    assert delivery["state"] == "delivered" and delivery["attempts"] >= 4 and delivery["last_status"] == 204


async def test_a_callback_that_never_lands_is_given_up_listed_and_redeliverable(harness: Any,
                                                                                receiver: Receiver) -> None:
    h = harness(_types())
    await h.worker(concurrency=2)
    async with aiohttp.ClientSession() as session:
        sender = await _sender(h, session, max_attempts=3)
        try:
            (row, _), = await h.service.submit([Submission("flaky", {}, caller="c", callback_url=receiver.url)])
            for _ in range(400):
                given_up = await h.service.deliveries(state="gave_up", task_id=None, after_id=None, limit=10)
                if given_up:
                    break
                await asyncio.sleep(0.025)
            assert [d["task_id"] for d in given_up] == [row["id"]] and given_up[0]["attempts"] == 3
            assert receiver.refused == 3
            receiver.down = False
            assert await h.service.redeliver(row["id"], caller="c") == 1
            sender.wake.set()
            for _ in range(400):
                if receiver.received:
                    break
                await asyncio.sleep(0.025)
        finally:
            await sender.stop()
    assert len(receiver.received) == 1


async def test_a_callback_to_a_private_address_is_refused_at_submission(harness: Any) -> None:
    h = harness(_types())
    h.service.guard = AddressGuard([])
    for url in ("http://127.0.0.1:9/x", "http://169.254.169.254/latest/meta-data", "ftp://example.com/x",
                "http://user:pw@example.com/x"):
        with pytest.raises(HearthError) as refused:
            await h.service.submit([Submission("flaky", {}, caller="c", callback_url=url)])
        assert refused.value.code == "callback_url_refused"
    rows, _ = await h.service.listing(caller="c")
    assert rows == []
