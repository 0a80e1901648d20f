"""Helpers of the operator CLI tests: run ``hearth …`` in this process against a real Hearth server."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.support import ADMIN, AUTH, gateway_registry, hearth_in_process

ADMIN_TOKEN = "admin-token-xyz"
TEXT = "Hearth runs long AI jobs. They survive crashes. Results are kept."


def registry(fake: Any, **caller: Any) -> dict[str, Any]:
    """One endpoint ``a`` on ``fake`` for model ``m``; caller ``tester`` (key ``test-key-123``) with ``caller``."""
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up"}])
    reg["callers"] = [{"name": "tester", "key": "test-key-123", **caller}]
    return reg


def hearth(args: list[str], server: Any, cwd: Path, *, token: str | None = ADMIN_TOKEN,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``hearth ARGS --url SERVER`` in this process, the admin token in HEARTH_ADMIN_TOKEN; wide output."""
    full = {"COLUMNS": "250", **({"HEARTH_ADMIN_TOKEN": token} if token is not None else {}), **(env or {})}
    return hearth_in_process([*args, "--url", server.base_url], cwd=cwd, env=full)


def ok_json(out: subprocess.CompletedProcess[str]) -> Any:
    assert out.returncode == 0, (out.stdout, out.stderr)
    return json.loads(out.stdout)


def submit(server: Any, **body: Any) -> str:
    r = httpx.post(server.base_url + "/api/v1/ai/tasks", headers=AUTH,
                   json={"task_type": "summarize_async", "payload": {"text": TEXT}, **body})
    assert r.status_code == 202, r.text
    task_id: str = r.json()["data"]["task_id"]
    return task_id


def admin_get(server: Any, path: str, **params: Any) -> Any:
    r = httpx.get(server.base_url + path, headers=ADMIN, params=params)
    assert r.status_code == 200, r.text
    return r.json()["data"]


def admin_post(server: Any, path: str, body: dict[str, Any]) -> Any:
    r = httpx.post(server.base_url + path, headers=ADMIN, json=body)
    assert r.status_code in (200, 201), r.text
    return r.json()["data"]


def chat(server: Any, content: str = "hello") -> httpx.Response:
    return httpx.post(server.base_url + "/v1/chat/completions", headers=AUTH,
                      json={"model": "m", "messages": [{"role": "user", "content": content}]})


def eventually(check: Callable[[], Any], *, within_s: float = 15.0, what: str = "condition") -> Any:
    """Poll ``check`` until it returns a truthy value (the server works in its own thread)."""
    until = time.monotonic() + within_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < until, f"{what} not reached within {within_s} s"
        time.sleep(0.05)
