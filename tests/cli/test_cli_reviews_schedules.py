"""``hearth reviews ls|decide`` and ``hearth schedules ls|trigger`` against a real Hearth server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.cli.helpers import TEXT, admin_get, admin_post, hearth, ok_json, registry
from tests.support import ADMIN

FORM = {"type": "object", "required": ["plan"], "properties": {"plan": {"type": "string"}},
        "additionalProperties": False}


def _raise(server: Any, title: str, **extra: Any) -> str:
    item = admin_post(server, "/api/v1/reviews", {"title": title, "payload": {"plan": "v1"}, "timeout_s": 3600,
                                                  "queue": "teachers", "form": FORM, **extra})
    review_id: str = item["id"]
    return review_id


def test_reviews_ls_and_decide(fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    server = hearth_server(registry(fake))
    first = _raise(server, "Approve the plan for 3B")
    second = _raise(server, "Approve the plan for 4A", subject_kind="document", subject_id="doc_1")

    listed = hearth(["reviews", "ls"], server, tmp_path)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines() if line.strip().startswith(first[:4])]
    assert [r[0] for r in rows] == [first, second]  # oldest first
    assert rows[0][1:3] == ["teachers", "pending"] and "document:doc_1" in listed.stdout

    approved = hearth(["reviews", "decide", first, "approve", "--operator", "alice", "--reason", "fine"], server,
                      tmp_path)
    assert approved.returncode == 0, approved.stderr
    assert f"review {first} approved by alice" in approved.stdout
    item = admin_get(server, f"/api/v1/reviews/{first}")
    assert (item["state"], item["decided_by"], item["reason"]) == ("approved", "alice", "fine")

    # A modify whose payload does not fit the form is refused, and the claim is given back for someone else.
    refused = hearth(["reviews", "decide", second, "modify", "--operator", "alice", "--reason", "r", "--payload",
                      '{"plan": 7}'], server, tmp_path)
    assert refused.returncode == 1 and "HTTP 400" in refused.stderr, refused.stderr
    assert admin_get(server, f"/api/v1/reviews/{second}")["state"] == "pending"
    (tmp_path / "plan.json").write_text('{"plan": "v2"}')
    modified = ok_json(hearth(["reviews", "decide", second, "modify", "--operator", "bob", "--reason", "better",
                               "--payload", "@plan.json", "--json"], server, tmp_path))
    assert (modified["state"], modified["decided_by"]) == ("modified", "bob")
    assert ok_json(hearth(["reviews", "ls", "--state", "pending", "--json"], server, tmp_path))["reviews"] == []


def test_reviews_errors(fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    server = hearth_server(registry(fake))
    review_id = _raise(server, "Held by someone else")
    admin_post(server, f"/api/v1/reviews/{review_id}/claim", {"reviewer": "carol"})
    held = hearth(["reviews", "decide", review_id, "approve", "--operator", "alice", "--reason", "x"], server,
                  tmp_path)
    assert held.returncode == 1 and "HTTP 409" in held.stderr, held.stderr
    missing = hearth(["reviews", "decide", "rev_nope", "reject", "--operator", "alice", "--reason", "x"], server,
                     tmp_path)
    assert missing.returncode == 1 and "HTTP 404, review_not_found" in missing.stderr
    no_payload = hearth(["reviews", "decide", review_id, "modify", "--operator", "alice", "--reason", "x"], server,
                        tmp_path)
    assert no_payload.returncode == 2 and "needs the modified payload" in no_payload.stderr
    no_operator = hearth(["reviews", "decide", review_id, "approve", "--reason", "x"], server, tmp_path)
    assert no_operator.returncode == 2 and "--operator" in no_operator.stderr
    bad_token = hearth(["reviews", "ls"], server, tmp_path, token="nope")
    assert bad_token.returncode == 1 and "admin_token_required" in bad_token.stderr


def test_schedules_ls_and_trigger(fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    server = hearth_server(registry(fake), embedded_worker=False)
    schedule = admin_post(server, "/api/v1/schedules", {
        "name": "daily-summary", "caller": "tester", "cron": "0 8 * * *", "time_zone": "Asia/Shanghai",
        "target": {"task_type": "summarize_async", "payload": {"text": TEXT}}})

    listed = hearth(["schedules", "ls"], server, tmp_path)
    assert listed.returncode == 0, listed.stderr
    row = next(line.split() for line in listed.stdout.splitlines() if line.strip().startswith(schedule["id"]))
    assert row[1:3] == ["daily-summary", "tester"] and "summarize_async" in row and "Asia/Shanghai" in row
    assert row[row.index("summarize_async") + 2].endswith(":00:00Z")  # next fire time, 08:00 Shanghai in UTC

    fired = hearth(["schedules", "trigger", schedule["id"]], server, tmp_path)
    assert fired.returncode == 0, fired.stderr
    task_id = fired.stdout.split("task ")[-1].strip()
    assert task_id.startswith("tsk")
    task = httpx.get(f"{server.base_url}/api/v1/ai/tasks/{task_id}", headers=ADMIN).json()["data"]
    assert (task["task_type"], task["caller"]) == ("summarize_async", "tester")

    missing = hearth(["schedules", "trigger", "sch_nope"], server, tmp_path)
    assert missing.returncode == 1 and "HTTP 404, schedule_not_found" in missing.stderr
    assert ok_json(hearth(["schedules", "ls", "--caller", "nobody", "--json"], server, tmp_path)) == {"schedules": []}
