"""Master keys on SQLite and PostgreSQL: an unreadable secret is an error naming its owner, never "no
secret" and never overwritten; a rotation re-encrypts everything in one transaction or nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.registry.callers import signing_key_context
from hearth.registry.config import RegistrySpec
from hearth.registry.key_vault import KeyVault, KeyVaultError, parse_master_key
from hearth.registry.store import apply_registry, current_version, load_registry, rotate_master_key
from hearth.store.db import create_engine, migrate
from hearth.store.tables import callers, endpoints, metadata

OLD = parse_master_key("aa" * 32)
NEW = parse_master_key("bb" * 32)
STRANGER = parse_master_key("cc" * 32)
API_KEYS = {"e1": "sk-endpoint-one-000000001", "e2": "sk-endpoint-two-000000002"}
SIGNING_KEYS = {"app": "app-signing-key-0123456789", "billing": "billing-signing-key-0123456789"}


def spec_dict(*, secrets: bool = True) -> dict[str, Any]:
    eps = [{"name": n, "provider": "oai", "upstream_model": "x", **({"api_key": k} if secrets else {})}
           for n, k in API_KEYS.items()]
    eps.append({"name": "e3-no-key", "provider": "oai", "upstream_model": "x"})
    cls: list[dict[str, Any]] = [{"name": n, "key": f"{n}-caller-key-0001", "require_signature": True,
                                  **({"signing_key": k} if secrets else {})} for n, k in SIGNING_KEYS.items()]
    cls.append({"name": "plain", "key": "plain-caller-key-0001"})
    return {"providers": [{"name": "oai", "kind": "openai", "base_url": "https://oai.example/v1"}],
            "endpoints": eps, "models": [{"name": "m", "endpoints": [e["name"] for e in eps]}], "callers": cls}


def spec(*, secrets: bool = True) -> RegistrySpec:
    return RegistrySpec.model_validate(spec_dict(secrets=secrets))


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = create_engine(database_url)
    await migrate(eng)
    await apply_registry(eng, spec(), KeyVault(OLD))
    yield eng
    await eng.dispose()


async def dump(engine: AsyncEngine) -> dict[str, list[tuple[Any, ...]]]:
    async with engine.connect() as conn:
        return {t.name: sorted((tuple(r) for r in (await conn.execute(select(t))).all()), key=repr)
                for t in metadata.sorted_tables}


async def stored(engine: AsyncEngine) -> dict[str, str]:
    async with engine.connect() as conn:
        eps = (await conn.execute(select(endpoints.c.name, endpoints.c.api_key_enc))).all()
        cls = (await conn.execute(select(callers.c.name, callers.c.signing_key_enc))).all()
    return {**{f"endpoint:{n}": v for n, v in eps if v}, **{f"caller:{n}": v for n, v in cls if v}}


async def store_under(engine: AsyncEngine, key: bytes, *, endpoint: str | None = None,
                      caller: str | None = None) -> None:
    """Overwrite one stored secret with the same plaintext under another master key."""
    vault = KeyVault(key)
    async with engine.begin() as conn:
        if endpoint is not None:
            await conn.execute(endpoints.update().where(endpoints.c.name == endpoint).values(
                api_key_enc=vault.encrypt(API_KEYS[endpoint], endpoint)))
        if caller is not None:
            await conn.execute(callers.update().where(callers.c.name == caller).values(
                signing_key_enc=vault.encrypt(SIGNING_KEYS[caller], signing_key_context(caller))))


# ---- an unreadable secret is an error, never "absent" -----------------------------------------------


async def test_an_unreadable_signing_key_fails_the_load_naming_the_caller(engine: AsyncEngine) -> None:
    await store_under(engine, STRANGER, caller="billing")
    with pytest.raises(KeyVaultError) as info:
        await load_registry(engine, KeyVault(OLD))
    assert "the signing key of caller 'billing'" in str(info.value)
    assert SIGNING_KEYS["billing"] not in str(info.value)


async def test_an_unreadable_endpoint_key_fails_the_load_naming_the_endpoint(engine: AsyncEngine) -> None:
    with pytest.raises(KeyVaultError) as info:
        await load_registry(engine, KeyVault(NEW))
    assert "the API key of endpoint 'e1'" in str(info.value)


@pytest.mark.parametrize("secrets", [True, False], ids=["file-declares-the-secrets", "file-omits-them"])
async def test_apply_under_another_master_key_is_refused_and_writes_nothing(engine: AsyncEngine,
                                                                            secrets: bool) -> None:
    before = await dump(engine)
    changed = spec_dict(secrets=secrets)
    changed["endpoints"][0]["upstream_model"] = "changed"  # so the apply would write if it went through
    with pytest.raises(KeyVaultError) as info:
        await apply_registry(engine, RegistrySpec.model_validate(changed), KeyVault(NEW))
    # checked inside the apply's transaction even when the file carries no secret at all
    assert "the API key of endpoint 'e1'" in str(info.value)
    assert await dump(engine) == before


async def test_a_signing_key_tampered_onto_another_caller_is_refused(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        token = (await conn.execute(select(callers.c.signing_key_enc).where(callers.c.name == "app"))).scalar()
        await conn.execute(callers.update().where(callers.c.name == "billing").values(signing_key_enc=token))
    with pytest.raises(KeyVaultError) as info:
        await load_registry(engine, KeyVault(OLD))
    assert "caller 'billing'" in str(info.value)


# ---- rotation --------------------------------------------------------------------------------------


async def test_rotation_re_encrypts_every_secret_and_the_new_key_alone_reads_them(engine: AsyncEngine) -> None:
    before_rows, version = await stored(engine), await current_version(engine)
    report = await rotate_master_key(engine, KeyVault(NEW, previous_keys=(OLD,)))
    assert report.as_dict() == {"endpoint_keys": 2, "signing_keys": 2, "already_current": 0}
    after_rows = await stored(engine)
    assert set(after_rows) == set(before_rows) and all(after_rows[k] != before_rows[k] for k in after_rows)
    registry = await load_registry(engine, KeyVault(NEW))
    assert {n: registry.endpoints[n].api_key for n in API_KEYS} == API_KEYS
    assert registry.endpoints["e3-no-key"].api_key is None
    assert {n: registry.callers_by_name[n].signing_key for n in SIGNING_KEYS} == SIGNING_KEYS
    assert registry.callers_by_name["plain"].signing_key is None
    with pytest.raises(KeyVaultError):
        await load_registry(engine, KeyVault(OLD))
    assert await current_version(engine) == version  # no plaintext changed: running snapshots stay valid
    # the same file applies cleanly under the new key and changes nothing
    assert not (await apply_registry(engine, spec(), KeyVault(NEW))).changed


async def test_rotation_run_again_or_over_a_mix_finishes_the_job(engine: AsyncEngine) -> None:
    await store_under(engine, NEW, endpoint="e2", caller="app")  # e.g. written by a process already on NEW
    report = await rotate_master_key(engine, KeyVault(NEW, previous_keys=(OLD,)))
    assert report.as_dict() == {"endpoint_keys": 1, "signing_keys": 1, "already_current": 2}
    untouched = await stored(engine)
    again = await rotate_master_key(engine, KeyVault(NEW, previous_keys=(OLD,)))
    assert again.as_dict() == {"endpoint_keys": 0, "signing_keys": 0, "already_current": 4}
    assert await stored(engine) == untouched
    await load_registry(engine, KeyVault(NEW))


@pytest.mark.parametrize("bad", [{"caller": "billing"}, {"endpoint": "e2"}], ids=["caller", "endpoint"])
async def test_a_rotation_that_meets_an_unreadable_value_changes_nothing(engine: AsyncEngine,
                                                                         bad: dict[str, str]) -> None:
    # the bad value sorts last in its table, so others were already rewritten inside the transaction
    await store_under(engine, STRANGER, **bad)
    before = await dump(engine)
    with pytest.raises(KeyVaultError) as info:
        await rotate_master_key(engine, KeyVault(NEW, previous_keys=(OLD,)))
    name = bad.get("caller") or bad["endpoint"]
    assert f"'{name}'" in str(info.value)
    assert await dump(engine) == before


async def test_a_dry_run_reports_and_writes_nothing(engine: AsyncEngine) -> None:
    before = await dump(engine)
    report = await rotate_master_key(engine, KeyVault(NEW, previous_keys=(OLD,)), dry_run=True)
    assert report.as_dict() == {"endpoint_keys": 2, "signing_keys": 2, "already_current": 0}
    assert await dump(engine) == before


# ---- the vault with a previous key -----------------------------------------------------------------


def test_a_vault_reads_its_previous_keys_but_writes_only_under_the_current_one() -> None:
    old_token = KeyVault(OLD).encrypt("secret-value", "ctx")
    both = KeyVault(NEW, previous_keys=(OLD,))
    assert both.decrypt(old_token, "ctx") == "secret-value"
    new_token = both.encrypt("secret-value", "ctx")
    assert KeyVault(NEW).decrypt(new_token, "ctx") == "secret-value"
    with pytest.raises(KeyVaultError):
        KeyVault(OLD).decrypt(new_token, "ctx")
    rewrapped = both.rewrap(old_token, "ctx")
    assert rewrapped is not None and KeyVault(NEW).decrypt(rewrapped, "ctx") == "secret-value"
    assert both.rewrap(new_token, "ctx") is None
    with pytest.raises(KeyVaultError):
        both.rewrap(KeyVault(STRANGER).encrypt("secret-value", "ctx"), "ctx")
    with pytest.raises(KeyVaultError):
        both.decrypt(old_token, "other-ctx")


@pytest.mark.parametrize("token", ["v1:not base64!", "v1:", "v1:" + "A" * 8, "garbage"])
def test_malformed_ciphertext_is_a_key_vault_error(token: str) -> None:
    with pytest.raises(KeyVaultError):
        KeyVault(OLD).decrypt(token, "ctx", subject="the API key of endpoint 'x'")
