"""``hearth status`` against a real Hearth server: backends, an endpoint cooling down after a 429, queue depth
and age, and the workers holding task leases; colours follow NO_COLOR."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.cli.helpers import admin_get, admin_post, chat, eventually, hearth, ok_json, registry, submit
from tests.support import hearth_process

COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7]|38;[25])[;m]")  # a foreground colour (not bold/italic)


def test_status_shows_backends_a_cooling_endpoint_and_queued_tasks(fake: Any, hearth_server: Any,
                                                                   tmp_path: Path) -> None:
    server = hearth_server(registry(fake), embedded_worker=False)
    first = submit(server)
    submit(server)
    fake.set_defaults(status=429, retry_after=120)
    assert chat(server).status_code == 429
    admin_post(server, "/api/v1/reviews", {"title": "Check", "payload": {}, "timeout_s": 3600})

    data = ok_json(hearth(["status", "--json"], server, tmp_path))
    assert data["readiness"]["checks"]["database"] == "ok"
    assert data["readiness"]["checks"]["state_backend"] == "ok" and data["stats"]["state_backend"] == "memory"
    (endpoint,) = data["endpoints"]
    assert endpoint["name"] == "a" and endpoint["enabled"] is True and endpoint["cooldown_s"] > 60
    queue = data["queues"]["ai.summary"]
    assert (queue["queued"], queue["running"], queue["lower_bound"]) == (2, 0, [])
    assert queue["oldest_queued_at"] == admin_get(server, f"/api/v1/ai/tasks/{first}")["timings"]["updated_at"]
    assert data["workers"] == {}
    attention = data["attention"]
    assert (attention["dead_letters_open"], attention["reviews_pending"]) == (0, 1) and attention["oldest_review_at"]

    human = hearth(["status"], server, tmp_path)
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    endpoint_line = next(line for line in lines if line.strip().startswith("a "))
    assert "cooling" in endpoint_line and "openai-like" in endpoint_line
    queue_line = next(line for line in lines if line.strip().startswith("ai.summary"))
    assert queue_line.split()[1] == "2"
    assert "memory: ok" in human.stdout and "workers: none holding a task lease" in human.stdout
    assert "attention: 0 dead letter(s) open; 1 review item(s) pending, oldest " in human.stdout
    assert "\x1b[" not in human.stdout  # not a terminal: no colour codes


def test_status_names_the_worker_holding_a_running_task(fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    fake.set_defaults(latency_ms=4000)
    server = hearth_server(registry(fake), task_poll_s=0.1)
    task_id = submit(server, payload={"text": "x", "model": "m"})
    eventually(lambda: admin_get(server, f"/api/v1/ai/tasks/{task_id}")["state"] == "running", what="running")
    events = admin_get(server, f"/api/v1/ai/tasks/{task_id}/events", format="json")["events"]
    worker = next(e["detail"]["worker"] for e in events if e["state"] == "running")
    assert worker == server.runtime.tasks.worker.id

    data = ok_json(hearth(["status", "--json"], server, tmp_path))
    assert data["queues"]["ai.summary"]["running"] == 1
    assert data["workers"][worker]["running"] == 1 and data["workers"][worker]["queues"] == ["ai.summary"]
    human = hearth(["status"], server, tmp_path)
    assert any(line.strip().startswith(worker) for line in human.stdout.splitlines()), human.stdout


def test_colours_only_when_asked_for_and_never_with_no_color(fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    server = hearth_server(registry(fake))
    forced = hearth(["status"], server, tmp_path, env={"FORCE_COLOR": "1"})
    assert forced.returncode == 0 and "\x1b[" in forced.stdout
    plain = hearth(["status"], server, tmp_path, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert plain.returncode == 0 and not COLOUR.search(plain.stdout) and COLOUR.search(forced.stdout)
    assert "ready" in plain.stdout


def test_status_with_a_bad_token_says_so(fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    server = hearth_server(registry(fake))
    out = hearth(["status"], server, tmp_path, token="nope")
    assert out.returncode == 1 and out.stdout == ""
    assert "error: A valid admin token is required. (HTTP 401, admin_token_required)" in out.stderr


def test_status_as_a_real_process(fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    """``python -m hearth status`` as an operator runs it: the entry point, the token from the environment."""
    server = hearth_server(registry(fake))
    out = hearth_process(["status", "--url", server.base_url], cwd=tmp_path,
                         env={"HEARTH_ADMIN_TOKEN": "admin-token-xyz"})
    assert out.returncode == 0, out.stderr
    assert "ready" in out.stdout and "openai-like" in out.stdout
    refused = hearth_process(["status", "--url", server.base_url], cwd=tmp_path, env={})
    assert refused.returncode == 1 and "admin_token_required" in refused.stderr and "Traceback" not in refused.stderr
