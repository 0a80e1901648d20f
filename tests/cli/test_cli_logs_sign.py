"""``hearth logs tail`` and ``hearth sign`` against a real Hearth server.

``sign`` is checked the way an operator uses it: ``--send`` gets 200 from a server that requires
signatures, and the printed curl command, run by the real ``curl`` in a shell, gets 200 once (its
nonce is then spent). Neither the signing key nor the caller's key ever appears in the output.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from hearth.operator_cli.client import AdminClient
from hearth.operator_cli.logs import LogFollower
from tests.cli.helpers import admin_get, chat, eventually, hearth, ok_json, registry
from tests.support import hearth_in_process

SIGNING_KEY = "cli-signing-key-0123456789abcdef"
CALLER_KEY = "test-key-123"
CHAT = json.dumps({"model": "m", "messages": [{"role": "user", "content": "你好, signed"}]}, ensure_ascii=False)


def _logged(server: Any, n: int) -> list[dict[str, Any]]:
    """The request logs, newest first, once there are at least ``n`` (the writer flushes every 50 ms)."""
    def rows() -> list[dict[str, Any]] | None:
        items: list[dict[str, Any]] = admin_get(server, "/api/v1/request-logs", limit=100)["items"]
        return items if len(items) >= n else None

    found: list[dict[str, Any]] = eventually(rows, what=f"{n} request logs")
    return found


def test_logs_tail_prints_the_newest_rows_oldest_first(fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    server = hearth_server(registry(fake))
    for word in ("one", "two", "three"):
        assert chat(server, word).status_code == 200
    rows = _logged(server, 3)
    out = hearth(["logs", "tail", "-n", "2"], server, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[-1] for line in lines] == [rows[1]["request_id"], rows[0]["request_id"]]
    assert all(" 200 tester chat m@a " in line for line in lines)

    as_json = hearth(["logs", "tail", "-n", "3", "--json"], server, tmp_path)
    assert [json.loads(line)["id"] for line in as_json.stdout.splitlines()] == [r["id"] for r in rows[::-1]]
    assert hearth(["logs", "tail", "--caller", "nobody"], server, tmp_path).stdout == ""


def test_the_follower_prints_each_new_row_once(fake: Any, hearth_server: Any) -> None:
    server = hearth_server(registry(fake))
    assert chat(server, "before").status_code == 200
    (before,) = _logged(server, 1)
    follower = LogFollower(AdminClient(server.base_url, "admin-token-xyz"), {"caller": "tester"})
    assert [r["id"] for r in follower.first(5)] == [before["id"]]
    assert follower.poll() == ([], False)
    for word in ("a", "b", "c"):
        assert chat(server, word).status_code == 200
    new = [r for r in _logged(server, 4) if r["id"] != before["id"]]
    rows, gap = follower.poll()
    assert [r["id"] for r in rows] == sorted(r["id"] for r in new) and not gap
    assert follower.poll() == ([], False)


def follow_while_calling(server: Any, tmp_path: Path, max_rows: int) -> list[int]:
    """Run ``logs tail -f -n 1 --max-rows N`` while chat calls keep coming; the ids it printed."""
    result: dict[str, subprocess.CompletedProcess[str]] = {}

    def follow() -> None:
        result["out"] = hearth_in_process(
            ["logs", "tail", "-f", "-n", "1", "--interval", "0.1", "--max-rows", str(max_rows), "--json", "--url",
             server.base_url], cwd=tmp_path, env={"HEARTH_ADMIN_TOKEN": "admin-token-xyz"})

    thread = threading.Thread(target=follow)
    thread.start()
    calls = 0
    while thread.is_alive() and calls < 200:
        assert chat(server, f"call {calls}").status_code == 200
        calls += 1
        thread.join(timeout=0.05)
    thread.join(timeout=30)
    assert not thread.is_alive()
    out = result["out"]
    assert out.returncode == 0, out.stderr
    return [json.loads(line)["id"] for line in out.stdout.splitlines()]


def test_logs_tail_follow_prints_new_rows_in_order_without_gaps(fake: Any, hearth_server: Any,
                                                                tmp_path: Path) -> None:
    """The command itself: calls keep coming while it follows; it stops after --max-rows new rows."""
    server = hearth_server(registry(fake))
    assert chat(server, "before").status_code == 200
    _logged(server, 1)
    printed = follow_while_calling(server, tmp_path, max_rows=3)
    every = sorted(r["id"] for r in _logged(server, printed[-1]))
    assert len(printed) == 4 and printed == sorted(set(printed))
    start = every.index(printed[0])
    assert printed == every[start:start + 4]  # consecutive: nothing skipped, nothing twice


def test_logs_tail_follow_never_prints_a_row_older_than_the_ones_shown_first(
        fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    """`-n 1` shows the newest row; the row before it is not new and is never printed by the follow."""
    server = hearth_server(registry(fake))
    for text in ("older", "newest"):
        assert chat(server, text).status_code == 200
    before = sorted(r["id"] for r in _logged(server, 2))
    printed = follow_while_calling(server, tmp_path, max_rows=1)
    assert printed[0] >= before[-1] and before[0] not in printed and printed == sorted(printed), printed


def test_logs_tail_with_a_bad_token(fake: Any, hearth_server: Any, tmp_path: Path) -> None:
    server = hearth_server(registry(fake))
    out = hearth(["logs", "tail"], server, tmp_path, token="nope")
    assert out.returncode == 1 and "admin_token_required" in out.stderr


def _sign(args: list[str], server: Any, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    secrets = {"HEARTH_SIGNING_KEY": SIGNING_KEY, "HEARTH_CALLER_KEY": CALLER_KEY, **env}
    return hearth_in_process(["sign", *args, "--url", server.base_url], cwd=cwd, env=secrets)


def _no_secret_in(out: subprocess.CompletedProcess[str]) -> None:
    for secret in (SIGNING_KEY, CALLER_KEY):
        assert secret not in out.stdout and secret not in out.stderr


@pytest.fixture
def signing_server(fake: Any, hearth_server: Any) -> Any:
    return hearth_server(registry(fake, signing_key=SIGNING_KEY, require_signature=True))


def test_sign_and_send_gets_200_from_a_server_requiring_signatures(signing_server: Any, tmp_path: Path) -> None:
    assert chat(signing_server).status_code == 401  # unsigned: refused
    sent = _sign(["POST", "/v1/chat/completions", "--data", CHAT, "--send", "--json"], signing_server, tmp_path)
    assert sent.returncode == 0, sent.stderr
    answer = json.loads(sent.stdout)
    assert answer["status"] == 200 and answer["body"]["choices"][0]["message"]["content"]
    _no_secret_in(sent)

    (tmp_path / "body.json").write_text(CHAT)
    from_file = _sign(["post", "/v1/chat/completions", "--data-file", "body.json", "--send"], signing_server,
                      tmp_path)
    assert from_file.returncode == 0 and "HTTP 200" in from_file.stderr
    got = _sign(["GET", "/v1/models?limit=5", "--send", "--json"], signing_server, tmp_path)
    assert ok_json(got)["status"] == 200

    wrong_key = _sign(["GET", "/v1/models", "--send"], signing_server, tmp_path, HEARTH_SIGNING_KEY="not-the-key")
    assert wrong_key.returncode == 1 and "signature_invalid" in wrong_key.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_printed_curl_command_gets_200_once(signing_server: Any, tmp_path: Path) -> None:
    printed = _sign(["POST", "/v1/chat/completions", "--data", CHAT], signing_server, tmp_path)
    assert printed.returncode == 0, printed.stderr
    command = printed.stdout.strip()
    assert command.startswith("curl --path-as-is -X POST") and '"Authorization: Bearer $HEARTH_CALLER_KEY"' in command
    _no_secret_in(printed)

    def run() -> tuple[int, dict[str, Any]]:
        done = subprocess.run(["bash", "-c", command + " -s -w '\\n%{http_code}'"], cwd=tmp_path, text=True,
                              capture_output=True, env={"PATH": "/usr/bin:/bin", "HEARTH_CALLER_KEY": CALLER_KEY},
                              timeout=30, check=True)
        body, _, status = done.stdout.rpartition("\n")
        return int(status), json.loads(body)

    status, body = run()
    assert status == 200 and body["choices"][0]["message"]["content"]
    status, body = run()
    assert status == 401 and body["error"]["code"] == "nonce_replayed"


def test_sign_refuses_missing_secrets_and_unencoded_paths(signing_server: Any, tmp_path: Path) -> None:
    no_key = hearth_in_process(["sign", "GET", "/v1/models", "--url", signing_server.base_url], cwd=tmp_path,
                               env={"HEARTH_CALLER_KEY": CALLER_KEY})
    assert no_key.returncode == 2 and "set HEARTH_SIGNING_KEY" in no_key.stderr
    raw = _sign(["GET", "/v1/files/合同 2024.pdf"], signing_server, tmp_path)
    assert raw.returncode == 2 and "percent-encode" in raw.stderr
    relative = _sign(["GET", "v1/models"], signing_server, tmp_path)
    assert relative.returncode == 2 and "starts with '/'" in relative.stderr
