"""The escalation webhook of review items: an expiry is owed in the transaction that expires the item, then
POSTed — signed, address-guarded, retried — to a real HTTP receiver on 127.0.0.1; a receiver that is down
never loses it. SQLite and PostgreSQL, on an injected clock (delivery attempts are driven by hand).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.auth.signing import verify_request
from hearth.capabilities.address_guard import AddressGuard
from hearth.runtime import start_runtime
from hearth.settings import Settings
from hearth.testing.fake_clock import FakeClock
from hearth.testing.server_thread import free_port
from hearth.workflows.review_escalations import EscalationPolicy, EscalationSender, checked_escalation_url
from hearth.workflows.reviews import ReviewRequest, ReviewService
from tests.support import MASTER_KEY

KEY = "escalation-key-0123456789abcdef"
LOCAL = AddressGuard(["127.0.0.0/8"])


class Receiver:
    """An escalation receiver: answers 503 while ``down``, else checks the signature and records the body."""

    def __init__(self) -> None:
        self.down = False
        self.received: list[dict[str, Any]] = []
        self.refused = 0
        self.url = ""
        self._nonces: set[str] = set()
        self.got = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        if self.down:
            self.refused += 1
            return web.Response(status=503)

        async def claim(nonce: str, _ttl: float) -> bool:
            fresh = nonce not in self._nonces
            self._nonces.add(nonce)
            return fresh

        await verify_request(key=KEY, method="POST", path_with_query=request.path_qs, body=body,
                             headers=request.headers, claim_nonce=claim)  # raises on a bad signature
        self.received.append({"body": orjson.loads(body), "headers": dict(request.headers)})
        self.got.set()
        return web.Response(status=204)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/hooks/escalate", r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    r.url = f"http://127.0.0.1:{port}/hooks/escalate?src=hearth"
    yield r
    await runner.cleanup()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def _sender(engine: AsyncEngine, session: aiohttp.ClientSession, clock: FakeClock, *, max_attempts: int = 8,
            guard: AddressGuard = LOCAL) -> EscalationSender:
    policy = EscalationPolicy(signing_key=KEY, max_attempts=max_attempts, base_delay_s=10, max_delay_s=60)
    return EscalationSender(engine, session, policy, guard=guard, clock=clock)


async def _expired(reviews: ReviewService, clock: FakeClock, **extra: Any) -> str:
    item = await reviews.raise_item(ReviewRequest(title="Approve the invoice", payload={"total": 12},
                                                  timeout_s=60, queue="finance", **extra))
    clock.advance(61)
    assert await reviews.expire_due() == 1
    return str(item["id"])


async def test_an_expiry_is_posted_once_signed_to_the_escalation_webhook(
        engine: AsyncEngine, clock: FakeClock, receiver: Receiver, session: aiohttp.ClientSession) -> None:
    reviews = ReviewService(engine, clock, escalation_url=receiver.url)
    sender = _sender(engine, session, clock)
    item_id = await _expired(reviews, clock, subject_kind="workflow_step", subject_id="wfr_1:approve")
    (owed,) = await sender.deliveries(review_id=item_id)
    assert owed["state"] == "pending" and owed["attempts"] == 0  # owed by the expiry itself

    assert await sender.deliver_due() == 1
    assert await sender.deliver_due() == 0  # delivered: nothing goes out twice
    assert len(receiver.received) == 1
    got = receiver.received[0]
    assert got["headers"]["X-Hearth-Event"] == "review.expired"
    assert got["body"] == {"event": "review.expired", "review": {
        "id": item_id, "queue": "finance", "caller": None, "subject_kind": "workflow_step",
        "subject_id": "wfr_1:approve", "title": "Approve the invoice", "state": "expired", "assignee": None,
        "created_at": clock.now() - 61, "expires_at": clock.now() - 1, "expired_at": clock.now()}}
    assert "total" not in str(got["body"])  # the payload stays in Hearth
    (done,) = await sender.deliveries(review_id=item_id)
    assert (done["state"], done["attempts"], done["last_status"]) == ("delivered", 1, 204)
    assert (await reviews.get(item_id))["state"] == "expired"


async def test_a_receiver_that_is_down_keeps_the_expiry_owed_until_it_is_back(
        engine: AsyncEngine, clock: FakeClock, receiver: Receiver, session: aiohttp.ClientSession) -> None:
    reviews = ReviewService(engine, clock, escalation_url=receiver.url)
    sender = _sender(engine, session, clock)
    receiver.down = True
    item_id = await _expired(reviews, clock)
    assert await sender.deliver_due() == 1
    (waiting,) = await sender.deliveries(review_id=item_id)
    assert (waiting["state"], waiting["attempts"], waiting["last_status"]) == ("pending", 1, 503)
    assert 5 <= waiting["next_at"] - clock.now() <= 10  # backed off: half to all of the 10 s base
    assert await sender.deliver_due() == 0  # not due yet

    clock.advance(10)
    assert await sender.deliver_due() == 1
    assert receiver.refused == 2 and receiver.received == []
    receiver.down = False
    clock.advance(20)
    assert await sender.deliver_due() == 1
    (done,) = await sender.deliveries(review_id=item_id)
    assert (done["state"], done["attempts"]) == ("delivered", 3)
    assert [r["body"]["review"]["id"] for r in receiver.received] == [item_id]
    item = await reviews.get(item_id)
    assert item["state"] == "expired" and item["decided_by"] is None  # a timer never approves


async def test_an_unreachable_receiver_is_retried_then_given_up_kept_and_logged_as_an_alert(
        engine: AsyncEngine, clock: FakeClock, session: aiohttp.ClientSession,
        caplog: pytest.LogCaptureFixture) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/hooks/escalate"  # nothing listens there
    reviews = ReviewService(engine, clock, escalation_url=nobody)
    sender = _sender(engine, session, clock, max_attempts=3)
    item_id = await _expired(reviews, clock)
    for _ in range(3):
        assert await sender.deliver_due() == 1
        clock.advance(60)
    assert await sender.deliver_due() == 0
    (row,) = await sender.deliveries(review_id=item_id)
    assert (row["state"], row["attempts"], row["last_status"]) == ("gave_up", 3, None)
    assert row["last_error"] == "ClientConnectorError"
    gave_up = [r for r in caplog.records if r.getMessage() == "review_escalation_gave_up"]
    assert len(gave_up) == 1 and gave_up[0].levelno == logging.WARNING
    assert gave_up[0].hearth_fields["review_id"] == item_id and gave_up[0].hearth_fields["alert"] is True


async def test_a_url_the_address_guard_refuses_is_not_called_at_delivery(
        engine: AsyncEngine, clock: FakeClock, receiver: Receiver, session: aiohttp.ClientSession) -> None:
    reviews = ReviewService(engine, clock, escalation_url=receiver.url)
    sender = _sender(engine, session, clock, guard=AddressGuard([]))  # 127.0.0.1 no longer allowed
    item_id = await _expired(reviews, clock)
    assert await sender.deliver_due() == 1
    (row,) = await sender.deliveries(review_id=item_id)
    assert (row["state"], row["last_error"]) == ("pending", "file_url_refused")
    assert receiver.received == [] and receiver.refused == 0


async def test_two_senders_deliver_an_expiry_once_and_two_sweeps_owe_it_once(
        engine: AsyncEngine, clock: FakeClock, receiver: Receiver, session: aiohttp.ClientSession) -> None:
    reviews = [ReviewService(engine, clock, escalation_url=receiver.url) for _ in range(2)]
    await reviews[0].raise_item(ReviewRequest(title="t", payload={}, timeout_s=60))
    clock.advance(61)
    assert sum(await asyncio.gather(*(r.expire_due() for r in reviews))) == 1
    senders = [_sender(engine, session, clock) for _ in range(2)]
    assert sum(await asyncio.gather(*(s.deliver_due() for s in senders))) == 1
    assert len(await senders[0].deliveries()) == 1 and len(receiver.received) == 1


async def test_without_an_escalation_url_an_expiry_owes_nothing(
        engine: AsyncEngine, clock: FakeClock, session: aiohttp.ClientSession) -> None:
    await _expired(ReviewService(engine, clock), clock)
    assert await _sender(engine, session, clock).deliveries() == []


# --------------------------------------------------------------------------- configuration


async def test_the_url_is_checked_at_start_signing_key_required_and_address_guarded() -> None:
    with pytest.raises(SystemExit, match="needs HEARTH_CALLBACK_SIGNING_KEY"):
        await checked_escalation_url(Settings(review_escalation_url="http://127.0.0.1:9/x"), LOCAL)
    with pytest.raises(SystemExit, match="HEARTH_REVIEW_ESCALATION_URL is refused"):
        await checked_escalation_url(Settings(review_escalation_url="http://10.1.2.3/x", callback_signing_key=KEY),
                                     AddressGuard([]))
    with pytest.raises(SystemExit, match="HEARTH_REVIEW_ESCALATION_URL is refused"):
        await checked_escalation_url(Settings(review_escalation_url="file:///etc/passwd", callback_signing_key=KEY),
                                     LOCAL)
    url = "http://127.0.0.1:9/x"
    assert await checked_escalation_url(Settings(review_escalation_url=url, callback_signing_key=KEY), LOCAL) == url
    assert await checked_escalation_url(Settings(), LOCAL) is None


async def test_a_running_hearth_posts_the_expiry_of_an_item_it_expires(
        tmp_path: Path, database_url: str, receiver: Receiver) -> None:
    """The wiring: settings → the scheduler's expiry → the process's sender → the receiver (real time, polled)."""
    settings = Settings(database_url=database_url, master_key=MASTER_KEY, embedded_worker=False,
                        scheduler_interval_s=0.1, review_escalation_url=receiver.url, callback_signing_key=KEY,
                        callback_url_allow=["127.0.0.1/32"])
    rt = await start_runtime(settings)
    try:
        item = await rt.reviews.raise_item(ReviewRequest(title="t", payload={}, timeout_s=0.2))
        await asyncio.wait_for(receiver.got.wait(), 10)
    finally:
        await rt.stop()
    assert [r["body"]["review"]["id"] for r in receiver.received] == [item["id"]]
