"""`hearth apply` stores the file's `mcp_servers:` idempotently, a new credential replaces the stored one,
and an omitted credential keeps it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from hearth.registry.key_vault import KeyVault
from hearth.store.tables import mcp_servers
from tests.mcp_gateway.support import table_rows
from tests.support import MASTER_KEY, hearth_in_process


def _apply(tmp_path: Path, servers: list[dict[str, Any]]) -> str:
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump({"mcp_servers": servers}))
    done = hearth_in_process(["apply", str(path)], cwd=tmp_path, env={
        "HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/h.db", "HEARTH_MASTER_KEY": MASTER_KEY})
    assert done.returncode == 0, done.stderr
    assert "tok-" not in done.stdout + done.stderr
    return done.stdout


def test_apply_stores_servers_once_and_keeps_an_omitted_credential(tmp_path: Path) -> None:
    server = {"name": "files", "url": "http://127.0.0.1:9/mcp", "credential": "tok-one-0001",
              "rules": [{"effect": "allow", "callers": ["*"], "tools": ["read_*"]}]}
    first = _apply(tmp_path, [server])
    again = _apply(tmp_path, [server])
    kept = _apply(tmp_path, [{k: v for k, v in server.items() if k != "credential"}])
    rows = asyncio.run(table_rows(f"sqlite+aiosqlite:///{tmp_path}/h.db", mcp_servers))
    vault = KeyVault(bytes.fromhex(MASTER_KEY))
    assert "mcp_server:files" in first and again.strip() == kept.strip() == "unchanged: 1"
    assert vault.decrypt(rows[0]["credential_enc"], "mcp:files") == "tok-one-0001"
    changed = _apply(tmp_path, [{**server, "credential": "tok-two-0002"}])
    rows = asyncio.run(table_rows(f"sqlite+aiosqlite:///{tmp_path}/h.db", mcp_servers))
    assert "updated: mcp_server:files" in changed
    assert vault.decrypt(rows[0]["credential_enc"], "mcp:files") == "tok-two-0002"
    assert rows[0]["rules"] == [{"effect": "allow", "callers": ["*"], "tools": ["read_*"]}]


def test_rotate_master_key_re_encrypts_mcp_credentials(tmp_path: Path) -> None:
    _apply(tmp_path, [{"name": "files", "url": "http://127.0.0.1:9/mcp", "credential": "tok-rot-0003"}])
    new = "bb" * 32
    env = {"HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/h.db", "HEARTH_MASTER_KEY": MASTER_KEY,
           "HEARTH_NEW_MASTER_KEY": new}
    dry = hearth_in_process(["rotate-master-key", "--dry-run"], cwd=tmp_path, env=env)
    done = hearth_in_process(["rotate-master-key"], cwd=tmp_path, env=env)
    again = hearth_in_process(["rotate-master-key"], cwd=tmp_path, env=env)
    rows = asyncio.run(table_rows(f"sqlite+aiosqlite:///{tmp_path}/h.db", mcp_servers))
    assert dry.returncode == done.returncode == again.returncode == 0, done.stderr
    assert "would re-encrypt 1 MCP server credential(s)" in dry.stdout
    assert "re-encrypted 1 MCP server credential(s); 0 already" in done.stdout
    assert "re-encrypted 0 MCP server credential(s); 1 already" in again.stdout
    assert KeyVault(bytes.fromhex(new)).decrypt(rows[0]["credential_enc"], "mcp:files") == "tok-rot-0003"
