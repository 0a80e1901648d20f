"""Operator intent survives ``hearth apply`` and restarts (issue 8, item 11).

An endpoint the gateway disabled (its upstream rejected the key) or an operator disabled (admin API) is
*held*: applying the same file again, or restarting the server over the same database, keeps it disabled
and reports it as kept disabled, with the reason and who disabled it. Only an operator's enable or a NEW
key in the file lifts the hold. ``enabled: false`` in the file is the file's own intent and the file
alone decides it. Everything runs on SQLite and PostgreSQL; the 401 comes from a real fake upstream.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.registry.config import RegistrySpec
from hearth.registry.key_vault import KeyVault, parse_master_key
from hearth.registry.store import (
    apply_registry,
    current_version,
    list_rows,
    load_registry,
    set_endpoint_enabled,
)
from hearth.store.db import create_engine
from hearth.store.tables import endpoints
from tests.support import ADMIN, AUTH, MASTER_KEY, chat_body, gateway_registry

OLD_KEY = "sk-key-of-a-old-000001"
NEW_KEY = "sk-key-of-a-new-000002"
CREDENTIALS_REJECTED = "upstream answered 401: credentials rejected"


@pytest.fixture
def vault() -> KeyVault:
    return KeyVault(parse_master_key(MASTER_KEY))


def _pool(fake: Any, fake2: Any, *, key_a: str = OLD_KEY) -> dict[str, Any]:
    """`a` (tried first) and `b`, each on its own fake upstream."""
    return gateway_registry([
        {"name": "a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up",
         "api_key": key_a, "priority": 0},
        {"name": "b", "provider": "openai-like", "base_url": fake2.base_url, "upstream_model": "up",
         "api_key": "sk-key-of-b-000003", "priority": 1},
    ])


def _sim_spec(**endpoint: Any) -> dict[str, Any]:
    return {"providers": [{"name": "sim", "kind": "simulated"}],
            "endpoints": [{"name": "e", "provider": "sim", "upstream_model": "sim-1", **endpoint}],
            "models": [{"name": "m", "endpoints": ["e"]}]}


async def _row(engine: AsyncEngine, name: str) -> dict[str, Any]:
    async with engine.connect() as conn:
        return dict((await conn.execute(select(endpoints).where(endpoints.c.name == name))).mappings().one())


async def _chat(http: Any, server: Any) -> Any:
    return await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)


async def _disabled_by_a_real_401(http: Any, server: Any, fake: Any) -> None:
    fake.set_defaults(status=401)
    reply = await _chat(http, server)
    assert reply.status_code == 200 and reply.headers["x-hearth-endpoint"] == "b"
    assert fake.stats.requests == 1


def _sent_key(fake: Any) -> str | None:
    return {k.lower(): v for k, v in fake.stats.last_headers.items()}.get("authorization")


async def _listed(http: Any, server: Any, name: str) -> dict[str, Any]:
    rows = (await http.get(server.base_url + "/api/v1/admin/endpoints", headers=ADMIN)).json()["data"]
    row: dict[str, Any] = next(r for r in rows if r["name"] == name)
    return row


# --------------------------------------------------------------------------- a real credential failure


async def test_a_credential_failure_survives_an_apply_of_the_same_file_and_is_reported(
        database_url, engine, vault, fake, fake2, hearth_server, http):
    registry = _pool(fake, fake2)
    server = hearth_server(registry, database_url=database_url)
    await _disabled_by_a_real_401(http, server, fake)
    version = await current_version(engine)

    report = await apply_registry(engine, RegistrySpec.model_validate(registry), vault)  # `hearth apply` again

    assert [(k.name, k.reason, k.disabled_by) for k in report.kept_disabled] == [
        ("endpoint:a", CREDENTIALS_REJECTED, "gateway")]
    assert report.as_dict()["kept_disabled"] == [
        {"name": "endpoint:a", "reason": CREDENTIALS_REJECTED, "disabled_by": "gateway"}]
    assert not report.changed and await current_version(engine) == version  # nothing written
    row = await _row(engine, "a")
    assert (row["enabled"], row["disabled_reason"], row["disabled_by"]) == (False, CREDENTIALS_REJECTED, "gateway")
    assert row["disabled_at"] is not None
    server.call(server.runtime.reload_registry())
    fake.set_defaults(status=200)  # even an upstream that would answer again gets nothing: the hold decides
    for _ in range(3):
        assert (await _chat(http, server)).headers["x-hearth-endpoint"] == "b"
    assert fake.stats.requests == 1
    listed = await _listed(http, server, "a")
    assert (listed["enabled"], listed["disabled_by"], listed["disabled_reason"]) == (
        False, "gateway", CREDENTIALS_REJECTED)


async def test_a_restart_over_the_same_database_keeps_the_endpoint_disabled(
        database_url, fake, fake2, hearth_server, http, caplog):
    registry = _pool(fake, fake2)
    first = hearth_server(registry, database_url=database_url)
    await _disabled_by_a_real_401(http, first, fake)
    first.stop()

    fake.set_defaults(status=200)
    second = hearth_server(registry, database_url=database_url)  # `hearth serve` applies the same file at start
    for _ in range(3):
        assert (await _chat(http, second)).headers["x-hearth-endpoint"] == "b"
    assert fake.stats.requests == 1
    listed = await _listed(http, second, "a")
    assert (listed["enabled"], listed["disabled_by"], listed["disabled_reason"]) == (
        False, "gateway", CREDENTIALS_REJECTED)
    kept = [r for r in caplog.records if r.getMessage() == "endpoint_kept_disabled"]
    assert kept and kept[-1].hearth_fields["endpoint"] == "a"
    assert kept[-1].hearth_fields["disabled_by"] == "gateway"


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_a_new_key_in_the_file_re_enables_the_endpoint_at_once(
        backend, database_url, engine, vault, fake, fake2, hearth_server, http, request):
    settings: dict[str, Any] = {"database_url": database_url}
    if backend == "redis":  # the 401's one-hour cooldown is shared there: the new key must lift it too
        settings.update(state_backend="redis", redis_prefix=request.getfixturevalue("redis_prefix"))
    server = hearth_server(_pool(fake, fake2), **settings)
    await _disabled_by_a_real_401(http, server, fake)

    report = await apply_registry(engine, RegistrySpec.model_validate(_pool(fake, fake2, key_a=NEW_KEY)), vault)

    assert report.kept_disabled == []
    assert report.re_enabled == ["endpoint:a"] and report.as_dict()["re_enabled"] == ["endpoint:a"]
    assert "endpoint:a" in report.updated
    row = await _row(engine, "a")
    assert (row["enabled"], row["disabled_reason"], row["disabled_by"], row["disabled_at"]) == (
        True, None, None, None)
    server.call(server.runtime.reload_registry())  # what the refresh loop does within registry_refresh_s
    fake.set_defaults(status=200)
    reply = await _chat(http, server)
    assert reply.headers["x-hearth-endpoint"] == "a", reply.text
    assert _sent_key(fake) == f"Bearer {NEW_KEY}"


async def test_a_new_key_given_at_restart_re_enables_the_endpoint_across_a_shared_cooldown(
        database_url, redis_prefix, fake, fake2, hearth_server, http):
    settings = {"database_url": database_url, "state_backend": "redis", "redis_prefix": redis_prefix}
    first = hearth_server(_pool(fake, fake2), **settings)
    await _disabled_by_a_real_401(http, first, fake)
    first.stop()

    fake.set_defaults(status=200)
    second = hearth_server(_pool(fake, fake2, key_a=NEW_KEY), **settings)
    reply = await _chat(http, second)
    assert reply.headers["x-hearth-endpoint"] == "a", reply.text
    assert _sent_key(fake) == f"Bearer {NEW_KEY}"


async def test_an_operator_enable_lifts_the_hold_for_good(database_url, engine, vault, fake, fake2, hearth_server,
                                                         http):
    registry = _pool(fake, fake2)
    server = hearth_server(registry, database_url=database_url)
    await _disabled_by_a_real_401(http, server, fake)
    fake.set_defaults(status=200)
    assert (await http.post(server.base_url + "/api/v1/admin/endpoints/a/enable", headers=ADMIN)).status_code == 200

    report = await apply_registry(engine, RegistrySpec.model_validate(registry), vault)

    assert report.kept_disabled == [] and report.re_enabled == [] and not report.changed
    row = await _row(engine, "a")
    assert (row["enabled"], row["disabled_by"], row["disabled_reason"]) == (True, None, None)
    assert (await _chat(http, server)).headers["x-hearth-endpoint"] == "a"


# --------------------------------------------------------------------------- the rules, without a server


async def test_an_admin_disable_is_held_like_a_credential_failure(engine: AsyncEngine, vault: KeyVault) -> None:
    spec = RegistrySpec.model_validate(_sim_spec(api_key=OLD_KEY))
    await apply_registry(engine, spec, vault)
    assert await set_endpoint_enabled(engine, "e", False, "disabled by admin", by="admin")

    report = await apply_registry(engine, spec, vault)

    assert [(k.name, k.reason, k.disabled_by) for k in report.kept_disabled] == [
        ("endpoint:e", "disabled by admin", "admin")]
    assert not (await load_registry(engine, vault)).endpoints["e"].enabled


async def test_the_same_key_written_again_is_not_a_new_key(engine: AsyncEngine, vault: KeyVault) -> None:
    spec = RegistrySpec.model_validate(_sim_spec(api_key=OLD_KEY))
    await apply_registry(engine, spec, vault)
    await set_endpoint_enabled(engine, "e", False, CREDENTIALS_REJECTED, by="gateway")
    again = RegistrySpec.model_validate(_sim_spec(api_key=OLD_KEY, rpm=7))  # another field changes, not the key

    report = await apply_registry(engine, again, vault)

    assert report.updated == ["endpoint:e"] and report.re_enabled == []
    assert [k.name for k in report.kept_disabled] == ["endpoint:e"]
    row = await _row(engine, "e")
    assert (row["enabled"], row["rpm"], row["disabled_by"]) == (False, 7, "gateway")


async def test_a_file_without_a_key_keeps_the_hold(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, RegistrySpec.model_validate(_sim_spec(api_key=OLD_KEY)), vault)
    await set_endpoint_enabled(engine, "e", False, CREDENTIALS_REJECTED, by="gateway")
    report = await apply_registry(engine, RegistrySpec.model_validate(_sim_spec()), vault)
    assert [k.name for k in report.kept_disabled] == ["endpoint:e"]
    assert not (await load_registry(engine, vault)).endpoints["e"].enabled


async def test_a_new_key_while_the_file_disables_the_endpoint_leaves_the_file_in_charge(
        engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, RegistrySpec.model_validate(_sim_spec(api_key=OLD_KEY)), vault)
    await set_endpoint_enabled(engine, "e", False, CREDENTIALS_REJECTED, by="gateway")
    report = await apply_registry(engine, RegistrySpec.model_validate(_sim_spec(api_key=NEW_KEY, enabled=False)),
                                  vault)
    assert report.re_enabled == [] and report.kept_disabled == []
    row = await _row(engine, "e")
    assert (row["enabled"], row["disabled_by"], row["disabled_reason"]) == (False, "config", "disabled in config")
    report = await apply_registry(engine, RegistrySpec.model_validate(_sim_spec(api_key=NEW_KEY)), vault)
    assert (await _row(engine, "e"))["enabled"] is True and report.kept_disabled == []


async def test_disabled_in_config_is_not_held(engine: AsyncEngine, vault: KeyVault) -> None:
    """The file's own ``enabled: false`` is recorded as the config's and the file can lift it again."""
    await apply_registry(engine, RegistrySpec.model_validate(_sim_spec(enabled=False)), vault)
    row = await _row(engine, "e")
    assert (row["enabled"], row["disabled_by"], row["disabled_reason"]) == (False, "config", "disabled in config")
    at = row["disabled_at"]
    assert at is not None
    again = await apply_registry(engine, RegistrySpec.model_validate(_sim_spec(enabled=False)), vault)
    assert not again.changed and (await _row(engine, "e"))["disabled_at"] == at  # unchanged means unchanged
    report = await apply_registry(engine, RegistrySpec.model_validate(_sim_spec()), vault)
    assert report.updated == ["endpoint:e"] and report.kept_disabled == [] and report.re_enabled == []
    assert (await load_registry(engine, vault)).endpoints["e"].enabled


async def test_set_endpoint_enabled_records_who_and_when_and_enabling_clears_it(
        engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, RegistrySpec.model_validate(_sim_spec()), vault)
    await set_endpoint_enabled(engine, "e", False, CREDENTIALS_REJECTED, by="gateway")
    ep = (await load_registry(engine, vault)).endpoints["e"]
    assert (ep.enabled, ep.disabled_reason, ep.disabled_by) == (False, CREDENTIALS_REJECTED, "gateway")
    assert (await _row(engine, "e"))["disabled_at"] is not None
    await set_endpoint_enabled(engine, "e", True, None)
    row = await _row(engine, "e")
    assert (row["enabled"], row["disabled_reason"], row["disabled_by"], row["disabled_at"]) == (
        True, None, None, None)


# --------------------------------------------------------------------------- what the admin view shows


async def test_listing_shows_an_endpoint_of_a_disabled_provider_as_disabled(
        engine: AsyncEngine, vault: KeyVault) -> None:
    data = _sim_spec()
    data["providers"].append({"name": "off", "kind": "openai", "enabled": False})
    data["endpoints"].append({"name": "x", "provider": "off", "upstream_model": "u"})
    data["endpoints"].append({"name": "y", "provider": "off", "upstream_model": "u", "enabled": False})
    await apply_registry(engine, RegistrySpec.model_validate(data), vault)
    await set_endpoint_enabled(engine, "e", False, CREDENTIALS_REJECTED, by="gateway")
    rows = {r["name"]: r for r in await list_rows(engine, "endpoints")}
    assert (rows["x"]["enabled"], rows["x"]["disabled_by"], rows["x"]["disabled_reason"]) == (
        False, "provider", "provider 'off' disabled")
    assert (rows["y"]["enabled"], rows["y"]["disabled_by"], rows["y"]["disabled_reason"]) == (
        False, "config", "disabled in config")  # its own reason first
    assert (rows["e"]["enabled"], rows["e"]["disabled_by"]) == (False, "gateway")
    registry = await load_registry(engine, vault)
    for name, row in rows.items():  # the listing and the router's snapshot agree, endpoint by endpoint
        ep = registry.endpoints[name]
        assert (row["enabled"], row["disabled_reason"], row["disabled_by"]) == (
            ep.enabled, ep.disabled_reason, ep.disabled_by)



# --------------------------------------------------------------------------- rows disabled before 0006


async def test_rows_disabled_by_an_older_version_are_classified_by_their_reason(empty_database_url: str) -> None:
    """A credential failure recorded before ``disabled_by`` existed is held after the upgrade as well."""
    from alembic import command
    from sqlalchemy import text
    from sqlalchemy.engine import Connection

    from hearth.store.db import alembic_config

    engine = create_engine(empty_database_url)
    try:
        def upgrade_to(revision: str) -> Any:
            def run(conn: Connection) -> None:
                command.upgrade(alembic_config(conn), revision)
            return run

        async with engine.begin() as conn:
            await conn.run_sync(upgrade_to("0005"))
            await conn.execute(text("INSERT INTO providers (name, kind, enabled, updated_at) "
                                    "VALUES ('p', 'simulated', true, CURRENT_TIMESTAMP)"))
            for name, enabled, reason in [("on", True, None), ("cfg", False, "disabled in config"),
                                          ("gw", False, CREDENTIALS_REJECTED), ("adm", False, "disabled by admin")]:
                await conn.execute(text(
                    "INSERT INTO endpoints (name, provider, upstream_model, key_version, max_concurrency, rpm, tpm, "
                    "weight, priority, timeout_s, capabilities, enabled, disabled_reason, updated_at) VALUES "
                    "(:name, 'p', 'u', 1, 0, 0, 0, 1.0, 0, 60.0, '[\"chat\"]', :enabled, :reason, CURRENT_TIMESTAMP)"),
                    {"name": name, "enabled": enabled, "reason": reason})
        async with engine.begin() as conn:
            await conn.run_sync(upgrade_to("head"))  # every later migration runs over existing rows too
        async with engine.connect() as conn:
            by = dict((await conn.execute(text("SELECT name, disabled_by FROM endpoints"))).all())
        assert by == {"on": None, "cfg": "config", "gw": "gateway", "adm": "admin"}
    finally:
        await engine.dispose()
