"""Start-up checks the registry (issue 8, item 11; seed 000): at least one enabled provider and one enabled
model with an enabled endpoint. A warning by default; with ``HEARTH_REGISTRY_STRICT`` a refusal to start
with a clear message, a non-zero exit, and nothing written to the database.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from hearth.registry.config import RegistrySpec
from hearth.registry.key_vault import KeyVault, parse_master_key
from hearth.registry.serviceable import RegistryNotServiceable, serviceability_problems
from hearth.registry.snapshot import Endpoint, Model, Registry
from hearth.registry.store import apply_registry, set_endpoint_enabled
from hearth.runtime import start_runtime
from hearth.settings import Settings
from hearth.store.db import create_engine, migrate
from hearth.store.tables import metadata
from hearth.testing.server_thread import free_port
from tests.support import MASTER_KEY, write_config


def _registry(*, endpoint_enabled: bool = True, provider_enabled: bool = True,
              model_enabled: bool = True) -> dict[str, Any]:
    return {"providers": [{"name": "sim", "kind": "simulated", "enabled": provider_enabled}],
            "endpoints": [{"name": "e", "provider": "sim", "upstream_model": "sim-1", "enabled": endpoint_enabled}],
            "models": [{"name": "m", "endpoints": ["e"], "enabled": model_enabled}],
            "callers": [{"name": "app", "key": "startup-check-key-1"}]}


def _settings(tmp_path: Path, database_url: str, registry: dict[str, Any] | None, **extra: Any) -> Settings:
    config = write_config(tmp_path / "hearth.yaml", registry) if registry is not None else None
    return Settings(config=config, database_url=database_url, master_key=MASTER_KEY, **extra)


async def _dump(database_url: str) -> dict[str, list[tuple[Any, ...]]]:
    engine = create_engine(database_url)
    try:
        await migrate(engine)
        async with engine.connect() as conn:
            return {t.name: sorted((tuple(r) for r in (await conn.execute(select(t))).all()), key=repr)
                    for t in metadata.sorted_tables}
    finally:
        await engine.dispose()


# --------------------------------------------------------------------------- the rule


def _ep(name: str, *, enabled: bool = True, reason: str | None = None) -> Endpoint:
    return Endpoint(name=name, provider="p", kind="simulated", base_url="simulated://local", upstream_model="u",
                    enabled=enabled, disabled_reason=reason)


def test_a_registry_with_an_enabled_model_on_an_enabled_endpoint_is_serviceable() -> None:
    ep = _ep("e")
    registry = Registry(endpoints={"e": ep}, models={"m": Model(name="m", kind="chat", endpoints=(ep,))},
                        enabled_providers=frozenset({"p"}))
    assert serviceability_problems(registry) == []


def test_an_empty_registry_names_both_problems() -> None:
    assert serviceability_problems(Registry()) == ["no enabled provider", "no enabled model"]


def test_a_model_whose_endpoints_are_all_disabled_is_named_with_the_reasons() -> None:
    ep = _ep("e", enabled=False, reason="upstream answered 401: credentials rejected")
    registry = Registry(endpoints={"e": ep}, models={"m": Model(name="m", kind="chat", endpoints=(ep,)),
                                                     "off": Model(name="off", kind="chat", endpoints=(),
                                                                  enabled=False)},
                        enabled_providers=frozenset({"p"}))
    assert serviceability_problems(registry) == [
        "no enabled model has an enabled endpoint (m: e [upstream answered 401: credentials rejected])"]


# --------------------------------------------------------------------------- at start


async def test_by_default_an_empty_registry_starts_with_a_warning(tmp_path, database_url, caplog):
    rt = await start_runtime(_settings(tmp_path, database_url, None))
    try:
        warnings = [r for r in caplog.records if r.getMessage() == "registry_not_serviceable"]
        assert len(warnings) == 1
        fields = warnings[0].hearth_fields
        assert fields["problems"] == ["no enabled provider", "no enabled model"]
        assert "HEARTH_REGISTRY_STRICT" in fields["hint"]
    finally:
        await rt.stop()


async def test_strict_mode_refuses_an_empty_registry_and_can_start_once_it_is_filled(tmp_path, database_url):
    settings = _settings(tmp_path, database_url, None, registry_strict=True)
    with pytest.raises(RegistryNotServiceable) as info:
        await start_runtime(settings)
    message = str(info.value)
    assert "no enabled provider" in message and "no enabled model" in message
    assert "HEARTH_REGISTRY_STRICT" in message
    assert info.value.code != 0
    # the refused start left no lock behind: with a registry the same database starts
    rt = await start_runtime(_settings(tmp_path, database_url, _registry(), registry_strict=True))
    await rt.stop()


@pytest.mark.parametrize("registry", [_registry(endpoint_enabled=False), _registry(provider_enabled=False),
                                      _registry(model_enabled=False)],
                         ids=["endpoint-disabled", "provider-disabled", "model-disabled"])
async def test_strict_mode_refuses_a_config_that_serves_nothing_and_writes_none_of_it(
        tmp_path, database_url, registry):
    before = await _dump(database_url)
    with pytest.raises(RegistryNotServiceable):
        await start_runtime(_settings(tmp_path, database_url, registry, registry_strict=True))
    assert await _dump(database_url) == before


async def test_strict_mode_refuses_when_the_only_endpoint_is_held_disabled(tmp_path, database_url):
    engine = create_engine(database_url)
    try:
        await migrate(engine)
        vault = KeyVault(parse_master_key(MASTER_KEY))
        await apply_registry(engine, RegistrySpec.model_validate(_registry()), vault)
        await set_endpoint_enabled(engine, "e", False, "upstream answered 401: credentials rejected", by="gateway")
    finally:
        await engine.dispose()
    with pytest.raises(RegistryNotServiceable) as info:
        await start_runtime(_settings(tmp_path, database_url, _registry(), registry_strict=True))
    assert "upstream answered 401: credentials rejected" in str(info.value)


def test_hearth_serve_in_strict_mode_exits_non_zero_with_the_reason(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update(HEARTH_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path}/h.db", HEARTH_MASTER_KEY=MASTER_KEY,
               HEARTH_REGISTRY_STRICT="true", HEARTH_PORT=str(free_port()))
    proc = subprocess.run([sys.executable, "-m", "hearth", "serve"], cwd=tmp_path, env=env, text=True,
                          capture_output=True, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "the registry cannot serve any call" in out and "no enabled model" in out, out
    assert '"event":"start_refused"' in out  # said in one log line, not only inside a traceback
    assert asyncio.run(_dump(f"sqlite+aiosqlite:///{tmp_path}/h.db"))["providers"] == []
