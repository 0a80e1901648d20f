"""The human review queue: one claim at a time, one decision, and a timer that expires but never approves —
on SQLite and PostgreSQL, on an injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.store.db import create_engine
from hearth.testing.fake_clock import FakeClock
from hearth.workflows.reviews import ReviewRequest, ReviewService

FORM = {"type": "object", "required": ["plan"], "additionalProperties": False,
        "properties": {"plan": {"type": "string", "minLength": 1}}}


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def reviews(engine: AsyncEngine, clock: FakeClock) -> ReviewService:
    return ReviewService(engine, clock)


def item(**overrides: Any) -> ReviewRequest:
    values: dict[str, Any] = {"title": "Approve the plan", "payload": {"plan": "draft"}, "timeout_s": 3600,
                              "queue": "teachers", "form": FORM}
    values.update(overrides)
    return ReviewRequest(**values)


async def refused(code: str, coro: Any) -> HearthError:
    with pytest.raises(HearthError) as caught:
        await coro
    assert caught.value.code == code, caught.value
    return caught.value


async def test_an_item_nobody_decides_expires_and_is_never_approved(
        reviews: ReviewService, clock: FakeClock) -> None:
    raised = await reviews.raise_item(item(timeout_s=60))
    await reviews.claim(raised["id"], reviewer="alice", lease_s=600)
    clock.advance(61)
    # before any sweep ran, a decision past the deadline is already refused
    await refused("review_expired", reviews.decide(raised["id"], reviewer="alice", decision="approve", reason="ok"))
    assert await reviews.expire_due() == 1
    assert await reviews.expire_due() == 0  # once
    expired = await reviews.get(raised["id"])
    assert expired["state"] == "expired" and expired["decided_by"] is None and expired["decision"] is None
    assert [h["action"] for h in expired["history"]] == ["raised", "claimed", "expired"]
    await refused("review_expired", reviews.claim(raised["id"], reviewer="bob", lease_s=60))


@pytest.fixture
async def two_processes(database_url: str, clock: FakeClock) -> AsyncIterator[list[ReviewService]]:
    engines = [create_engine(database_url) for _ in range(2)]
    yield [ReviewService(e, clock) for e in engines]
    for e in engines:
        await e.dispose()


async def test_two_reviewers_claiming_at_once_one_wins(
        reviews: ReviewService, two_processes: list[ReviewService]) -> None:
    for _ in range(5):
        raised = await reviews.raise_item(item())
        results = await asyncio.gather(
            *(s.claim(raised["id"], reviewer=who, lease_s=300) for s, who in zip(two_processes, ("alice", "bob"),
                                                                                  strict=True)),
            return_exceptions=True)
        won = [r for r in results if not isinstance(r, BaseException)]
        lost = [r for r in results if isinstance(r, HearthError)]
        assert len(won) == 1 and len(lost) == 1 and lost[0].code == "review_claimed"
        assert (await reviews.get(raised["id"]))["assignee"] == won[0]["assignee"]


async def test_only_the_claim_holder_decides_and_only_once(reviews: ReviewService) -> None:
    raised = await reviews.raise_item(item())
    await refused("review_not_claimed", reviews.decide(raised["id"], reviewer="alice", decision="approve",
                                                       reason="looks right"))
    await reviews.claim(raised["id"], reviewer="alice", lease_s=300)
    await refused("review_claimed", reviews.decide(raised["id"], reviewer="bob", decision="reject", reason="no"))
    decided = await reviews.decide(raised["id"], reviewer="alice", decision="approve", reason="looks right")
    assert (decided["state"], decided["decided_by"], decided["reason"]) == ("approved", "alice", "looks right")
    await refused("review_decided", reviews.decide(raised["id"], reviewer="alice", decision="reject", reason="oops"))
    await refused("review_decided", reviews.claim(raised["id"], reviewer="bob", lease_s=300))


async def test_a_lapsed_claim_can_be_taken_by_another_reviewer(reviews: ReviewService, clock: FakeClock) -> None:
    raised = await reviews.raise_item(item())
    await reviews.claim(raised["id"], reviewer="alice", lease_s=30)
    await refused("review_claimed", reviews.claim(raised["id"], reviewer="bob", lease_s=30))
    clock.advance(31)
    taken = await reviews.claim(raised["id"], reviewer="bob", lease_s=30)
    assert taken["assignee"] == "bob"
    await refused("review_claimed", reviews.decide(raised["id"], reviewer="alice", decision="approve", reason="late"))


async def test_release_gives_the_item_back_to_the_queue(reviews: ReviewService) -> None:
    raised = await reviews.raise_item(item())
    await reviews.claim(raised["id"], reviewer="alice", lease_s=300)
    released = await reviews.release(raised["id"], reviewer="alice")
    assert (released["state"], released["assignee"]) == ("pending", None)
    assert (await reviews.claim(raised["id"], reviewer="bob", lease_s=300))["assignee"] == "bob"


async def test_a_modification_is_checked_against_the_form(reviews: ReviewService) -> None:
    raised = await reviews.raise_item(item())
    await reviews.claim(raised["id"], reviewer="alice", lease_s=300)
    bad = await refused("invalid_request", reviews.decide(raised["id"], reviewer="alice", decision="modify",
                                                         reason="shorter", payload={"plan": "", "extra": 1}))
    assert bad.param == "payload" and len(bad.details["errors"]) == 2
    await refused("invalid_request", reviews.decide(raised["id"], reviewer="alice", decision="approve",
                                                    reason="fine", payload={"plan": "x"}))
    assert (await reviews.get(raised["id"]))["state"] == "claimed"  # nothing was decided by the refusals
    done = await reviews.decide(raised["id"], reviewer="alice", decision="modify", reason="shorter",
                                payload={"plan": "a better plan"})
    assert (done["state"], done["decision"]) == ("modified", {"plan": "a better plan"})


async def test_a_form_that_is_not_a_json_schema_is_refused_when_raised(reviews: ReviewService) -> None:
    bad = await refused("invalid_request", reviews.raise_item(item(form={"type": "no-such-type"})))
    assert bad.param == "form"


async def test_the_queue_lists_oldest_first_with_filters_and_pages(
        reviews: ReviewService, clock: FakeClock) -> None:
    ids = []
    for i in range(5):
        ids.append((await reviews.raise_item(item(queue="teachers" if i % 2 == 0 else "finance")))["id"])
        clock.advance(10)
    await reviews.claim(ids[0], reviewer="alice", lease_s=300)
    teachers, _ = await reviews.page(queue="teachers")
    assert [r["id"] for r in teachers] == [ids[0], ids[2], ids[4]]
    assert [r["id"] for r in (await reviews.page(assignee="alice"))[0]] == [ids[0]]
    assert [r["id"] for r in (await reviews.page(state="pending", older_than_s=25))[0]] == [ids[1], ids[2]]
    first, cursor = await reviews.page(limit=2)
    second, last = await reviews.page(limit=2, cursor=cursor)
    assert [r["id"] for r in first + second] == ids[:4] and last is not None
    await refused("invalid_request", reviews.page(cursor="not-ours"))
