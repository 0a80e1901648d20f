"""Registry persistence on SQLite and PostgreSQL: idempotent apply, encrypted keys, snapshots.

Also the key vault on its own and the validation of the declarative :class:`RegistrySpec`.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.registry.config import RegistrySpec
from hearth.registry.key_vault import KeyVault, KeyVaultError, parse_master_key
from hearth.registry.store import (
    apply_registry,
    current_version,
    list_rows,
    load_registry,
    set_endpoint_enabled,
)
from hearth.store.tables import endpoints, model_pool_members, models, providers, quota_groups
from tests.support import MASTER_KEY

PLAIN_KEY = "sk-live-0123456789abcd"
OTHER_MASTER_KEY = "11" * 32


def spec_dict() -> dict[str, Any]:
    return {
        "providers": [{"name": "oai", "kind": "openai", "base_url": "https://oai.example/v1"},
                      {"name": "sim", "kind": "simulated"}],
        "quota_groups": [{"name": "qg1", "max_concurrency": 4, "rpm": 100, "tpm": 1000}],
        "endpoints": [
            {"name": "e1", "provider": "oai", "upstream_model": "gpt-x", "api_key": PLAIN_KEY,
             "quota_group": "qg1", "max_concurrency": 2, "rpm": 10, "tpm": 500, "weight": 2.0, "priority": 1},
            {"name": "e2", "provider": "sim", "upstream_model": "sim-1"},
        ],
        "models": [{"name": "m", "endpoints": ["e2", "e1"]}, {"name": "m-sim", "endpoints": ["e2"]}],
        "prices": [{"model": "gpt-x", "input_per_1m": 1.5, "output_per_1m": 3.0}],
        "callers": [{"name": "app", "key": "caller-key-0001"}],
    }


def spec(data: dict[str, Any] | None = None) -> RegistrySpec:
    return RegistrySpec.model_validate(data if data is not None else spec_dict())


@pytest.fixture
def vault() -> KeyVault:
    return KeyVault(parse_master_key(MASTER_KEY))


async def count(engine: AsyncEngine, table: Any) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(table))).scalar_one())


async def raw_endpoint(engine: AsyncEngine, name: str) -> dict[str, Any]:
    async with engine.connect() as conn:
        row = (await conn.execute(select(endpoints).where(endpoints.c.name == name))).mappings().one()
    return dict(row)


# --------------------------------------------------------------------------- apply


async def test_first_apply_creates_everything_and_sets_version_one(engine: AsyncEngine, vault: KeyVault) -> None:
    report = await apply_registry(engine, spec(), vault)
    assert set(report.created) - {"caller:app"} == {"provider:oai", "provider:sim", "quota_group:qg1", "endpoint:e1",
                                   "endpoint:e2", "model:m", "model:m-sim", "price:gpt-x"}
    assert "caller:app" in report.created + report.updated  # (new callers are currently reported as updated)
    assert await current_version(engine) == 1


async def test_applying_the_same_spec_twice_changes_nothing(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    before = await raw_endpoint(engine, "e1")
    version = await current_version(engine)
    second = await apply_registry(engine, spec(), vault)
    assert second.created == []
    assert second.updated == []
    assert not second.changed
    assert second.unchanged == 9  # 2 providers, 1 group, 2 endpoints, 2 models, 1 price, 1 caller
    assert await current_version(engine) == version
    assert await raw_endpoint(engine, "e1") == before  # not even re-encrypted


async def test_changing_one_endpoint_field_updates_only_that_endpoint_and_bumps_version(
        engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    version = await current_version(engine)
    data = spec_dict()
    data["endpoints"][1]["rpm"] = 42
    report = await apply_registry(engine, spec(data), vault)
    assert report.created == []
    assert report.updated == ["endpoint:e2"]
    assert await current_version(engine) == version + 1
    assert (await raw_endpoint(engine, "e2"))["rpm"] == 42
    assert (await raw_endpoint(engine, "e1"))["rpm"] == 10


async def test_changing_a_model_pool_reports_the_model_updated(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    version = await current_version(engine)
    data = spec_dict()
    data["models"][1]["endpoints"] = ["e1", "e2"]
    report = await apply_registry(engine, spec(data), vault)
    assert report.updated == ["model:m-sim"]
    assert await current_version(engine) == version + 1
    registry = await load_registry(engine, vault)
    assert [e.name for e in registry.models["m-sim"].endpoints] == ["e1", "e2"]


async def test_api_key_is_stored_encrypted_with_a_masked_hint(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    row = await raw_endpoint(engine, "e1")
    assert row["api_key_enc"]
    assert PLAIN_KEY not in row["api_key_enc"]
    assert "0123456789" not in row["api_key_enc"]
    assert row["api_key_hint"] == "sk-****abcd"
    assert vault.decrypt(row["api_key_enc"], "e1") == PLAIN_KEY
    assert (await raw_endpoint(engine, "e2"))["api_key_enc"] is None


async def test_omitting_api_key_keeps_the_stored_key(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    stored = (await raw_endpoint(engine, "e1"))["api_key_enc"]
    data = spec_dict()
    del data["endpoints"][0]["api_key"]
    report = await apply_registry(engine, spec(data), vault)
    assert not report.changed
    row = await raw_endpoint(engine, "e1")
    assert row["api_key_enc"] == stored
    assert row["api_key_hint"] == "sk-****abcd"
    registry = await load_registry(engine, vault)
    assert registry.endpoints["e1"].api_key == PLAIN_KEY


async def test_a_new_api_key_replaces_the_stored_one(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    version = await current_version(engine)
    data = spec_dict()
    data["endpoints"][0]["api_key"] = "sk-rotated-999999wxyz"
    report = await apply_registry(engine, spec(data), vault)
    assert report.updated == ["endpoint:e1"]
    assert await current_version(engine) == version + 1
    registry = await load_registry(engine, vault)
    assert registry.endpoints["e1"].api_key == "sk-rotated-999999wxyz"
    assert registry.endpoints["e1"].api_key_hint == "sk-****wxyz"


async def test_unknown_provider_is_refused_and_nothing_from_the_spec_is_written(
        engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    version = await current_version(engine)
    counts = {t.name: await count(engine, t) for t in (providers, quota_groups, endpoints, models)}
    data = spec_dict()
    data["providers"].append({"name": "brand-new", "kind": "openai"})
    data["quota_groups"].append({"name": "qg-new", "rpm": 5})
    data["endpoints"][0]["upstream_model"] = "gpt-changed"  # written before the bad endpoint is reached
    data["endpoints"].append({"name": "e-bad", "provider": "no-such-provider", "upstream_model": "x"})
    with pytest.raises(HearthError) as info:
        await apply_registry(engine, spec(data), vault)
    assert info.value.code == "invalid_request"
    assert info.value.details == {"unknown": "provider", "name": "no-such-provider"}
    assert {t.name: await count(engine, t) for t in (providers, quota_groups, endpoints, models)} == counts
    async with engine.connect() as conn:
        assert (await conn.execute(select(providers).where(providers.c.name == "brand-new"))).first() is None
        assert (await conn.execute(select(quota_groups).where(quota_groups.c.name == "qg-new"))).first() is None
    assert (await raw_endpoint(engine, "e1"))["upstream_model"] == "gpt-x"
    assert await current_version(engine) == version


async def test_refused_first_apply_leaves_an_empty_database(engine: AsyncEngine, vault: KeyVault) -> None:
    data = spec_dict()
    data["endpoints"][1]["provider"] = "missing"
    with pytest.raises(HearthError) as info:
        await apply_registry(engine, spec(data), vault)
    assert info.value.code == "invalid_request"
    for table in (providers, quota_groups, endpoints, models, model_pool_members):
        assert await count(engine, table) == 0
    assert await current_version(engine) == 0


@pytest.mark.parametrize(("mutate", "unknown"), [
    (lambda d: d["endpoints"][0].update(quota_group="no-such-group"), "quota group"),
    (lambda d: d["models"][0]["endpoints"].append("no-such-endpoint"), "endpoint"),
], ids=["quota_group", "model_endpoint"])
async def test_other_dangling_references_are_refused(engine: AsyncEngine, vault: KeyVault,
                                                     mutate: Any, unknown: str) -> None:
    await apply_registry(engine, spec(), vault)
    version = await current_version(engine)
    data = spec_dict()
    mutate(data)
    with pytest.raises(HearthError) as info:
        await apply_registry(engine, spec(data), vault)
    assert info.value.code == "invalid_request"
    assert info.value.details["unknown"] == unknown
    assert await current_version(engine) == version


async def test_new_caller_without_key_is_refused_as_invalid_request(engine: AsyncEngine, vault: KeyVault) -> None:
    data = spec_dict()
    data["callers"].append({"name": "keyless"})
    with pytest.raises(HearthError) as info:
        await apply_registry(engine, spec(data), vault)
    assert info.value.code == "invalid_request"
    assert await count(engine, providers) == 0


# --------------------------------------------------------------------------- load and change


async def test_load_registry_builds_models_with_pools_and_quota_groups(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    registry = await load_registry(engine, vault)
    assert registry.version == 1
    assert set(registry.models) == {"m", "m-sim"}
    m = registry.models["m"]
    assert [e.name for e in m.endpoints] == ["e1", "e2"]
    assert [e.name for e in registry.models["m-sim"].endpoints] == ["e2"]
    e1 = registry.endpoints["e1"]
    assert e1.provider == "oai" and e1.kind == "openai"
    assert e1.base_url == "https://oai.example/v1"
    assert e1.api_key == PLAIN_KEY
    assert e1.quota_group is not None
    assert (e1.quota_group.name, e1.quota_group.max_concurrency, e1.quota_group.rpm,
            e1.quota_group.tpm) == ("qg1", 4, 100, 1000)
    assert (e1.max_concurrency, e1.rpm, e1.tpm, e1.weight, e1.priority) == (2, 10, 500, 2.0, 1)
    assert e1.capabilities == frozenset({"chat", "streaming"})
    e2 = registry.endpoints["e2"]
    assert e2.kind == "simulated" and e2.quota_group is None and e2.api_key is None
    assert e2.base_url == "simulated://local"
    assert registry.prices["gpt-x"].input_per_1m == 1.5
    assert [c.name for c in registry.callers_by_key_hash.values()] == ["app"]
    assert PLAIN_KEY not in repr(e1)


async def test_disabled_provider_disables_its_endpoints(engine: AsyncEngine, vault: KeyVault) -> None:
    data = spec_dict()
    data["providers"][0]["enabled"] = False
    await apply_registry(engine, spec(data), vault)
    registry = await load_registry(engine, vault)
    assert not registry.endpoints["e1"].enabled
    assert registry.endpoints["e1"].disabled_reason == "provider 'oai' disabled"
    assert registry.endpoints["e1"].disabled_by == "provider"
    assert registry.endpoints["e2"].enabled


async def test_set_endpoint_enabled_disables_then_reenables_and_bumps_version(
        engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    version = await current_version(engine)
    assert await set_endpoint_enabled(engine, "e1", False, "upstream answered 401")
    assert await current_version(engine) == version + 1
    ep = (await load_registry(engine, vault)).endpoints["e1"]
    assert (ep.enabled, ep.disabled_reason) == (False, "upstream answered 401")
    assert (await load_registry(engine, vault)).endpoints["e2"].enabled
    assert await set_endpoint_enabled(engine, "e1", True, None)
    assert await current_version(engine) == version + 2
    ep = (await load_registry(engine, vault)).endpoints["e1"]
    assert (ep.enabled, ep.disabled_reason) == (True, None)


async def test_set_endpoint_enabled_on_unknown_endpoint_returns_false(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    version = await current_version(engine)
    assert await set_endpoint_enabled(engine, "no-such-endpoint", False, "x") is False
    assert await current_version(engine) == version


async def test_list_rows_endpoints_never_contains_the_key(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    rows = await list_rows(engine, "endpoints")
    assert {r["name"] for r in rows} == {"e1", "e2"}
    for row in rows:
        assert "api_key_enc" not in row
        assert PLAIN_KEY not in repr(row)
    assert next(r for r in rows if r["name"] == "e1")["api_key_hint"] == "sk-****abcd"
    model_rows = {r["name"]: r for r in await list_rows(engine, "models")}
    assert model_rows["m"]["endpoints"] == ["e1", "e2"]


async def test_load_registry_with_the_wrong_master_key_fails(engine: AsyncEngine, vault: KeyVault) -> None:
    await apply_registry(engine, spec(), vault)
    with pytest.raises(KeyVaultError):
        await load_registry(engine, KeyVault(parse_master_key(OTHER_MASTER_KEY)))


# --------------------------------------------------------------------------- key vault


def test_key_vault_round_trips_and_uses_a_fresh_nonce(vault: KeyVault) -> None:
    one, two = vault.encrypt(PLAIN_KEY, "e1"), vault.encrypt(PLAIN_KEY, "e1")
    assert one != two
    assert vault.decrypt(one, "e1") == vault.decrypt(two, "e1") == PLAIN_KEY


def test_key_vault_wrong_master_key_cannot_decrypt(vault: KeyVault) -> None:
    token = vault.encrypt(PLAIN_KEY, "e1")
    with pytest.raises(KeyVaultError):
        KeyVault(parse_master_key(OTHER_MASTER_KEY)).decrypt(token, "e1")


def test_key_vault_ciphertext_is_bound_to_its_endpoint_name(vault: KeyVault) -> None:
    token = vault.encrypt(PLAIN_KEY, "e1")
    with pytest.raises(KeyVaultError):
        vault.decrypt(token, "e2")


def test_key_vault_refuses_unknown_version_prefix(vault: KeyVault) -> None:
    token = vault.encrypt(PLAIN_KEY, "e1")
    with pytest.raises(KeyVaultError):
        vault.decrypt("v9" + token[2:], "e1")


@pytest.mark.parametrize("text", ["00" * 16, "not a key", ""])
def test_parse_master_key_refuses_anything_but_32_bytes(text: str) -> None:
    with pytest.raises(KeyVaultError):
        parse_master_key(text)


# --------------------------------------------------------------------------- spec validation


def test_the_reference_spec_is_valid() -> None:
    parsed = spec()
    assert [e.name for e in parsed.endpoints] == ["e1", "e2"]


def test_base_url_trailing_slash_is_removed() -> None:
    data = spec_dict()
    data["endpoints"][0]["base_url"] = "https://x.example/v1/"
    assert spec(data).endpoints[0].base_url == "https://x.example/v1"


def _dup_provider(d: dict[str, Any]) -> None:
    d["providers"].append(copy.deepcopy(d["providers"][0]))


def _dup_endpoint(d: dict[str, Any]) -> None:
    d["endpoints"].append({**d["endpoints"][1]})


def _dup_model(d: dict[str, Any]) -> None:
    d["models"].append({"name": "m", "endpoints": ["e1"]})


def _dup_caller(d: dict[str, Any]) -> None:
    d["callers"].append({"name": "app", "key": "another-key-0002"})


@pytest.mark.parametrize("mutate", [
    _dup_provider,
    _dup_endpoint,
    _dup_model,
    _dup_caller,
    lambda d: d["endpoints"][0].update(base_url="ftp://x.example"),
    lambda d: d["endpoints"][0].update(base_url="x.example/v1"),
    lambda d: d["endpoints"][0].update(max_concurrency=-1),
    lambda d: d["endpoints"][0].update(rpm=-5),
    lambda d: d["endpoints"][0].update(tpm=-1),
    lambda d: d["endpoints"][0].update(weight=0),
    lambda d: d["endpoints"][0].update(timeout_s=-1),
    lambda d: d["quota_groups"][0].update(rpm=-1),
    lambda d: d["quota_groups"][0].update(daily_tokens=-1),
    lambda d: d["providers"][0].update(kind="cohere"),
    lambda d: d["endpoints"][0].update(surprise=True),
    lambda d: d["models"][0].update(endpoints=[]),
    lambda d: d["callers"][0].update(key="short"),
    lambda d: d["endpoints"][0].update(name="has space"),
], ids=["dup-provider", "dup-endpoint", "dup-model", "dup-caller", "ftp-base-url", "no-scheme-base-url",
        "neg-endpoint-concurrency", "neg-endpoint-rpm", "neg-endpoint-tpm", "zero-weight", "neg-timeout",
        "neg-group-rpm", "neg-group-daily", "unknown-kind", "extra-field", "empty-pool", "short-caller-key",
        "bad-name"])
def test_invalid_spec_is_refused(mutate: Any) -> None:
    data = spec_dict()
    mutate(data)
    with pytest.raises(ValidationError):
        RegistrySpec.model_validate(data)
