"""Alerts in a running Hearth, on SQLite and PostgreSQL: an endpoint disabled by the gateway (its upstream
answered 401) or by an operator is alerted to a real signing receiver on 127.0.0.1, and listed by
``GET /api/v1/admin/alerts`` with keyset paging; without an alert URL nothing is raised."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from hearth.workflows.reviews import ReviewRequest
from tests.observability.alert_support import KEY, Receiver, running_receiver
from tests.support import ADMIN, AUTH, chat_body, gateway_registry

URL = "/api/v1/admin/alerts"


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with running_receiver() as r:
        yield r


def _registry(fake: Any, fake2: Any) -> dict[str, Any]:
    return gateway_registry([
        {"name": "a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up", "priority": 0,
         "api_key": "sk-key-of-a-abcdef"},
        {"name": "b", "provider": "openai-like", "base_url": fake2.base_url, "upstream_model": "up", "priority": 1,
         "api_key": "sk-key-of-b-abcdef"}])


async def _received(receiver: Receiver, n: int) -> list[dict[str, Any]]:
    """The first ``n`` alerts the receiver accepted, once they are there (the server's sender polls each second)."""
    while len(receiver.received) < n:
        receiver.got.clear()
        await asyncio.wait_for(receiver.got.wait(), 15)
    return receiver.alerts()


async def _disable_both(http: Any, server: Any, fake: Any) -> None:
    fake.set_defaults(status=401)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"  # `a` refused its key: disabled
    assert (await http.post(server.base_url + "/api/v1/admin/endpoints/b/disable", headers=ADMIN)).status_code == 200


async def test_disabled_endpoints_are_alerted_signed_and_listed_with_keyset_paging(
        fake: Any, fake2: Any, hearth_server: Any, http: Any, database_url: str, receiver: Receiver) -> None:
    server = hearth_server(_registry(fake, fake2), database_url=database_url, alert_url=receiver.url,
                           callback_signing_key=KEY, callback_url_allow=["127.0.0.1/32"], embedded_worker=False)
    assert len(server.runtime.scheduler.passes_run) == 4  # the alert checks are a scheduler pass
    await _disable_both(http, server, fake)
    got = await _received(receiver, 2)
    assert receiver.forged == 0
    assert [(a["kind"], a["subject"], a["severity"], a["payload"]["disabled_by"]) for a in got] == [
        ("endpoint_disabled", "a", "P1", "gateway"), ("endpoint_disabled", "b", "P3", "admin")]
    assert "401" in got[0]["payload"]["reason"] and "sk-key" not in str(got)

    first = (await http.get(server.base_url + URL, params={"limit": 1}, headers=ADMIN)).json()["data"]
    assert [a["subject"] for a in first["alerts"]] == ["b"]  # newest first
    second = (await http.get(server.base_url + URL, params={"limit": 1, "cursor": first["next_cursor"]},
                             headers=ADMIN)).json()["data"]
    assert [a["subject"] for a in second["alerts"]] == ["a"]
    last = (await http.get(server.base_url + URL, params={"limit": 1, "cursor": second["next_cursor"]},
                           headers=ADMIN)).json()["data"]
    assert last == {"alerts": [], "next_cursor": None}
    listed = (await http.get(server.base_url + URL, params={"kind": "endpoint_disabled"},
                             headers=ADMIN)).json()["data"]
    assert listed["next_cursor"] is None and len(listed["alerts"]) == 2
    assert set(listed["alerts"][0]["delivery"]) == {"state", "attempts", "next_at", "last_status", "last_error",
                                                    "delivered_at"}
    assert (await http.get(server.base_url + URL, params={"kind": "queue_backlog"}, headers=ADMIN)
            ).json()["data"]["alerts"] == []


async def test_the_listing_refuses_bad_filters_and_callers_without_the_admin_token(
        fake: Any, fake2: Any, hearth_server: Any, http: Any, receiver: Receiver) -> None:
    server = hearth_server(_registry(fake, fake2), alert_url=receiver.url, callback_signing_key=KEY,
                           callback_url_allow=["127.0.0.1/32"], embedded_worker=False)
    for params, param in (({"kind": "nope"}, "kind"), ({"state": "lost"}, "state"), ({"cursor": "abc"}, "cursor"),
                          ({"cursor": "-1"}, "cursor"), ({"limit": 0}, "limit"), ({"limit": 501}, "limit")):
        r = await http.get(server.base_url + URL, params=params, headers=ADMIN)
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_request", params
        assert r.json()["error"]["details"]["param"] == param
    assert (await http.get(server.base_url + URL)).status_code == 401
    assert (await http.get(server.base_url + URL, headers=AUTH)).status_code in (401, 403)


async def test_without_an_alert_url_nothing_is_raised(
        fake: Any, fake2: Any, hearth_server: Any, http: Any, database_url: str) -> None:
    server = hearth_server(_registry(fake, fake2), database_url=database_url, embedded_worker=False)
    assert server.runtime.alerting is None and len(server.runtime.scheduler.passes_run) == 3
    await _disable_both(http, server, fake)
    listed = (await http.get(server.base_url + URL, headers=ADMIN)).json()["data"]
    assert listed == {"alerts": [], "next_cursor": None}


async def test_a_running_hearth_checks_polled_conditions_as_a_scheduler_pass(
        fake: Any, fake2: Any, hearth_server: Any, receiver: Receiver) -> None:
    """The wiring of the polled checks: settings → the scheduler's pass → the process's sender → the receiver."""
    server = hearth_server(_registry(fake, fake2), alert_url=receiver.url, callback_signing_key=KEY,
                           callback_url_allow=["127.0.0.1/32"], embedded_worker=False, scheduler_interval_s=0.1,
                           alert_check_interval_s=0.1, alert_review_lead_s=900)
    server.call(server.runtime.reviews.raise_item(ReviewRequest(title="t", payload={}, timeout_s=600,
                                                                queue="finance")))
    (got,) = await _received(receiver, 1)
    assert (got["kind"], got["subject"], got["payload"]["items"]) == ("review_expiring", "finance", 1)
