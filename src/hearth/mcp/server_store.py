"""Upstream MCP servers at rest (``mcp_servers``) and the in-memory snapshot the ``/mcp`` route reads.

The registry file's ``mcp_servers:`` are applied in one transaction, idempotently (an unchanged server is
not written and does not bump the registry version). The credential is kept like an endpoint's API key:
AES-GCM under the master key, bound to ``mcp:<name>``; omitted in the file → the stored one is kept; shown
only masked. Decrypted credentials live only in :class:`UpstreamServer` (excluded from ``repr``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.mcp.policy import Policy, build_policy
from hearth.registry.key_vault import KeyVault, mask_key
from hearth.registry.mcp_config import McpRuleSpec, McpServerSpec
from hearth.registry.store import ApplyReport, _upsert, bump_version
from hearth.store.tables import mcp_servers


@dataclass(slots=True, frozen=True)
class UpstreamServer:
    """One upstream MCP server as the gateway uses it."""

    name: str
    url: str
    credential: str | None = field(default=None, repr=False)
    credential_hint: str | None = None
    credential_header: str = "Authorization"
    enabled: bool = True
    timeout_s: float = 30.0
    caller_rpm: int = 0
    caller_concurrency: int = 0
    policy: Policy = field(default_factory=lambda: build_policy([]))

    def upstream_headers(self) -> dict[str, str]:
        """The headers Hearth's own requests to this server carry (its credential; nothing of the caller's)."""
        if self.credential is None:
            return {}
        if self.credential_header.lower() == "authorization":
            return {"Authorization": f"Bearer {self.credential}"}
        return {self.credential_header: self.credential}

    def connection_key(self) -> tuple[str, str | None, str, float]:
        """What a pooled session depends on: a change of any of these needs a new upstream session."""
        return (self.url, self.credential, self.credential_header, self.timeout_s)


def _context(name: str) -> str:
    return f"mcp:{name}"


async def apply_mcp_servers(engine: AsyncEngine, specs: Sequence[McpServerSpec], vault: KeyVault) -> ApplyReport:
    """Upsert ``specs`` in one transaction; bump the registry version if anything changed (so every process
    reloads its snapshot)."""
    report = ApplyReport()
    if not specs:
        return report
    async with engine.begin() as conn:
        for spec in specs:
            stored = (await conn.execute(select(mcp_servers.c.credential_enc).where(
                mcp_servers.c.name == spec.name))).scalar_one_or_none()
            values = spec.model_dump(exclude={"name", "credential", "rules"})
            values["rules"] = [rule.model_dump(exclude_defaults=True) for rule in spec.rules]
            if spec.credential is not None and (
                    stored is None or _open(vault, stored, spec.name) != spec.credential):
                values["credential_enc"] = vault.encrypt(spec.credential, _context(spec.name))
                values["credential_hint"] = mask_key(spec.credential)
            await _upsert(conn, mcp_servers, {"name": spec.name}, values, label=f"mcp_server:{spec.name}",
                          report=report)
        if report.changed:
            await bump_version(conn)
    return report


def _open(vault: KeyVault, token: str, name: str) -> str:
    return vault.decrypt(token, _context(name), subject=f"the credential of MCP server {name!r}")


async def load_mcp_servers(engine: AsyncEngine, vault: KeyVault) -> dict[str, UpstreamServer]:
    """Every stored server, credentials decrypted (a :class:`KeyVaultError` names one that cannot be)."""
    async with engine.connect() as conn:
        rows = (await conn.execute(select(mcp_servers).order_by(mcp_servers.c.name))).mappings().all()
    out: dict[str, UpstreamServer] = {}
    for row in rows:
        rules = [McpRuleSpec.model_validate(rule) for rule in row["rules"]]
        out[row["name"]] = UpstreamServer(
            name=row["name"], url=row["url"],
            credential=_open(vault, row["credential_enc"], row["name"]) if row["credential_enc"] else None,
            credential_hint=row["credential_hint"], credential_header=row["credential_header"],
            enabled=bool(row["enabled"]), timeout_s=float(row["timeout_s"]), caller_rpm=int(row["caller_rpm"]),
            caller_concurrency=int(row["caller_concurrency"]), policy=build_policy(rules))
    return out


async def rewrap_mcp_credentials(engine: AsyncEngine, vault: KeyVault, *, dry_run: bool = False) -> tuple[int, int]:
    """``hearth rotate-master-key`` for MCP server credentials: each re-encrypted under ``vault``'s current
    key, in one transaction (a credential no key opens raises :class:`KeyVaultError` naming the server, and
    nothing is written). Returns (re-encrypted, already current); ``dry_run`` rolls back."""
    async with engine.connect() as conn:
        async with conn.begin() as tx:
            rows = (await conn.execute(select(mcp_servers.c.name, mcp_servers.c.credential_enc).where(
                mcp_servers.c.credential_enc.is_not(None)).order_by(mcp_servers.c.name))).all()
            done = 0
            for name, token in rows:
                new = vault.rewrap(token, _context(name), subject=f"the credential of MCP server {name!r}")
                if new is not None:
                    await conn.execute(mcp_servers.update().where(mcp_servers.c.name == name).values(
                        credential_enc=new))
                    done += 1
            if dry_run:
                await tx.rollback()
    return done, len(rows) - done
