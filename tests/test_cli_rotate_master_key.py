"""`hearth rotate-master-key`: every secret moves to the new key in one transaction, or nothing does.

On SQLite and PostgreSQL; afterwards a real server started with only the new key serves a caller that
signs with its own key. The command runs in this process (``tests.support.hearth_in_process``: its exit
code, stdout and stderr, with exactly the HEARTH_* environment given); a rotation that cannot read one
value is also run as a real ``python -m hearth`` process, as an operator sees it.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sqlalchemy import select

from hearth.auth.signing import signed_headers
from hearth.registry.callers import signing_key_context
from hearth.registry.key_vault import KeyVault, KeyVaultError, parse_master_key
from hearth.registry.store import load_registry
from hearth.settings import Settings
from hearth.store.db import create_engine
from hearth.store.tables import callers, metadata
from hearth.testing.server_thread import HearthServerThread
from tests.support import hearth_in_process, hearth_process

OLD = "aa" * 32
NEW = "bb" * 32
STRANGER = "cc" * 32
API_KEY = "sk-rotate-endpoint-0000001"
SIGNING_KEY = "rotate-signing-key-0123456789"
REGISTRY: dict[str, Any] = {
    "providers": [{"name": "sim", "kind": "simulated"}],
    "endpoints": [{"name": "e", "provider": "sim", "upstream_model": "sim-1", "api_key": API_KEY}],
    "models": [{"name": "m", "endpoints": ["e"]}],
    "callers": [{"name": "billing", "key": "billing-key-0001", "signing_key": SIGNING_KEY, "require_signature": True},
                {"name": "ops", "key": "ops-key-0001", "signing_key": "ops-signing-key-0123456789"}],
}


def _env(database_url: str, master_key: str | None, env_extra: dict[str, str]) -> dict[str, str]:
    env = {"HEARTH_DATABASE_URL": database_url}
    if master_key is not None:
        env["HEARTH_MASTER_KEY"] = master_key
    env.update(env_extra)
    return env


def _hearth(args: list[str], cwd: Path, database_url: str, master_key: str | None = OLD,
            **env_extra: str) -> subprocess.CompletedProcess[str]:
    """``hearth ARGS`` in this process, with only these HEARTH_* variables."""
    return hearth_in_process(args, cwd=cwd, env=_env(database_url, master_key, env_extra))


def _hearth_process(args: list[str], cwd: Path, database_url: str, master_key: str | None = OLD,
                    **env_extra: str) -> subprocess.CompletedProcess[str]:
    """``python -m hearth ARGS`` as a real process, with only these HEARTH_* variables."""
    return hearth_process(args, cwd=cwd, env=_env(database_url, master_key, env_extra))


def _applied(tmp_path: Path, database_url: str) -> None:
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    out = _hearth(["apply", str(path)], tmp_path, database_url)
    assert out.returncode == 0, out.stderr


def _key_file(tmp_path: Path, key: str) -> Path:
    path = tmp_path / "new.key"
    path.write_text(key + "\n")
    return path


async def _dump(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            return {t.name: sorted((tuple(r) for r in (await conn.execute(select(t))).all()), key=repr)
                    for t in metadata.sorted_tables}
    finally:
        await engine.dispose()


async def _load(database_url: str, key: str) -> Any:
    engine = create_engine(database_url)
    try:
        return await load_registry(engine, KeyVault(parse_master_key(key)))
    finally:
        await engine.dispose()


def test_rotation_moves_every_secret_and_a_server_on_the_new_key_serves_signed_callers(tmp_path, database_url):
    _applied(tmp_path, database_url)
    out = _hearth(["rotate-master-key", "--new-key-file", str(_key_file(tmp_path, NEW))], tmp_path, database_url)
    assert out.returncode == 0, out.stderr
    assert "re-encrypted 1 endpoint API key(s) and 2 caller signing key(s); 0 already" in out.stdout
    assert NEW not in out.stdout + out.stderr and OLD not in out.stdout + out.stderr
    registry = asyncio.run(_load(database_url, NEW))
    assert registry.endpoints["e"].api_key == API_KEY
    assert registry.callers_by_name["billing"].signing_key == SIGNING_KEY
    try:
        asyncio.run(_load(database_url, OLD))
    except KeyVaultError:
        pass
    else:
        raise AssertionError("the old master key still reads the rotated values")

    # running it again (same two keys, e.g. after an interrupted rollout) has nothing left to do
    again = _hearth(["rotate-master-key"], tmp_path, database_url, HEARTH_NEW_MASTER_KEY=NEW)
    assert again.returncode == 0, again.stderr
    assert "re-encrypted 0 endpoint API key(s) and 0 caller signing key(s); 3 already" in again.stdout

    config = tmp_path / "serve.yaml"
    config.write_text(yaml.safe_dump({"server": {}, **REGISTRY}))
    server = HearthServerThread(Settings(config=config, database_url=database_url, master_key=NEW)).start()
    try:
        url = server.base_url + "/v1/models"
        auth = {"Authorization": "Bearer billing-key-0001"}
        r = httpx.get(url, headers={**auth, **signed_headers(SIGNING_KEY, "GET", url)})
        assert r.status_code == 200, r.text
        assert httpx.get(url, headers=auth).json()["error"]["code"] == "signature_required"
    finally:
        server.stop()


async def _store_ops_key_under_a_stranger(database_url: str) -> None:
    engine = create_engine(database_url)
    try:
        async with engine.begin() as conn:  # "ops" sorts after "billing": billing is rewritten first
            token = KeyVault(parse_master_key(STRANGER)).encrypt("x-signing-key-0123456", signing_key_context("ops"))
            await conn.execute(callers.update().where(callers.c.name == "ops").values(signing_key_enc=token))
    finally:
        await engine.dispose()


def _a_rotation_that_cannot_read_one_value(tmp_path: Path, database_url: str,
                                           hearth: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    _applied(tmp_path, database_url)
    asyncio.run(_store_ops_key_under_a_stranger(database_url))
    before = asyncio.run(_dump(database_url))
    out = hearth(["rotate-master-key", "--new-key-file", str(_key_file(tmp_path, NEW))], tmp_path, database_url)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "the signing key of caller 'ops'" in out.stderr and "Nothing was changed" in out.stderr
    assert asyncio.run(_dump(database_url)) == before


def test_a_rotation_that_cannot_read_one_value_changes_nothing(tmp_path, database_url):
    _a_rotation_that_cannot_read_one_value(tmp_path, database_url, _hearth)


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # both kinds in the test above
def test_the_real_command_refuses_that_rotation_with_exit_2_and_changes_nothing(tmp_path, database_url):
    """The operator's view of the test above: ``python -m hearth rotate-master-key`` as a real process."""
    _a_rotation_that_cannot_read_one_value(tmp_path, database_url, _hearth_process)


def test_a_dry_run_reports_and_writes_nothing(tmp_path, database_url):
    _applied(tmp_path, database_url)
    before = asyncio.run(_dump(database_url))
    out = _hearth(["rotate-master-key", "--dry-run"], tmp_path, database_url, HEARTH_NEW_MASTER_KEY=NEW)
    assert out.returncode == 0, out.stderr
    assert "would re-encrypt 1 endpoint API key(s) and 2 caller signing key(s)" in out.stdout
    assert asyncio.run(_dump(database_url)) == before


def test_bad_invocations_exit_2_and_change_nothing(tmp_path, database_url):
    _applied(tmp_path, database_url)
    before = asyncio.run(_dump(database_url))
    cases = [
        ([], {}, OLD, "--new-key-file PATH or HEARTH_NEW_MASTER_KEY"),
        ([], {"HEARTH_NEW_MASTER_KEY": OLD}, OLD, "the new master key is the current one"),
        ([], {"HEARTH_NEW_MASTER_KEY": "too-short"}, OLD, "32 bytes"),
        (["--new-key-file", str(tmp_path / "missing.key")], {}, OLD, "cannot read the new key file"),
        ([], {"HEARTH_NEW_MASTER_KEY": NEW, "HEARTH_MASTER_KEY_FILE": str(tmp_path / "none.key")}, None,
         "no current master key"),
        ([], {"HEARTH_NEW_MASTER_KEY": NEW}, STRANGER, "cannot decrypt the API key of endpoint 'e'"),
    ]
    for args, env, current, message in cases:
        out = _hearth(["rotate-master-key", *args], tmp_path, database_url, current, **env)
        assert out.returncode == 2 and message in out.stderr, (args, env, out.stdout, out.stderr)
    assert not (tmp_path / "none.key").exists()  # a missing current key is never generated here
    assert asyncio.run(_dump(database_url)) == before
