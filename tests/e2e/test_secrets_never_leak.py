"""Provider keys never appear in any response or any log line of a real server process."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hearth.testing.fake_upstream import FakeBehavior
from tests.e2e import processes
from tests.support import ADMIN, AUTH, MASTER_KEY, chat_body, gateway_registry, write_config

SECRET_A = "sk-live-TOPSECRETvalueAAAA-9x2a"
SECRET_B = "sk-ant-TOPSECRETvalueBBBB-7y3b"


async def test_keys_are_masked_everywhere(tmp_path: Path, fake: Any, fake2: Any, http: Any) -> None:
    registry = gateway_registry([
        {"name": "a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up",
         "api_key": SECRET_A, "priority": 0},
        {"name": "b", "provider": "anthropic-like", "base_url": fake2.base_url, "upstream_model": "claude",
         "api_key": SECRET_B, "priority": 1}])
    config = write_config(tmp_path / "hearth.yaml", registry)
    env = {"HEARTH_CONFIG": config, "HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/h.db",
           "HEARTH_MASTER_KEY": MASTER_KEY, "HEARTH_ADMIN_TOKEN": "admin-token-xyz", "HEARTH_LOG_LEVEL": "debug"}
    proc = processes.start(tmp_path, env)
    try:
        bodies: list[str] = []

        async def call(method: str, path: str, **kw: Any) -> None:
            r = await http.request(method, proc.base_url + path, **kw)
            bodies.append(r.text + str(r.headers))

        fake.script(FakeBehavior(status=401), FakeBehavior(status=500))  # 401 → disable + alert log
        await call("POST", "/v1/chat/completions", json=chat_body(), headers=AUTH)
        await call("POST", "/v1/chat/completions", json=chat_body(stream=True), headers=AUTH)
        fake2.set_defaults(status=500)
        await call("POST", "/v1/chat/completions", json=chat_body(), headers=AUTH)
        for path in ("/api/v1/admin/endpoints", "/api/v1/admin/providers", "/api/v1/admin/endpoints/a/status",
                     "/api/v1/admin/endpoints/b/status", "/openapi.json"):
            await call("GET", path, headers=ADMIN)
        await asyncio.sleep(0.8)
        await call("GET", "/api/v1/request-logs", headers=ADMIN)
        assert fake.stats.last_headers.get("Authorization") == f"Bearer {SECRET_A}"  # the key did go upstream
        assert fake2.stats.last_headers.get("x-api-key") == SECRET_B
    finally:
        proc.stop()
    log = proc.output()
    assert "endpoint_disabled_alert" in log
    everything = "\n".join(bodies) + log
    for secret in (SECRET_A, SECRET_B, "TOPSECRET", MASTER_KEY):
        assert secret not in everything
    assert "sk-****9x2a" in "\n".join(bodies)
