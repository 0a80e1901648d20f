"""The schedules API over HTTP (admin): define, read, pause, resume, trigger, backfill, delete; clear 4xx."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import ADMIN, AUTH

SCHEDULES = "/api/v1/schedules"


def body(**overrides: Any) -> dict[str, Any]:
    values: dict[str, Any] = {"name": "hourly", "caller": "tester", "cron": "0 * * * *", "time_zone": "Europe/Berlin",
                              "target": {"task_type": "test.noop", "payload": {}}}
    values.update(overrides)
    return values


async def test_a_schedule_is_defined_read_paused_resumed_triggered_and_deleted(server: Any, http: Any) -> None:
    url = server.base_url + SCHEDULES
    created = await http.post(url, json=body(), headers=ADMIN)
    assert created.status_code == 201, created.text
    schedule = created.json()["data"]
    assert schedule["next_at"] is not None and schedule["next_at"] % 3600 == 0 and not schedule["paused"]
    sid = schedule["id"]
    assert (await http.get(f"{url}/{sid}", headers=ADMIN)).json()["data"]["cron"] == "0 * * * *"
    assert [s["id"] for s in (await http.get(url, params={"caller": "tester"}, headers=ADMIN)).json()["data"][
        "schedules"]] == [sid]
    assert (await http.post(f"{url}/{sid}/pause", headers=ADMIN)).json()["data"]["paused"] is True
    assert (await http.post(f"{url}/{sid}/resume", headers=ADMIN)).json()["data"]["paused"] is False
    fired = (await http.post(f"{url}/{sid}/trigger", headers=ADMIN)).json()["data"]
    assert fired["state"] == "fired" and fired["reason"] == "manual" and fired["task_id"].startswith("tsk_")
    task = (await http.get(server.base_url + f"/api/v1/ai/tasks/{fired['task_id']}", headers=AUTH)).json()["data"]
    assert task["task_type"] == "test.noop"  # the schedule's caller sees the task as its own
    occurrences = (await http.get(f"{url}/{sid}/occurrences", headers=ADMIN)).json()["data"]["occurrences"]
    assert [o["task_id"] for o in occurrences] == [fired["task_id"]]
    backfilled = await http.post(f"{url}/{sid}/backfill", json={"start": fired["planned_at"] - 3 * 3600 - 1,
                                                                "end": fired["planned_at"]}, headers=ADMIN)
    assert backfilled.status_code == 200 and backfilled.json()["data"]["added"] == 3
    assert (await http.delete(f"{url}/{sid}", headers=ADMIN)).status_code == 200
    assert (await http.get(f"{url}/{sid}", headers=ADMIN)).json()["error"]["code"] == "schedule_not_found"


@pytest.mark.parametrize(("change", "code", "param"), [
    ({"cron": "61 * * * *"}, "invalid_request", "cron"),
    ({"cron": "* * *"}, "invalid_request", "cron"),
    ({"time_zone": "Mars/Olympus"}, "invalid_request", "time_zone"),
    ({"misfire_policy": "whenever"}, "invalid_request", "misfire_policy"),
    ({"overlap_policy": "prompt"}, "invalid_request", "overlap_policy"),
    ({"name": "../etc"}, "invalid_request", "name"),
    ({"caller": "nobody"}, "invalid_request", "caller"),
    ({"target": {"task_type": "no.such.type"}}, "task_type_unknown", "target.task_type"),
    ({"start_at": 2000, "end_at": 1000}, "invalid_request", None),
])
async def test_a_bad_definition_is_a_clear_400_and_writes_nothing(server: Any, http: Any, change: dict[str, Any],
                                                                  code: str, param: str | None) -> None:
    url = server.base_url + SCHEDULES
    r = await http.post(url, json=body(**change), headers=ADMIN)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == code
    if param is not None:
        details = error["details"]
        at_fault = [details.get("param")] + [".".join(map(str, e["loc"])) for e in details.get("errors", [])]
        assert param in at_fault, error
    assert (await http.get(url, headers=ADMIN)).json()["data"]["schedules"] == []


async def test_schedules_need_the_admin_token_and_names_are_unique_per_caller(server: Any, http: Any) -> None:
    url = server.base_url + SCHEDULES
    assert (await http.post(url, json=body(), headers=AUTH)).status_code in (401, 403)
    assert (await http.post(url, json=body(), headers=ADMIN)).status_code == 201
    again = await http.post(url, json=body(), headers=ADMIN)
    assert again.status_code == 409 and again.json()["error"]["code"] == "schedule_exists"
    assert (await http.post(url + "/sch_missing/trigger", headers=ADMIN)).status_code == 404
