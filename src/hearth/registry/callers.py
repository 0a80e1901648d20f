"""Callers: internal applications identified by an API key that is stored only as a SHA-256 hash.

This module owns the ``callers`` table. Keys are high-entropy random tokens, so a plain SHA-256
(not a slow password hash) is the right tool: it keeps authentication a dictionary lookup. A key
is shown once, when created or rotated; afterwards only its prefix is listed. A caller's request
signing key (HMAC) must be recoverable, so it is encrypted with the key vault instead.

It lives in the registry, not in ``hearth.auth``: applying and loading the registry writes and reads
this table, and authentication only reads the resulting snapshot (``hearth.auth`` sits above).
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from hearth.registry.config import CallerLimitsSpec, CallerSpec
from hearth.registry.key_vault import KeyVault
from hearth.registry.snapshot import Caller, CallerLimits, LimitSet
from hearth.store.tables import callers

KEY_PREFIX = "hk-"
_CONTEXT = "caller-signing:"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _policy_values(spec: CallerSpec) -> dict[str, Any]:
    return {"enabled": spec.enabled, "allowed_models": spec.allowed_models, "allowed_scenes": spec.allowed_scenes,
            "default_scene": spec.default_scene, "require_signature": spec.require_signature,
            "limits": spec.limits.model_dump()}


async def upsert_caller(conn: AsyncConnection, spec: CallerSpec, vault: KeyVault) -> str | None:
    """Create or update a caller; ``key``/``signing_key`` None keeps the stored ones.

    Returns ``"created"``, ``"updated"`` or None when nothing changed.
    """
    row = (await conn.execute(select(callers).where(callers.c.name == spec.name))).mappings().first()
    now = datetime.now(UTC)
    values = _policy_values(spec)
    if spec.signing_key is not None:
        stored = row["signing_key_enc"] if row is not None else None
        # A stored key this vault cannot read is an error, not a reason to overwrite it: a process
        # started with the wrong master key must not rewrite what the others can read.
        if stored is None or decrypt_signing_key(vault, stored, spec.name) != spec.signing_key:
            values["signing_key_enc"] = vault.encrypt(spec.signing_key, signing_key_context(spec.name))
    if row is None:
        if spec.key is None:
            raise ValueError(f"caller {spec.name!r} is new and needs a key")
        await conn.execute(callers.insert().values(
            name=spec.name, key_hash=hash_key(spec.key), key_prefix=spec.key[:6], created_at=now, updated_at=now,
            **values))
        return "created"
    if spec.key is not None and row["key_hash"] != hash_key(spec.key):
        values.update(key_hash=hash_key(spec.key), key_prefix=spec.key[:6], revoked_at=None)
    diff = {k: v for k, v in values.items() if row[k] != v}
    if not diff:
        return None
    await conn.execute(callers.update().where(callers.c.name == spec.name).values(updated_at=now, **diff))
    return "updated"


def signing_key_context(name: str) -> str:
    """The associated data a caller's signing key is encrypted with: binds it to the caller's name."""
    return _CONTEXT + name


def decrypt_signing_key(vault: KeyVault, token: str, name: str) -> str:
    """The caller's signing key; :class:`KeyVaultError` naming the caller if it cannot be decrypted.

    Never "no key": a caller whose own key is unreadable must not fall back to the global one.
    """
    return vault.decrypt(token, signing_key_context(name), subject=f"the signing key of caller {name!r}")


def _limits(raw: Any) -> CallerLimits:
    spec = CallerLimitsSpec.model_validate(raw or {})
    return CallerLimits(**{k: LimitSet(**v.model_dump()) for k, v in spec})


def _caller(row: Any, vault: KeyVault) -> Caller:
    signing = decrypt_signing_key(vault, row["signing_key_enc"], row["name"]) if row["signing_key_enc"] else None
    return Caller(
        name=row["name"], enabled=bool(row["enabled"]) and row["revoked_at"] is None,
        allowed_models=frozenset(row["allowed_models"]) if row["allowed_models"] is not None else None,
        allowed_scenes=frozenset(row["allowed_scenes"]) if row["allowed_scenes"] is not None else None,
        default_scene=row["default_scene"], signing_key=signing, require_signature=bool(row["require_signature"]),
        limits=_limits(row["limits"]))


async def load_callers(conn: AsyncConnection, vault: KeyVault) -> tuple[dict[str, Caller], dict[str, Caller]]:
    """Callers by key hash (for authentication) and by name (for shared-token mode)."""
    by_hash: dict[str, Caller] = {}
    by_name: dict[str, Caller] = {}
    for row in (await conn.execute(select(callers))).mappings():
        caller = _caller(row, vault)
        by_hash[row["key_hash"]] = caller
        by_name[row["name"]] = caller
    return by_hash, by_name



async def rewrap_signing_keys(conn: AsyncConnection, vault: KeyVault) -> tuple[int, int]:
    """Re-encrypt every stored signing key under ``vault``'s current master key (a master-key rotation).

    Runs in the caller's transaction; returns (re-encrypted, already under the current key). A key no
    key of ``vault`` opens raises :class:`KeyVaultError` naming the caller, before anything is committed.
    """
    rows = (await conn.execute(select(callers.c.name, callers.c.signing_key_enc).where(
        callers.c.signing_key_enc.is_not(None)).order_by(callers.c.name).with_for_update())).all()
    changed = 0
    for name, token in rows:
        new = vault.rewrap(token, signing_key_context(name), subject=f"the signing key of caller {name!r}")
        if new is not None:
            await conn.execute(callers.update().where(callers.c.name == name).values(signing_key_enc=new))
            changed += 1
    return changed, len(rows) - changed

# ---- key management (CLI `hearth keys`, admin API) ---------------------------------------------

async def create_caller(conn: AsyncConnection, spec: CallerSpec, vault: KeyVault) -> str:
    """Create a caller with a fresh key; returns the key (the only time it is ever shown)."""
    if (await conn.execute(select(callers.c.name).where(callers.c.name == spec.name))).first() is not None:
        raise ValueError(f"caller {spec.name!r} already exists")
    key = new_key()
    await upsert_caller(conn, spec.model_copy(update={"key": key}), vault)
    return key


async def rotate_key(conn: AsyncConnection, name: str) -> str | None:
    """Replace a caller's key (the old one stops working at once); None if no such caller."""
    key = new_key()
    result = await conn.execute(callers.update().where(callers.c.name == name).values(
        key_hash=hash_key(key), key_prefix=key[:6], revoked_at=None, updated_at=datetime.now(UTC)))
    return key if result.rowcount else None


async def revoke(conn: AsyncConnection, name: str) -> bool:
    now = datetime.now(UTC)
    result = await conn.execute(callers.update().where(callers.c.name == name).values(revoked_at=now, updated_at=now))
    return bool(result.rowcount)


async def list_callers(conn: AsyncConnection) -> list[dict[str, Any]]:
    rows = (await conn.execute(select(callers).order_by(callers.c.name))).mappings().all()
    out = []
    for r in rows:
        out.append({"name": r["name"], "key_prefix": r["key_prefix"], "enabled": r["enabled"],
                    "revoked": r["revoked_at"] is not None, "allowed_models": r["allowed_models"],
                    "allowed_scenes": r["allowed_scenes"], "default_scene": r["default_scene"],
                    "require_signature": r["require_signature"], "has_signing_key": r["signing_key_enc"] is not None,
                    "limits": r["limits"], "created_at": r["created_at"]})
    return out
