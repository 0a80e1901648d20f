"""Helpers of the task API tests (plain functions, imported by test modules)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support import AUTH

TASKS = "/api/v1/ai/tasks"


async def finished(http: httpx.AsyncClient, server: Any, task_id: str, within_s: float = 15.0,
                   headers: dict[str, str] = AUTH) -> dict[str, Any]:
    """The task once it is terminal or held (fails after ``within_s``)."""
    loop = asyncio.get_running_loop()
    until = loop.time() + within_s
    while True:
        r = await http.get(f"{server.base_url}{TASKS}/{task_id}", headers=headers)
        assert r.status_code == 200, r.text
        task: dict[str, Any] = r.json()["data"]
        if task["terminal"] or task["state"] == "hold":
            return task
        assert loop.time() < until, f"task still {task['state']}"
        await asyncio.sleep(0.05)
