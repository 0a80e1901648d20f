"""``hearth tasks ls|show|cancel|redrive`` against a real Hearth server over HTTP.

The commands are clients of the task API, whose SQL is the server's (tested on both databases in
tests/tasks/); the listing, paging and cancel tests still run against a server on each database, as an
operator would meet it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import admin_get, eventually, hearth, ok_json, registry, submit


@pytest.fixture
def idle_server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    """No worker: submitted tasks stay queued (on SQLite, then on PostgreSQL)."""
    return hearth_server(registry(fake), embedded_worker=False, database_url=database_url)


@pytest.fixture
def server(fake: Any, hearth_server: Any) -> Any:
    return hearth_server(registry(fake), task_poll_s=0.1, task_reap_s=0.2)


def test_ls_lists_newest_first_with_filters_and_pages(idle_server: Any, tmp_path: Path) -> None:
    ids = [submit(idle_server) for _ in range(3)]
    out = hearth(["tasks", "ls"], idle_server, tmp_path)
    assert out.returncode == 0, out.stderr
    listed = [line.split()[0] for line in out.stdout.splitlines() if line.strip().startswith("tsk")]
    assert listed == ids[::-1]
    assert "summarize_async" in out.stdout and "ai.summary" in out.stdout and "queued" in out.stdout

    page = ok_json(hearth(["tasks", "ls", "--limit", "2", "--json"], idle_server, tmp_path))
    assert [t["task_id"] for t in page["tasks"]] == ids[:0:-1] and page["next_cursor"]
    rest = ok_json(hearth(["tasks", "ls", "--limit", "2", "--cursor", page["next_cursor"], "--json"], idle_server,
                          tmp_path))
    assert [t["task_id"] for t in rest["tasks"]] == ids[:1] and rest["next_cursor"] is None
    human = hearth(["tasks", "ls", "--limit", "2"], idle_server, tmp_path)
    assert f"--cursor {page['next_cursor']}" in human.stdout
    assert ok_json(hearth(["tasks", "ls", "--state", "running", "--json"], idle_server, tmp_path))["tasks"] == []
    assert "no tasks" in hearth(["tasks", "ls", "--queue", "elsewhere"], idle_server, tmp_path).stdout
    narrow = hearth(["tasks", "ls"], idle_server, tmp_path, env={"COLUMNS": "60"})
    assert all(task_id in narrow.stdout for task_id in ids)  # rows stay whole: ids are never cut


def test_show_and_cancel(idle_server: Any, tmp_path: Path) -> None:
    task_id = submit(idle_server)
    shown = hearth(["tasks", "show", task_id], idle_server, tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert task_id in shown.stdout and "queued" in shown.stdout and "ai.summary" in shown.stdout

    cancelled = hearth(["tasks", "cancel", task_id], idle_server, tmp_path)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"task {task_id} is killed" in cancelled.stdout
    assert ok_json(hearth(["tasks", "show", task_id, "--json"], idle_server, tmp_path))["state"] == "killed"

    again = hearth(["tasks", "cancel", task_id], idle_server, tmp_path)
    assert again.returncode == 1 and "already killed" in again.stderr and "409" in again.stderr


def test_redrive_a_dead_letter_with_operator_and_reason(fake: Any, server: Any, tmp_path: Path) -> None:
    fake.set_defaults(status=400)
    task_id = submit(server, payload={"text": "x", "model": "m"})
    eventually(lambda: admin_get(server, f"/api/v1/ai/tasks/{task_id}")["state"] == "failed", what="failed")
    shown = hearth(["tasks", "show", task_id], server, tmp_path)
    assert "upstream_bad_request" in shown.stdout and "failed" in shown.stdout
    attention = ok_json(hearth(["status", "--json"], server, tmp_path))["attention"]
    severity = admin_get(server, f"/api/v1/ai/dead-letters/{task_id}")["severity"]
    assert (attention["dead_letters_open"], attention["dead_letters_by_severity"]) == (1, {severity: 1})

    missing_reason = hearth(["tasks", "redrive", task_id, "--operator", "ops"], server, tmp_path)
    assert missing_reason.returncode == 2 and "--reason" in missing_reason.stderr

    fake.set_defaults(status=200)
    out = hearth(["tasks", "redrive", task_id, "--operator", "ops", "--reason", "upstream fixed"], server, tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"task {task_id} redriven by ops" in out.stdout
    letter = admin_get(server, f"/api/v1/ai/dead-letters/{task_id}")
    assert any(h.get("operator") == "ops" and h.get("reason") == "upstream fixed" for h in letter["history"])
    eventually(lambda: admin_get(server, f"/api/v1/ai/tasks/{task_id}")["state"] == "succeeded", what="succeeded")


def test_redrive_several_with_a_progress_bar_one_refusal_does_not_stop_the_rest(fake: Any, server: Any,
                                                                              tmp_path: Path) -> None:
    fake.set_defaults(status=400)
    ids = [submit(server, payload={"text": f"x{i}", "model": "m"}) for i in range(3)]
    for task_id in ids:
        eventually(lambda t=task_id: admin_get(server, f"/api/v1/ai/tasks/{t}")["state"] == "failed", what="failed")

    fake.set_defaults(status=200)  # the redriven tasks then succeed and their letters are resolved
    both = hearth(["tasks", "redrive", ids[0], "--all-open", "--operator", "ops", "--reason", "x"], server, tmp_path)
    assert both.returncode == 2 and "not both" in both.stderr
    some = hearth(["tasks", "redrive", ids[0], "tsk_nope", "--operator", "ops", "--reason", "batch"], server,
                  tmp_path)
    assert some.returncode == 1 and "redriven 1 of 2 dead letter(s) by ops" in some.stdout
    assert "error: tsk_nope: " in some.stderr and "dead_letter_not_found" in some.stderr
    rest = ok_json(hearth(["tasks", "redrive", "--all-open", "--type", "summarize_async", "--operator", "ops",
                           "--reason", "batch", "--json"], server, tmp_path))
    assert sorted(rest["redriven"]) == sorted(ids[1:]) and rest["refused"] == []
    for task_id in ids:
        letter = admin_get(server, f"/api/v1/ai/dead-letters/{task_id}")
        assert any(h.get("operator") == "ops" and h.get("reason") == "batch" for h in letter["history"])
    none_left = hearth(["tasks", "redrive", "--all-open", "--operator", "ops", "--reason", "batch"], server, tmp_path)
    assert none_left.returncode == 0 and "redriven 0 of 0" in none_left.stdout
    assert none_left.stderr.strip() == ""  # no progress bar drawn when stderr is not a terminal


def test_errors_are_one_readable_line_and_a_non_zero_exit(fake: Any, idle_server: Any, tmp_path: Path) -> None:
    # The task API also takes caller keys (a caller sees its own tasks), so a wrong token is a wrong key there.
    bad = hearth(["tasks", "ls"], idle_server, tmp_path, token="wrong")
    assert bad.returncode == 1 and bad.stdout == ""
    assert "error: Incorrect API key provided. (HTTP 401, invalid_api_key)" in bad.stderr
    assert "hint: give the admin token with HEARTH_ADMIN_TOKEN" in bad.stderr and "wrong" not in bad.stderr
    assert hearth(["tasks", "ls"], idle_server, tmp_path, token=None).returncode == 1
    admin_only = hearth(["tasks", "redrive", "tsk_x", "--operator", "ops", "--reason", "x"], idle_server, tmp_path,
                        token="wrong")
    assert admin_only.returncode == 1
    assert "error: A valid admin token is required. (HTTP 401, admin_token_required)" in admin_only.stderr

    for args in (["tasks", "show", "tsk_nope"], ["tasks", "cancel", "tsk_nope"]):
        missing = hearth(args, idle_server, tmp_path)
        assert missing.returncode == 1 and "HTTP 404, task_not_found" in missing.stderr, missing.stderr
    redrive = hearth(["tasks", "redrive", "tsk_nope", "--operator", "ops", "--reason", "x"], idle_server, tmp_path)
    assert redrive.returncode == 1 and "HTTP 404, dead_letter_not_found" in redrive.stderr

    bad_state = hearth(["tasks", "ls", "--state", "sleeping"], idle_server, tmp_path)
    assert bad_state.returncode == 1 and "`state` is one of" in bad_state.stderr

    class Gone:
        base_url = "http://127.0.0.1:9"  # discard: nothing listens

    class NotHearth:
        base_url = fake.base_url  # an OpenAI-like server: answers, but not with Hearth's envelope

    other = hearth(["tasks", "ls"], NotHearth(), tmp_path)
    assert other.returncode == 1 and "is it a Hearth server (--url)?" in other.stderr, other.stderr

    gone = hearth(["tasks", "ls"], Gone(), tmp_path)
    assert gone.returncode == 3 and "cannot reach Hearth at http://127.0.0.1:9" in gone.stderr
