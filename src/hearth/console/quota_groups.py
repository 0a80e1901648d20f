"""The quota groups page: each provider account that several endpoints' keys share, with its limits (concurrency,
RPM, TPM, daily tokens), its live use from the state backend and the endpoints that draw on it.

Groups come from the registry snapshot (in memory): those at least one endpoint belongs to — a group no endpoint
uses limits nothing. A group with no limit configured is not counted by admission (its scope is skipped), so its
use shows as "not counted" rather than as zeros.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import ConsoleRefused, require
from hearth.console.render import page
from hearth.registry.snapshot import QuotaGroup
from hearth.state.base import StateUnavailable

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)


def _counted(group: QuotaGroup) -> bool:
    """Whether admission keeps a scope for the group (see ``hearth.gateway.endpoint_admission.scopes_for``)."""
    return bool(group.max_concurrency or group.rpm or group.tpm or group.daily_tokens)


async def group_rows(request: Request) -> list[dict[str, Any]]:
    rt = runtime(request)
    groups: dict[str, QuotaGroup] = {}
    members: dict[str, list[dict[str, Any]]] = {}
    for ep in sorted(rt.gateway.registry.endpoints.values(), key=lambda e: e.name):
        if ep.quota_group is not None:
            groups[ep.quota_group.name] = ep.quota_group
            members.setdefault(ep.quota_group.name, []).append(
                {"name": ep.name, "provider": ep.provider, "enabled": ep.enabled})
    rows = []
    for name in sorted(groups):
        g = groups[name]
        use = await rt.state.usage(f"qg:{name}") if _counted(g) else None
        rows.append({"name": name, "max_concurrency": g.max_concurrency, "rpm": g.rpm, "tpm": g.tpm,
                     "daily_tokens": g.daily_tokens, "counted": use is not None,
                     "in_flight": use.in_flight if use else None, "rpm_used": use.rpm_used if use else None,
                     "tpm_used": use.tpm_used if use else None,
                     "daily_tokens_used": use.daily_tokens_used if use else None, "endpoints": members[name]})
    return rows


@router.get("/quota-groups", include_in_schema=False)
async def quota_groups(request: Request) -> Response:
    console = await require(request)
    try:
        rows = await group_rows(request)
    except StateUnavailable as exc:
        raise ConsoleRefused(503, "The state backend is unavailable: live counters cannot be read.") from exc
    return page(request, "quota_groups.html", console, rows=rows)
