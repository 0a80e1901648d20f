"""A caller's signing key that cannot be decrypted never turns into "no key" (issue 7, item 9).

Before, a signing key stored under another master key was read as absent, so a caller that must sign
silently switched to the global ``HEARTH_SIGNATURE_KEY``. Now start-up is refused with a message naming
the caller, the refused start writes nothing (every row byte-identical), and a running process that
meets such a key on reload keeps its current snapshot instead of switching anyone to the global key.

The refusals are checked in this process (the settings ``hearth serve`` reads from the same environment,
then the start-up it runs, :func:`hearth.runtime.start_runtime`); one case also as a real ``hearth serve``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from hearth.auth.signing import signed_headers
from hearth.registry.config import RegistrySpec
from hearth.registry.key_vault import KeyVault, KeyVaultError, parse_master_key
from hearth.registry.store import apply_registry, bump_version
from hearth.runtime import start_runtime
from hearth.settings import Settings, load_settings
from hearth.store.db import create_engine, migrate
from hearth.store.tables import callers, metadata
from hearth.testing.server_thread import HearthServerThread, free_port
from tests.support import MASTER_KEY, write_config

KEY_A = MASTER_KEY
KEY_B = "22" * 32
KEY_C = "33" * 32
SIGNING_KEY = "billing-own-signing-key-0123456789"
GLOBAL_KEY = "global-signing-key-abcdefghijklmn"
CALLER_KEY = "billing-caller-key-0001"


def _registry(*, with_signing_key: bool) -> dict[str, Any]:
    caller: dict[str, Any] = {"name": "billing", "key": CALLER_KEY, "require_signature": True}
    if with_signing_key:
        caller["signing_key"] = SIGNING_KEY
    return {"providers": [{"name": "sim", "kind": "simulated"}],
            "endpoints": [{"name": "e", "provider": "sim", "upstream_model": "sim-1"}],
            "models": [{"name": "m", "endpoints": ["e"]}],
            "callers": [caller]}


async def _dump(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a stable order: what "the database did not change" is compared on."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            out = {}
            for table in metadata.sorted_tables:
                rows = (await conn.execute(select(table))).all()
                out[table.name] = sorted((tuple(r) for r in rows), key=repr)
            return out
    finally:
        await engine.dispose()


async def _seed(database_url: str, master_key: str) -> None:
    """The caller and its signing key as a process running with ``master_key`` stored them."""
    engine = create_engine(database_url)
    try:
        await migrate(engine)
        await apply_registry(engine, RegistrySpec.model_validate(_registry(with_signing_key=True)),
                             KeyVault(parse_master_key(master_key)))
    finally:
        await engine.dispose()


def _settings(tmp_path: Any, database_url: str, master_key: str, registry: dict[str, Any],
              **extra: Any) -> Settings:
    config = write_config(tmp_path / f"hearth-{master_key[:2]}.yaml", registry)
    return Settings(config=config, database_url=database_url, master_key=master_key,
                    require_signatures=True, signature_key=GLOBAL_KEY, registry_refresh_s=0.2, **extra)


def _serve_env(tmp_path: Path, database_url: str, master_key: str, registry: dict[str, Any]) -> dict[str, str]:
    """The HEARTH_* environment of the refused ``hearth serve``."""
    config = write_config(tmp_path / "refused.yaml", registry)
    return {"HEARTH_CONFIG": str(config), "HEARTH_DATABASE_URL": database_url, "HEARTH_MASTER_KEY": master_key,
            "HEARTH_REQUIRE_SIGNATURES": "true", "HEARTH_SIGNATURE_KEY": GLOBAL_KEY, "HEARTH_PORT": str(free_port())}


def _start_in_process(tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
                      caplog: pytest.LogCaptureFixture) -> tuple[KeyVaultError, str]:
    """``hearth serve``'s start-up in this process, in ``tmp_path``: the settings it reads from exactly
    these HEARTH_* variables, then :func:`start_runtime` (what its server runs before listening), which
    must refuse. (The exception, and what the process would print: its traceback and the log lines.)"""
    for name in [n for n in os.environ if n.startswith("HEARTH_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    caplog.set_level(settings.log_level.upper())  # `hearth serve` logs at this level
    with pytest.raises(KeyVaultError) as info:  # uncaught: the process exits non-zero
        asyncio.run(start_runtime(settings))
    printed = "".join(traceback.format_exception(info.value)) + "\n".join(
        f"{r.getMessage()} {getattr(r, 'hearth_fields', '')}" for r in caplog.records)
    return info.value, printed


def _serve(tmp_path: Path, database_url: str, master_key: str, registry: dict[str, Any]) -> tuple[int, str]:
    """Run ``hearth serve`` as an operator would; (exit code, everything it printed)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update(_serve_env(tmp_path, database_url, master_key, registry))
    proc = subprocess.Popen([sys.executable, "-m", "hearth", "serve"], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        out, _ = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        pytest.fail(f"hearth serve started with the wrong master key:\n{out}")
    return proc.returncode, out


def _refused_registry(config: str) -> dict[str, Any]:
    registry = _registry(with_signing_key=config == "key-also-in-config")
    if config == "config-changes-the-registry":  # the apply at start has something to write
        registry["endpoints"][0]["upstream_model"] = "sim-2"
        registry["callers"][0]["enabled"] = False
    return registry


@pytest.mark.parametrize("config", ["key-only-in-db", "key-also-in-config", "config-changes-the-registry"])
def test_start_with_another_master_key_is_refused_naming_the_caller_and_writes_nothing(
        tmp_path, database_url, config, monkeypatch, caplog):
    asyncio.run(_seed(database_url, KEY_A))
    before = asyncio.run(_dump(database_url))
    env = _serve_env(tmp_path, database_url, KEY_B, _refused_registry(config))
    exc, out = _start_in_process(tmp_path, env, monkeypatch, caplog)
    assert "cannot decrypt the signing key of caller 'billing'" in str(exc), out
    assert SIGNING_KEY not in out and KEY_A not in out and KEY_B not in out
    assert asyncio.run(_dump(database_url)) == before  # byte-identical: nothing re-encrypted, nothing bumped


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # both kinds refuse in the test above
def test_hearth_serve_with_another_master_key_exits_non_zero_naming_the_caller_and_writes_nothing(
        tmp_path, database_url):
    """The operator's view of the refusal above, as a real ``hearth serve`` process (the apply at start
    has something to write)."""
    asyncio.run(_seed(database_url, KEY_A))
    before = asyncio.run(_dump(database_url))
    code, out = _serve(tmp_path, database_url, KEY_B, _refused_registry("config-changes-the-registry"))
    assert code != 0, out
    assert "cannot decrypt the signing key of caller 'billing'" in out, out
    assert SIGNING_KEY not in out and KEY_A not in out and KEY_B not in out
    assert asyncio.run(_dump(database_url)) == before  # byte-identical: nothing re-encrypted, nothing bumped


async def _logged(caplog: pytest.LogCaptureFixture, event: str, *, times: int, within_s: float = 10.0) -> None:
    """Wait until the server (a thread of this process) has logged ``event`` ``times`` times."""
    give_up = time.monotonic() + within_s
    while sum(r.getMessage() == event for r in caplog.records) < times:
        assert time.monotonic() < give_up, f"{event!r} was not logged {times} times within {within_s:g} s"
        await asyncio.sleep(0.02)


async def test_a_running_process_never_switches_a_caller_to_the_global_key(tmp_path, database_url, http,
                                                                           redis_prefix, caplog):
    caplog.set_level(logging.WARNING, logger="hearth.runtime")
    await _seed(database_url, KEY_A)
    # the redis backend: the test writes to the database from outside while the server holds it
    settings = _settings(tmp_path, database_url, KEY_A, _registry(with_signing_key=False),
                         state_backend="redis", redis_prefix=redis_prefix)
    server = HearthServerThread(settings).start()
    try:
        url = server.base_url + "/v1/models"
        auth = {"Authorization": f"Bearer {CALLER_KEY}"}
        ok = await http.get(url, headers={**auth, **signed_headers(SIGNING_KEY, "GET", url)})
        assert ok.status_code == 200, ok.text
        # someone stores the caller's signing key under a master key this process does not have
        engine = create_engine(database_url)
        try:
            async with engine.begin() as conn:
                foreign = KeyVault(parse_master_key(KEY_C)).encrypt(SIGNING_KEY, "caller-signing:billing")
                await conn.execute(callers.update().where(callers.c.name == "billing").values(
                    signing_key_enc=foreign))
                await bump_version(conn)
        finally:
            await engine.dispose()
        await _logged(caplog, "registry_refresh_failed", times=2)  # two refreshes that kept the old snapshot
        for _ in range(3):
            r = await http.get(url, headers={**auth, **signed_headers(GLOBAL_KEY, "GET", url)})
            assert r.status_code == 401 and r.json()["error"]["code"] == "signature_invalid", r.text
        still = await http.get(url, headers={**auth, **signed_headers(SIGNING_KEY, "GET", url)})
        assert still.status_code == 200, still.text  # the last good snapshot is kept
    finally:
        server.stop()
