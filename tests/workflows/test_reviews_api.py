"""The review API over HTTP (admin): raise, claim, decide; conflicts are 409 with stable codes, bad bodies 400."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import ADMIN, AUTH

REVIEWS = "/api/v1/reviews"
FORM = {"type": "object", "required": ["plan"], "properties": {"plan": {"type": "string"}}}


async def test_a_review_is_raised_claimed_and_decided_once_over_http(server: Any, http: Any) -> None:
    url = server.base_url + REVIEWS
    raised = await http.post(url, json={"title": "Plan for 3B", "payload": {"plan": "draft"}, "timeout_s": 600,
                                        "queue": "teachers", "form": FORM}, headers=ADMIN)
    assert raised.status_code == 201, raised.text
    rid = raised.json()["data"]["id"]
    claim = await http.post(f"{url}/{rid}/claim", json={"reviewer": "alice"}, headers=ADMIN)
    assert claim.status_code == 200 and claim.json()["data"]["assignee"] == "alice"
    other = await http.post(f"{url}/{rid}/claim", json={"reviewer": "bob"}, headers=ADMIN)
    assert other.status_code == 409 and other.json()["error"]["code"] == "review_claimed"
    bad = await http.post(f"{url}/{rid}/decide", json={"reviewer": "alice", "decision": "modify", "reason": "x",
                                                       "payload": {"plan": 3}}, headers=ADMIN)
    assert bad.status_code == 400 and bad.json()["error"]["details"]["param"] == "payload"
    done = await http.post(f"{url}/{rid}/decide", json={"reviewer": "alice", "decision": "reject",
                                                        "reason": "not aligned with the syllabus"}, headers=ADMIN)
    assert done.status_code == 200 and done.json()["data"]["state"] == "rejected"
    again = await http.post(f"{url}/{rid}/decide", json={"reviewer": "alice", "decision": "approve", "reason": "x"},
                            headers=ADMIN)
    assert again.status_code == 409 and again.json()["error"]["code"] == "review_decided"
    listed = (await http.get(url, params={"queue": "teachers", "state": "rejected"}, headers=ADMIN)).json()["data"]
    assert [r["id"] for r in listed["reviews"]] == [rid]


@pytest.mark.parametrize("change", [
    {"timeout_s": 0}, {"timeout_s": "soon"}, {"payload": "not an object"}, {"form": {"type": "nope"}},
    {"queue": "a/b"}, {"subject_kind": "spaceship"}, {"title": ""},
])
async def test_a_bad_review_is_a_400_and_writes_nothing(server: Any, http: Any, change: dict[str, Any]) -> None:
    url = server.base_url + REVIEWS
    r = await http.post(url, json={"title": "t", "payload": {}, "timeout_s": 60, **change}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", r.text
    assert (await http.get(url, headers=ADMIN)).json()["data"]["reviews"] == []


async def test_reviews_need_the_admin_token(server: Any, http: Any) -> None:
    url = server.base_url + REVIEWS
    assert (await http.get(url, headers=AUTH)).status_code in (401, 403)
    assert (await http.get(url + "/rv_missing", headers=ADMIN)).status_code == 404
