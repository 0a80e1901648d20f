"""What the runtime serves: the active (and canary) prompt versions and the roles, as one in-memory
snapshot, reloaded when ``prompts_version`` in the database moves.

Every change to prompts or roles bumps ``prompts_version`` in the same transaction
(:mod:`hearth.prompts.store`); each process polls it every ``prompt_refresh_s`` (0.5 s by default) and
the process that made a change reloads at once, so an activation is served everywhere within a second
and never mixed: a call takes one snapshot and uses it throughout. Versions are immutable, so a cached
compiled template (:mod:`hearth.prompts.rendering`) keyed by version is never stale.

A **canary** (a non-active version with a traffic share) is chosen per request id, deterministically:
the same request id always gets the same version, and the share is exact over many ids.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.prompts.spec import PromptVersion, Role, role_from_row, version_from_row
from hearth.prompts.store import active_rows, catalog_version, role_rows


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    version: int
    active: dict[str, PromptVersion] = field(default_factory=dict)
    canary: dict[str, PromptVersion] = field(default_factory=dict)
    roles: dict[str, Role] = field(default_factory=dict)

    def prompt(self, code: str, request_id: str) -> PromptVersion:
        """The version a request runs: the active one, or the canary for its share of request ids."""
        active = self.active.get(code)
        canary = self.canary.get(code)
        if canary is not None and canary_draw(code, request_id) < canary.canary_share:
            return canary
        if active is None:
            raise HearthError("prompt_not_found", f"The prompt `{code}` does not exist or has no active version.",
                              param="prompt_code")
        return active

    def role(self, code: str) -> Role:
        role = self.roles.get(code)
        if role is None or not role.enabled:
            raise HearthError("role_not_found", f"The role `{code}` does not exist or is disabled.", param="role")
        return role


def canary_draw(code: str, request_id: str) -> float:
    """A uniform number in [0, 1) fixed by (code, request id)."""
    digest = hashlib.sha256(f"{code}\x00{request_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class PromptCatalog:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self.snapshot = CatalogSnapshot(version=-1)

    async def load(self) -> CatalogSnapshot:
        async with self._engine.connect() as conn:
            version = await catalog_version(self._engine)
            versions = [version_from_row(r) for r in await active_rows(conn)]
            roles = {r["code"]: role_from_row(r) for r in await role_rows(conn)}
        self.snapshot = CatalogSnapshot(
            version=version, active={v.code: v for v in versions if v.status == "active"},
            canary={v.code: v for v in versions if v.status == "inactive" and v.canary_share > 0}, roles=roles)
        return self.snapshot

    async def refresh(self) -> bool:
        """Reload if another process changed prompts or roles; True if it did."""
        if await catalog_version(self._engine) == self.snapshot.version:
            return False
        await self.load()
        return True
