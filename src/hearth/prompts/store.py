"""The prompt and role tables: every write, and the reads the admin API and the catalog need.

**One active version per code, under any concurrency.** Every transaction that changes a prompt's
versions starts by writing the prompt's own row (``UPDATE prompts SET updated_at``): on PostgreSQL that
row lock queues concurrent changes of one code (each statement after it sees the previous one's commit);
on SQLite the first write takes the database's write lock before anything is read, so no transaction
decides on a stale read. The partial unique index ``uq_prompt_versions_one_active`` is the backstop.
Every status change writes a ``prompt_events`` row (operator, reason, the previous active version) and
bumps ``prompts_version`` in ``meta``, which every process's catalog polls (:mod:`hearth.prompts.catalog`).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import BigInteger, Text, cast, func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.errors import HearthError
from hearth.prompts.rendering import check_templates
from hearth.prompts.spec import PromptCreate, RolePatch, RoleSpec, Status, VersionPatch
from hearth.store.db import write_transaction
from hearth.store.tables import meta, prompt_events, prompt_versions, prompts, roles

VERSION_KEY = "prompts_version"
_P, _V, _E, _R = prompts.c, prompt_versions.c, prompt_events.c, roles.c


# ---- versions --------------------------------------------------------------------------------------------
async def create_version(engine: AsyncEngine, spec: PromptCreate) -> dict[str, Any]:
    """A new code (version 1) or the next version of an existing one; returns the version's row."""
    contents = spec.normalized_contents()
    check_templates(contents, [v.name for v in spec.variables])
    for attempt in (1, 2):
        try:
            async with write_transaction(engine) as conn:
                now = datetime.now(UTC)
                if not await _touch(conn, spec.code, now, display_name=spec.display_name,
                                    description=spec.description):
                    await conn.execute(prompts.insert().values(
                        code=spec.code, display_name=spec.display_name or spec.code, description=spec.description,
                        created_at=now, updated_at=now))
                number = int((await conn.execute(select(func.coalesce(func.max(_V.version), 0)).where(
                    _V.code == spec.code))).scalar_one()) + 1
                active = await _active_version(conn, spec.code)
                activate = spec.activate if spec.activate is not None else active is None
                if activate and active is not None:
                    await _set(conn, spec.code, active, status="inactive", canary_share=0.0, now=now)
                await conn.execute(prompt_versions.insert().values(
                    code=spec.code, version=number, status="active" if activate else "inactive",
                    default_locale=spec.default_locale, contents=contents,
                    variables=[v.model_dump() for v in spec.variables], model=spec.model, scene=spec.scene,
                    output_schema=spec.output_schema, params=spec.params, quality_gate=spec.quality_gate,
                    canary_share=0.0, content_hash=spec.content_hash(), created_by=spec.operator,
                    created_at=now, updated_at=now))
                await _event(conn, spec.code, number, "created", operator=spec.operator, reason=spec.reason,
                             previous=None, now=now)
                if activate:
                    await _event(conn, spec.code, number, "activated", operator=spec.operator, reason=spec.reason,
                                 previous=active, now=now)
                await bump_catalog_version(conn)
                return await _version_row(conn, spec.code, number)
        except IntegrityError:
            if attempt == 2:  # two creators of one new code: the loser retries once as a new version
                raise
    raise AssertionError("unreachable")


async def change_version(engine: AsyncEngine, code: str, number: int, patch: VersionPatch) -> dict[str, Any]:
    """Apply a status change, a canary share and/or display fields, atomically and audited."""
    async with write_transaction(engine) as conn:
        now = datetime.now(UTC)
        if not await _touch(conn, code, now, display_name=patch.display_name, description=patch.description):
            raise HearthError("prompt_not_found", f"The prompt `{code}` does not exist.")
        row = await _version_row(conn, code, number)
        operator, reason = patch.operator or "api", patch.reason
        if patch.status is not None and patch.status != row["status"]:
            await _change_status(conn, code, number, patch.status, operator=operator, reason=reason, now=now)
        if patch.canary_share is not None:
            await _change_canary(conn, code, number, patch.canary_share, operator=operator, reason=reason, now=now)
        await bump_catalog_version(conn)
        return await _version_row(conn, code, number)


async def _change_status(conn: AsyncConnection, code: str, number: int, status: Status, *, operator: str,
                         reason: str | None, now: datetime) -> None:
    active = await _active_version(conn, code)
    if status == "active":
        if active is not None:
            await _set(conn, code, active, status="inactive", canary_share=0.0, now=now)
            await _event(conn, code, active, "deactivated", operator=operator, reason=reason, previous=active, now=now)
        await _set(conn, code, number, status="active", canary_share=0.0, now=now)
        await _event(conn, code, number, "activated", operator=operator, reason=reason, previous=active, now=now)
    else:
        await _set(conn, code, number, status=status, canary_share=0.0, now=now)
        await _event(conn, code, number, "disabled" if status == "disabled" else "deactivated", operator=operator,
                     reason=reason, previous=active, now=now)


async def _change_canary(conn: AsyncConnection, code: str, number: int, share: float, *, operator: str,
                         reason: str | None, now: datetime) -> None:
    row = await _version_row(conn, code, number)
    if share > 0 and row["status"] != "inactive":
        raise HearthError("conflict", f"Only an inactive version can be a canary (v{number} is {row['status']}).")
    if share > 0:  # one canary per prompt: another version's share ends
        await conn.execute(update(prompt_versions).where(_V.code == code, _V.version != number, _V.canary_share > 0)
                           .values(canary_share=0.0, updated_at=now))
    await _set(conn, code, number, status=row["status"], canary_share=share, now=now)
    await _event(conn, code, number, "canary", operator=operator,
                 reason=f"share={share}" + (f": {reason}" if reason else ""),
                 previous=await _active_version(conn, code), now=now)


async def _touch(conn: AsyncConnection, code: str, now: datetime, *, display_name: str | None = None,
                 description: str | None = None) -> bool:
    """Write the prompt's row first (the lock that serialises changes of one code); False if it does not exist."""
    values: dict[str, Any] = {"updated_at": now}
    if display_name is not None:
        values["display_name"] = display_name
    if description is not None:
        values["description"] = description
    result = await conn.execute(update(prompts).where(_P.code == code).values(**values))
    return bool(result.rowcount)


async def _active_version(conn: AsyncConnection, code: str) -> int | None:
    value = (await conn.execute(select(_V.version).where(_V.code == code, _V.status == "active"))).scalar()
    return None if value is None else int(value)


async def _set(conn: AsyncConnection, code: str, number: int, *, status: str, canary_share: float,
               now: datetime) -> None:
    await conn.execute(update(prompt_versions).where(_V.code == code, _V.version == number)
                       .values(status=status, canary_share=canary_share, updated_at=now))


async def _event(conn: AsyncConnection, code: str, number: int, action: str, *, operator: str,
                 reason: str | None, previous: int | None, now: datetime) -> None:
    await conn.execute(prompt_events.insert().values(code=code, version=number, action=action, operator=operator,
                                                     reason=reason, previous_active=previous, created_at=now))


async def _version_row(conn: AsyncConnection, code: str, number: int) -> dict[str, Any]:
    row = (await conn.execute(select(prompt_versions).where(_V.code == code, _V.version == number))).mappings().first()
    if row is None:
        raise HearthError("prompt_version_not_found", f"The prompt `{code}` has no version {number}.")
    return dict(row)


async def bump_catalog_version(conn: AsyncConnection) -> None:
    """Increment ``prompts_version`` atomically (one statement), so two concurrent changes never leave it
    at a value some catalog already loaded."""
    bumped = cast(cast(meta.c.value, BigInteger) + 1, Text)
    result = await conn.execute(update(meta).where(meta.c.key == VERSION_KEY).values(value=bumped))
    if not result.rowcount:
        dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
        stmt = dialect.insert(meta).values(key=VERSION_KEY, value="1")
        await conn.execute(stmt.on_conflict_do_update(index_elements=[meta.c.key], set_={"value": bumped}))


async def catalog_version(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        value = (await conn.execute(select(meta.c.value).where(meta.c.key == VERSION_KEY))).scalar()
    return int(value) if value is not None else 0


# ---- reads -------------------------------------------------------------------------------------------------
async def list_prompts(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        rows = (await conn.execute(select(prompts).order_by(_P.code))).mappings().all()
        versions = (await conn.execute(select(_V.code, _V.version, _V.status, _V.canary_share))).all()
    info: dict[str, dict[str, Any]] = {}
    for code, number, status, share in versions:
        entry = info.setdefault(code, {"versions": 0, "active_version": None, "canary_version": None})
        entry["versions"] += 1
        if status == "active":
            entry["active_version"] = int(number)
        if share:
            entry["canary_version"] = int(number)
    return [{**dict(r), **info.get(r["code"], {})} for r in rows]


async def get_prompt(engine: AsyncEngine, code: str) -> dict[str, Any]:
    async with engine.connect() as conn:
        row = (await conn.execute(select(prompts).where(_P.code == code))).mappings().first()
        if row is None:
            raise HearthError("prompt_not_found", f"The prompt `{code}` does not exist.")
        versions = (await conn.execute(select(prompt_versions).where(_V.code == code)
                                       .order_by(_V.version))).mappings().all()
        events = (await conn.execute(select(prompt_events).where(_E.code == code).order_by(_E.id.desc())
                                     .limit(50))).mappings().all()
    active = next((v for v in versions if v["status"] == "active"), None)
    return {**dict(row), "active_version": active["version"] if active else None,
            "active": dict(active) if active else None, "versions": [_summary(v) for v in versions],
            "history": [dict(e) for e in events]}


async def list_versions(engine: AsyncEngine, code: str) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        if (await conn.execute(select(_P.code).where(_P.code == code))).first() is None:
            raise HearthError("prompt_not_found", f"The prompt `{code}` does not exist.")
        rows = (await conn.execute(select(prompt_versions).where(_V.code == code)
                                   .order_by(_V.version))).mappings().all()
    return [dict(r) for r in rows]


def _summary(v: Any) -> dict[str, Any]:
    return {k: v[k] for k in ("version", "status", "default_locale", "model", "scene", "canary_share",
                              "content_hash", "created_by", "created_at", "updated_at")} | {
        "locales": sorted(v["contents"])}


async def latest_hashes(engine: AsyncEngine) -> dict[str, tuple[int, str, str, str]]:
    """Per code: (newest version, its content hash, its status, the prompt's display name) — for imports."""
    async with engine.connect() as conn:
        rows = (await conn.execute(select(_V.code, _V.version, _V.content_hash, _V.status, _P.display_name)
                                   .join(prompts, _P.code == _V.code))).all()
    out: dict[str, tuple[int, str, str, str]] = {}
    for code, number, digest, status, name in rows:
        if code not in out or number > out[code][0]:
            out[code] = (int(number), digest, status, name)
    return out


async def active_rows(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every active version and every canary (what the runtime may serve)."""
    rows = (await conn.execute(select(prompt_versions).where(
        (_V.status == "active") | ((_V.status == "inactive") & (_V.canary_share > 0))))).mappings().all()
    return [dict(r) for r in rows]


async def role_rows(conn: AsyncConnection) -> list[dict[str, Any]]:
    return [dict(r) for r in (await conn.execute(select(roles).order_by(_R.code))).mappings().all()]


# ---- roles -------------------------------------------------------------------------------------------------
async def create_role(engine: AsyncEngine, spec: RoleSpec) -> dict[str, Any]:
    async with write_transaction(engine) as conn:
        if spec.prompt_code is not None:
            await _require_prompt(conn, spec.prompt_code)
        now = datetime.now(UTC)
        try:
            await conn.execute(roles.insert().values(
                code=spec.code, display_name=spec.display_name or spec.code, default_locale=spec.default_locale,
                persona=spec.persona, prompt_code=spec.prompt_code, model=spec.model, scene=spec.scene,
                enabled=spec.enabled, created_at=now, updated_at=now))
        except IntegrityError:
            raise HearthError("conflict", f"The role `{spec.code}` exists; change it with PATCH.") from None
        await bump_catalog_version(conn)
        return await _role_row(conn, spec.code)


async def change_role(engine: AsyncEngine, code: str, patch: RolePatch) -> dict[str, Any]:
    async with write_transaction(engine) as conn:
        current = await _role_row(conn, code)
        values: dict[str, Any] = {k: v for k, v in patch.model_dump(exclude_unset=True).items()}
        for key in ("prompt_code", "model", "scene"):  # "" unbinds
            if values.get(key) == "":
                values[key] = None
        if values.get("prompt_code"):
            await _require_prompt(conn, values["prompt_code"])
        merged = {**current, **values}
        try:
            RoleSpec(code=code, display_name=merged["display_name"], default_locale=merged["default_locale"],
                     persona=merged["persona"], prompt_code=merged["prompt_code"], model=merged["model"],
                     scene=merged["scene"], enabled=merged["enabled"])
        except ValueError as exc:
            raise HearthError("invalid_request", str(exc).splitlines()[-1].strip()) from None
        values["updated_at"] = datetime.now(UTC)
        await conn.execute(update(roles).where(_R.code == code).values(**values))
        await bump_catalog_version(conn)
        return await _role_row(conn, code)


async def get_role(engine: AsyncEngine, code: str) -> dict[str, Any]:
    async with engine.connect() as conn:
        return await _role_row(conn, code)


async def list_roles(engine: AsyncEngine) -> list[dict[str, Any]]:
    async with engine.connect() as conn:
        return await role_rows(conn)


async def _role_row(conn: AsyncConnection, code: str) -> dict[str, Any]:
    row = (await conn.execute(select(roles).where(_R.code == code))).mappings().first()
    if row is None:
        raise HearthError("role_not_found", f"The role `{code}` does not exist.")
    return dict(row)


async def _require_prompt(conn: AsyncConnection, code: str) -> None:
    if (await conn.execute(select(_P.code).where(_P.code == code))).first() is None:
        raise HearthError("prompt_not_found", f"The prompt `{code}` does not exist.", param="prompt_code")
