"""Registry persistence: idempotent apply of a :class:`RegistrySpec` and loading of snapshots.

``apply_registry`` runs in one transaction: a spec with a dangling reference is refused whole and
leaves the database as it was. Rows whose values did not change are not written, so applying the
same file twice reports everything ``unchanged`` and does not bump the registry version.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Table, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.errors import HearthError
from hearth.registry.callers import decrypt_signing_key, load_callers, rewrap_signing_keys, upsert_caller
from hearth.registry.config import EndpointSpec, RegistrySpec
from hearth.registry.endpoint_holds import (
    DisabledBy,
    KeptDisabled,
    StoredState,
    effective_state,
    resolve,
    runtime_state,
)
from hearth.registry.key_vault import KeyVault, mask_key
from hearth.registry.snapshot import MICRO, Budget, Endpoint, Model, Price, QuotaGroup, Registry, Scene
from hearth.store.tables import (
    budgets,
    endpoints,
    meta,
    model_pool_members,
    models,
    prices,
    providers,
    quota_groups,
    scenes,
)
from hearth.store.tables import (
    callers as callers_table,
)

_DEFAULT_BASE_URLS = {"openai": "https://api.openai.com/v1", "anthropic": "https://api.anthropic.com/v1",
                      "simulated": "simulated://local"}


@dataclass
class ApplyReport:
    """What an apply did. ``kept_disabled``: endpoints the file wants enabled that stay disabled by a runtime
    decision (gateway or admin, see :mod:`hearth.registry.endpoint_holds`); ``re_enabled``: held endpoints
    the file's new key put back. Both also count as created/updated/unchanged like any other entry."""

    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    kept_disabled: list[KeptDisabled] = field(default_factory=list)
    re_enabled: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON; ``kept_disabled`` and ``re_enabled`` only when there are any."""
        out: dict[str, Any] = {"created": self.created, "updated": self.updated, "unchanged": self.unchanged}
        if self.kept_disabled:
            out["kept_disabled"] = [k.as_dict() for k in self.kept_disabled]
        if self.re_enabled:
            out["re_enabled"] = self.re_enabled
        return out


async def _upsert(conn: AsyncConnection, table: Table, key: dict[str, Any], values: dict[str, Any],
                  *, label: str, report: ApplyReport) -> None:
    cond = [table.c[k] == v for k, v in key.items()]
    row = (await conn.execute(select(table).where(*cond))).mappings().first()
    now = datetime.now(UTC)
    has_updated_at = "updated_at" in table.c
    if row is None:
        extra = {"updated_at": now} if has_updated_at else {}
        await conn.execute(table.insert().values(**key, **values, **extra))
        report.created.append(label)
        return
    diff = {k: v for k, v in values.items() if row[k] != v}
    if not diff:
        report.unchanged += 1
        return
    if has_updated_at:
        diff["updated_at"] = now
    await conn.execute(table.update().where(*cond).values(**diff))
    report.updated.append(label)


_APPLY_LOCK_ID = 0x48524547  # "HREG"


RegistryCheck = Callable[[Registry], None]


async def apply_registry(engine: AsyncEngine, spec: RegistrySpec, vault: KeyVault, *,
                         verify: RegistryCheck | None = None) -> ApplyReport:
    """Apply ``spec`` in one transaction. Safe when several processes apply the same file at once
    (they start together): PostgreSQL serializes them with an advisory lock; on SQLite a process that
    loses an insert race simply applies again and finds everything in place.

    ``verify`` sees the registry as it would be after this apply, before the commit; whatever it raises
    refuses the apply with nothing written (a strict start-up check, :mod:`hearth.registry.serviceable`).
    """
    for attempt in range(3):
        try:
            return await _apply_once(engine, spec, vault, verify)
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


async def _apply_once(engine: AsyncEngine, spec: RegistrySpec, vault: KeyVault,
                      verify: RegistryCheck | None) -> ApplyReport:
    report = ApplyReport()
    async with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _APPLY_LOCK_ID})
        for p in spec.providers:
            await _upsert(conn, providers, {"name": p.name},
                          {"kind": p.kind, "base_url": p.base_url, "enabled": p.enabled,
                           "forward_headers": p.forward_headers, "relay_ratelimit_headers": p.relay_ratelimit_headers},
                          label=f"provider:{p.name}", report=report)
        for q in spec.quota_groups:
            await _upsert(conn, quota_groups, {"name": q.name},
                          q.model_dump(exclude={"name"}), label=f"quota_group:{q.name}", report=report)
        for e in spec.endpoints:
            await _check_exists(conn, providers, e.provider, "provider", owner=e.name)
            if e.quota_group:
                await _check_exists(conn, quota_groups, e.quota_group, "quota group", owner=e.name)
            await _apply_endpoint(conn, e, vault, report)
        for m in spec.models:
            for ep in m.endpoints:
                await _check_exists(conn, endpoints, ep, "endpoint", owner=m.name)
            await _upsert(conn, models, {"name": m.name},
                          {"description": m.description, "kind": m.kind, "enabled": m.enabled,
                           "expose_upstream_model": m.expose_upstream_model},
                          label=f"model:{m.name}", report=report)
            current = set((await conn.execute(select(model_pool_members.c.endpoint).where(
                model_pool_members.c.model == m.name))).scalars())
            wanted = set(m.endpoints)
            if current != wanted:
                await conn.execute(model_pool_members.delete().where(model_pool_members.c.model == m.name))
                await conn.execute(model_pool_members.insert(),
                                   [{"model": m.name, "endpoint": ep} for ep in m.endpoints])
                if f"model:{m.name}" not in report.created + report.updated:
                    report.updated.append(f"model:{m.name}")
        for pr in spec.prices:
            await _upsert(conn, prices, {"model": pr.model}, pr.model_dump(exclude={"model"}),
                          label=f"price:{pr.model}", report=report)
        for sc in spec.scenes:
            for model_name in sorted({sc.default_model, *sc.allowed_models, *sc.fallback_models}):
                await _check_exists(conn, models, model_name, "model", owner=sc.name)
            await _upsert(conn, scenes, {"name": sc.name},
                          {"default_model": sc.default_model, "allowed_models": sc.allowed_models,
                           "max_tokens_cap": sc.max_tokens_cap, "fallback_models": sc.fallback_models,
                           "enabled": sc.enabled,
                           "guardrails": sc.guardrails.model_dump() if sc.guardrails is not None else None,
                           "cache_ttl_s": sc.cache_ttl_s}, label=f"scene:{sc.name}", report=report)
        for c in spec.callers:
            if c.default_scene is not None:
                await _check_exists(conn, scenes, c.default_scene, "scene", owner=c.name)
            try:
                outcome = await upsert_caller(conn, c, vault)
            except ValueError as exc:
                raise HearthError("invalid_request", str(exc)) from exc
            if outcome == "created":
                report.created.append(f"caller:{c.name}")
            elif outcome == "updated":
                report.updated.append(f"caller:{c.name}")
            else:
                report.unchanged += 1
        for b in spec.budgets:
            if b.caller != "*":
                await _check_exists(conn, callers_table, b.caller, "caller", owner=b.name)
            limit = round(b.limit * MICRO) if b.unit == "money" else round(b.limit)
            await _upsert(conn, budgets, {"name": b.name},
                          {"caller": b.caller, "scope": b.scope, "subject": b.subject, "period": b.period,
                           "unit": b.unit, "limit_amount": limit, "enabled": b.enabled, "estimate": b.estimate},
                          label=f"budget:{b.name}", report=report)
        # Before committing: every stored secret must open under this vault. A process started with the
        # wrong master key is refused here, with nothing written, rather than after committing its apply.
        await check_secrets_readable(conn, vault)
        if verify is not None:
            verify(await _load(conn, vault))
        if report.changed:
            await bump_version(conn)
    return report


async def _apply_endpoint(conn: AsyncConnection, e: EndpointSpec, vault: KeyVault, report: ApplyReport) -> None:
    """Upsert one endpoint; its enabled state follows :func:`hearth.registry.endpoint_holds.resolve`: a
    runtime disable (gateway, admin) is kept unless the file brings a new key."""
    label = f"endpoint:{e.name}"
    row = (await conn.execute(select(endpoints.c.api_key_enc, endpoints.c.enabled, endpoints.c.disabled_by,
                                     endpoints.c.disabled_reason, endpoints.c.disabled_at).where(
        endpoints.c.name == e.name))).mappings().first()
    values = e.model_dump(exclude={"name", "api_key", "enabled"})
    values["capabilities"] = sorted(values["capabilities"])
    new_key = False
    if e.api_key is not None:
        stored_key = row["api_key_enc"] if row is not None else None
        if stored_key is None or _stored_key(vault, stored_key, e.name) != e.api_key:
            values["api_key_enc"] = vault.encrypt(e.api_key, e.name)
            values["api_key_hint"] = mask_key(e.api_key)
            new_key = True
    stored = None if row is None else StoredState(enabled=bool(row["enabled"]), disabled_by=row["disabled_by"],
                                                  disabled_reason=row["disabled_reason"],
                                                  disabled_at=row["disabled_at"])
    resolution = resolve(stored, file_enabled=e.enabled, new_key=new_key, now=datetime.now(UTC))
    values.update(resolution.values)
    await _upsert(conn, endpoints, {"name": e.name}, values, label=label, report=report)
    if resolution.outcome == "kept_disabled":
        assert stored is not None and stored.disabled_by is not None
        report.kept_disabled.append(KeptDisabled(label, stored.disabled_reason or "", stored.disabled_by))
    elif resolution.outcome == "re_enabled":
        report.re_enabled.append(label)


def _stored_key(vault: KeyVault, token: str, name: str) -> str:
    """The stored API key of endpoint ``name``; :class:`KeyVaultError` naming it if it cannot be read.

    An unreadable key is never silently replaced: a process started with the wrong master key would
    otherwise rewrite, under its own key, secrets that every other process can read.
    """
    return vault.decrypt(token, name, subject=f"the API key of endpoint {name!r}")




async def check_secrets_readable(conn: AsyncConnection, vault: KeyVault) -> None:
    """Decrypt every stored endpoint API key and caller signing key; :class:`KeyVaultError` names the first
    one ``vault`` cannot open."""
    for name, token in (await conn.execute(select(endpoints.c.name, endpoints.c.api_key_enc).where(
            endpoints.c.api_key_enc.is_not(None)).order_by(endpoints.c.name))).all():
        _stored_key(vault, token, name)
    for name, token in (await conn.execute(select(callers_table.c.name, callers_table.c.signing_key_enc).where(
            callers_table.c.signing_key_enc.is_not(None)).order_by(callers_table.c.name))).all():
        decrypt_signing_key(vault, token, name)

@dataclass(frozen=True, slots=True)
class RotationReport:
    """What a master-key rotation re-encrypted; ``already_current`` values were under the new key already."""

    endpoint_keys: int
    signing_keys: int
    already_current: int

    def as_dict(self) -> dict[str, int]:
        return {"endpoint_keys": self.endpoint_keys, "signing_keys": self.signing_keys,
                "already_current": self.already_current}


async def rotate_master_key(engine: AsyncEngine, vault: KeyVault, *, dry_run: bool = False) -> RotationReport:
    """Re-encrypt every endpoint API key and caller signing key under ``vault``'s current master key.

    ``vault`` is built with the new master key as current and the old one(s) as ``previous_keys``.
    Everything happens in ONE transaction: if any stored value opens under none of the keys,
    :class:`KeyVaultError` names it and nothing is written. Values already under the new key are left
    alone, so running the rotation again (after an interruption, or after a process still on the old
    key stored a new value) finishes it. ``dry_run`` does all of it and rolls back. The registry version
    is not bumped: no plaintext changes, and running processes keep serving from their snapshots.
    """
    async with engine.connect() as conn:
        async with conn.begin() as tx:
            if conn.dialect.name == "postgresql":  # one at a time with apply_registry and other rotations
                await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _APPLY_LOCK_ID})
            rows = (await conn.execute(select(endpoints.c.name, endpoints.c.api_key_enc).where(
                endpoints.c.api_key_enc.is_not(None)).order_by(endpoints.c.name).with_for_update())).all()
            endpoint_keys = 0
            for name, token in rows:
                new = vault.rewrap(token, name, subject=f"the API key of endpoint {name!r}")
                if new is not None:
                    await conn.execute(endpoints.update().where(endpoints.c.name == name).values(api_key_enc=new))
                    endpoint_keys += 1
            signing_keys, signing_current = await rewrap_signing_keys(conn, vault)
            report = RotationReport(endpoint_keys=endpoint_keys, signing_keys=signing_keys,
                                    already_current=len(rows) - endpoint_keys + signing_current)
            if dry_run:
                await tx.rollback()
    return report

async def _check_exists(conn: AsyncConnection, table: Table, name: str, label: str, *, owner: str) -> None:
    found = (await conn.execute(select(table.c.name).where(table.c.name == name))).first()
    if found is None:
        raise HearthError("invalid_request", f"{owner!r} refers to unknown {label} {name!r}",
                          details={"unknown": label, "name": name})


async def bump_version(conn: AsyncConnection) -> None:
    current = await read_version(conn)
    if current == 0:
        await conn.execute(meta.insert().values(key="registry_version", value="1"))
    else:
        await conn.execute(meta.update().where(meta.c.key == "registry_version").values(value=str(current + 1)))


async def read_version(conn: AsyncConnection) -> int:
    value = (await conn.execute(select(meta.c.value).where(meta.c.key == "registry_version"))).scalar()
    return int(value) if value else 0


async def current_version(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return await read_version(conn)


async def load_registry(engine: AsyncEngine, vault: KeyVault) -> Registry:
    async with engine.connect() as conn:
        return await _load(conn, vault)


async def _load(conn: AsyncConnection, vault: KeyVault) -> Registry:
    """The snapshot of what ``conn`` sees (inside an apply's transaction: the registry as it will be)."""
    version = await read_version(conn)
    prov = {r["name"]: r for r in (await conn.execute(select(providers))).mappings()}
    groups = {r["name"]: QuotaGroup(name=r["name"], max_concurrency=r["max_concurrency"], rpm=r["rpm"],
                                    tpm=r["tpm"], daily_tokens=r["daily_tokens"])
              for r in (await conn.execute(select(quota_groups))).mappings()}
    eps: dict[str, Endpoint] = {}
    for r in (await conn.execute(select(endpoints).order_by(endpoints.c.name))).mappings():  # first bad key: same one
        p = prov[r["provider"]]
        enabled, reason, disabled_by = effective_state(
            enabled=bool(r["enabled"]), reason=r["disabled_reason"], disabled_by=r["disabled_by"],
            provider=r["provider"], provider_enabled=bool(p["enabled"]))
        eps[r["name"]] = Endpoint(
            name=r["name"], provider=r["provider"], kind=p["kind"],
            base_url=(r["base_url"] or p["base_url"] or _DEFAULT_BASE_URLS[p["kind"]]).rstrip("/"),
            upstream_model=r["upstream_model"],
            api_key=_stored_key(vault, r["api_key_enc"], r["name"]) if r["api_key_enc"] else None,
            api_key_hint=r["api_key_hint"], key_version=r["key_version"],
            quota_group=groups.get(r["quota_group"]) if r["quota_group"] else None,
            max_concurrency=r["max_concurrency"], rpm=r["rpm"], tpm=r["tpm"], weight=r["weight"],
            priority=r["priority"], timeout_s=r["timeout_s"], capabilities=frozenset(r["capabilities"]),
            enabled=enabled, disabled_reason=reason, disabled_by=disabled_by,
            max_tokens_field=r["max_tokens_field"], first_token_timeout_s=r["first_token_timeout_s"],
            stream_idle_timeout_s=r["stream_idle_timeout_s"], forward_headers=tuple(p["forward_headers"]),
            relay_ratelimit_headers=bool(p["relay_ratelimit_headers"]),
            image_sizes=frozenset(r["image_sizes"]) if r["image_sizes"] is not None else None)
    pools: dict[str, list[Endpoint]] = {}
    for r in (await conn.execute(select(model_pool_members).order_by(
            model_pool_members.c.model, model_pool_members.c.endpoint))).mappings():
        pools.setdefault(r["model"], []).append(eps[r["endpoint"]])
    mods = {r["name"]: Model(name=r["name"], kind=r["kind"], endpoints=tuple(pools.get(r["name"], [])),
                             description=r["description"], enabled=r["enabled"],
                             expose_upstream_model=bool(r["expose_upstream_model"]))
            for r in (await conn.execute(select(models))).mappings()}
    prs = {r["model"]: Price(model=r["model"], input_per_1m=r["input_per_1m"],
                             output_per_1m=r["output_per_1m"], currency=r["currency"],
                             per_image=r["per_image"] or 0.0)
           for r in (await conn.execute(select(prices))).mappings()}
    by_hash, by_name = await load_callers(conn, vault)
    scns = {r["name"]: Scene(name=r["name"], default_model=r["default_model"],
                             allowed_models=frozenset(r["allowed_models"]), max_tokens_cap=r["max_tokens_cap"],
                             fallback_models=tuple(r["fallback_models"]), enabled=r["enabled"],
                             guardrails=r["guardrails"], cache_ttl_s=r["cache_ttl_s"])
            for r in (await conn.execute(select(scenes))).mappings()}
    bdgs = tuple(Budget(name=r["name"], caller=r["caller"], scope=r["scope"], subject=r["subject"],
                        period=r["period"], unit=r["unit"], limit=r["limit_amount"],
                        estimate=r["estimate"])
                 for r in (await conn.execute(select(budgets).order_by(budgets.c.name))).mappings()
                 if r["enabled"])
    return Registry(version=version, endpoints=eps, models=mods, prices=prs, callers_by_key_hash=by_hash,
                    callers_by_name=by_name, scenes=scns, budgets=bdgs, created_at=int(time.time()),
                    enabled_providers=frozenset(name for name, r in prov.items() if r["enabled"]))


async def set_endpoint_enabled(engine: AsyncEngine, name: str, enabled: bool, reason: str | None, *,
                               by: DisabledBy = "admin") -> bool:
    """Enable or disable one endpoint at runtime; returns False if no such endpoint.

    A disable records ``reason``, ``by`` (``gateway`` after a credential failure, ``admin`` from the admin
    API) and the time, and is kept through applies and restarts; an enable clears all of it.
    """
    now = datetime.now(UTC)
    async with engine.begin() as conn:
        result = await conn.execute(endpoints.update().where(endpoints.c.name == name).values(
            **runtime_state(enabled, reason, by=by, now=now), updated_at=now))
        if result.rowcount == 0:
            return False
        await bump_version(conn)
    return True


async def list_rows(engine: AsyncEngine, table_name: str) -> list[dict[str, Any]]:
    table = {"providers": providers, "quota_groups": quota_groups, "endpoints": endpoints,
             "models": models, "prices": prices, "scenes": scenes, "budgets": budgets}[table_name]
    async with engine.connect() as conn:
        rows = [dict(r) for r in (await conn.execute(select(table))).mappings()]
        if table_name == "endpoints":  # shown as the router sees them, never enabled while skipped
            provider_enabled = {name: bool(on) for name, on in (await conn.execute(
                select(providers.c.name, providers.c.enabled))).all()}
            for row in rows:
                row["enabled"], row["disabled_reason"], row["disabled_by"] = effective_state(
                    enabled=bool(row["enabled"]), reason=row["disabled_reason"], disabled_by=row["disabled_by"],
                    provider=row["provider"], provider_enabled=bool(provider_enabled.get(row["provider"], True)))
        if table_name == "models":
            members = (await conn.execute(select(model_pool_members))).mappings().all()
            for row in rows:
                row["endpoints"] = sorted(m["endpoint"] for m in members if m["model"] == row["name"])
    for row in rows:
        row.pop("api_key_enc", None)
    return rows
