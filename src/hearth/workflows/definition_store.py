"""Registered workflow definitions: validated, then kept as immutable numbered versions per name.

Registering a definition validates it (:func:`hearth.workflows.definitions.validate_definition`: shape,
cycles, unknown task types and sub-workflows, unbound references, unbounded loops — a 400 naming the path
at fault) and stores it as the name's next version; registering the same definition again (same canonical
JSON) adds nothing and answers the existing version, so a GitOps loop can apply its files every time.
Versions are never changed or deleted: a run names the version it started with. This module owns
``workflow_definitions``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError
from hearth.store.db import write_transaction
from hearth.store.tables import workflow_definitions
from hearth.workflows.definitions import WorkflowDefinition, validate_definition

_c = workflow_definitions.c


@dataclass(slots=True)
class DefinitionStore:
    engine: AsyncEngine
    clock: Clock = SYSTEM_CLOCK

    async def register(self, raw: Mapping[str, Any], *,
                       known_task_types: Collection[str]) -> tuple[Mapping[Any, Any], bool]:
        """(the stored version, whether it is new)."""
        known = set(await self.names())
        definition = validate_definition(raw, known_task_types=known_task_types, known_workflows=known)
        ((row, created),) = await self.store([definition])
        return row, created

    async def store(self, definitions: Sequence[WorkflowDefinition]) -> list[tuple[Mapping[Any, Any], bool]]:
        """Store validated definitions in one transaction — all or none — each as its name's next version
        unless its canonical JSON equals the newest one's; (the stored version, whether it is new) of each."""
        for attempt in range(2):
            try:
                stored: list[tuple[str, int, bool]] = []
                async with write_transaction(self.engine) as conn:
                    for definition in definitions:
                        spec = definition.model_dump(mode="json", exclude_none=True)
                        digest = hashlib.sha256(orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)).hexdigest()
                        latest = (await conn.execute(select(_c.version, _c.digest).where(_c.name == definition.name)
                                                     .order_by(_c.version.desc()).limit(1))).first()
                        if latest is not None and latest[1] == digest:
                            stored.append((definition.name, int(latest[0]), False))
                            continue
                        version = 1 if latest is None else int(latest[0]) + 1
                        await conn.execute(workflow_definitions.insert().values(
                            name=definition.name, version=version, spec=spec, digest=digest,
                            created_at=self.clock.now()))
                        stored.append((definition.name, version, True))
                return [(await self.get(name, version), created) for name, version, created in stored]
            except IntegrityError:  # a parallel registration took that version number: read again
                if attempt:
                    raise HearthError("conflict", "A parallel registration of this workflow won; register "
                                      "again.") from None
        raise AssertionError("unreachable")

    async def get(self, name: str, version: int | None = None) -> Mapping[Any, Any]:
        stmt = select(workflow_definitions).where(_c.name == name)
        stmt = stmt.where(_c.version == version) if version is not None else stmt.order_by(_c.version.desc())
        async with self.engine.connect() as conn:
            row = (await conn.execute(stmt.limit(1))).mappings().first()
        if row is None:
            what = f"`{name}`" + (f" version {version}" if version is not None else "")
            raise HearthError("workflow_not_found", f"No workflow {what}.", param="name")
        return row

    async def versions(self, name: str) -> Sequence[Mapping[Any, Any]]:
        async with self.engine.connect() as conn:
            rows = list((await conn.execute(select(_c.name, _c.version, _c.digest, _c.created_at)
                                            .where(_c.name == name).order_by(_c.version))).mappings().all())
        if not rows:
            raise HearthError("workflow_not_found", f"No workflow `{name}`.", param="name")
        return rows

    async def names(self) -> list[str]:
        async with self.engine.connect() as conn:
            return list((await conn.execute(select(_c.name).distinct().order_by(_c.name))).scalars())

    async def latest(self) -> Sequence[Mapping[Any, Any]]:
        """Each workflow's newest version (name, version, created_at)."""
        newest = select(_c.name, func.max(_c.version).label("version")).group_by(_c.name).subquery()
        stmt = select(_c.name, _c.version, _c.created_at).join(
            newest, (newest.c.name == _c.name) & (newest.c.version == _c.version)).order_by(_c.name)
        async with self.engine.connect() as conn:
            return list((await conn.execute(stmt)).mappings().all())
