"""Admin API (``HEARTH_ADMIN_TOKEN``): list, upsert, enable and disable registry entries.

An upsert is the same idempotent apply as ``hearth apply FILE`` restricted to one entry, so the
file and the API can never disagree about what "unchanged" means. Keys are only shown masked.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import Depends, Request
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES, OK
from hearth.api.deps import read_json_object, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.path_names import register_any_name
from hearth.api.request_body import parse_model
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.gateway.endpoint_admission import scopes_for
from hearth.registry.config import (
    BudgetSpec,
    EndpointSpec,
    ModelSpec,
    PriceSpec,
    ProviderSpec,
    QuotaGroupSpec,
    RegistrySpec,
    SceneSpec,
)
from hearth.registry.names import check_name
from hearth.registry.store import apply_registry, list_rows, set_endpoint_enabled
from hearth.state.base import StateUnavailable

register_any_name()  # {name:anyname}: a bad name is a 400, not a 404
router = api_router(prefix="/api/v1/admin", tags=["admin"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)

_KINDS: dict[str, tuple[str, str, type[Any]]] = {
    "providers": ("providers", "name", ProviderSpec),
    "quota-groups": ("quota_groups", "name", QuotaGroupSpec),
    "endpoints": ("endpoints", "name", EndpointSpec),
    "models": ("models", "name", ModelSpec),
    "prices": ("prices", "model", PriceSpec),
    "scenes": ("scenes", "name", SceneSpec),
    "budgets": ("budgets", "name", BudgetSpec),
}


def _kind(kind: str) -> tuple[str, str, type[Any]]:
    if kind not in _KINDS:
        raise HearthError("not_found", f"Unknown registry kind `{kind}`.", details={"kinds": sorted(_KINDS)})
    return _KINDS[kind]


@router.get("/stats", summary="Process counters: batch writers (backlog, failures, dead rows), registry version",
            responses=OK)
async def stats(request: Request) -> Response:
    rt = runtime(request)
    data: dict[str, Any] = {"request_log_writer": rt.log_writer.stats()}
    ledger_stats = getattr(rt.ledger, "stats", None)
    if callable(ledger_stats):
        data["budget_ledger"] = ledger_stats()
    data.update(registry_version=rt.gateway.registry.version, state_backend=rt.state.name,
                uptime_s=round(time.time() - rt.started_at, 1))
    return ok(request, data)


@router.get("/{kind}", summary="List registry entries of one kind", responses=OK)
async def list_entries(kind: str, request: Request) -> Response:
    table, _, _ = _kind(kind)
    return ok(request, await list_rows(runtime(request).engine, table))


@router.put("/{kind}/{name:anyname}", summary="Create or update one registry entry (idempotent)", responses=OK)
async def upsert_entry(kind: str, name: str, request: Request) -> Response:
    table, key_field, spec_cls = _kind(kind)
    check_name(name, key_field, external=kind == "prices")  # a price key may be an upstream model name
    body = await read_json_object(request)
    body[key_field] = name
    registry_spec = parse_model(RegistrySpec, {table: [parse_model(spec_cls, body, "entry")]}, "entry")
    rt = runtime(request)
    report = await apply_registry(rt.engine, registry_spec, rt.vault)
    if report.changed:
        await rt.reload_registry()
    return ok(request, report.as_dict())


async def _toggle(request: Request, name: str, enabled: bool) -> Response:
    check_name(name)
    rt = runtime(request)
    reason = None if enabled else "disabled by admin"
    if not await set_endpoint_enabled(rt.engine, name, enabled, reason, by="admin"):
        raise HearthError("not_found", f"No endpoint named `{name}`.")
    if enabled:
        try:
            await rt.state.clear_cooldown(f"ep:{name}")
        except StateUnavailable as exc:
            raise HearthError("state_backend_unavailable", retry_after=2) from exc
    await rt.reload_registry()
    if not enabled:
        await rt.alert_endpoint_disabled(name, by="admin", reason=reason)
    ep = rt.gateway.registry.endpoints[name]  # as the router now sees it (a disabled provider still counts)
    return ok(request, {"name": name, "enabled": ep.enabled, "disabled_reason": ep.disabled_reason,
                        "disabled_by": ep.disabled_by})


@router.post("/endpoints/{name:anyname}/enable",
             summary="Enable an endpoint: lifts a gateway or admin disable for good (and its credential cooldown)",
             responses=OK)
async def enable_endpoint(name: str, request: Request) -> Response:
    return await _toggle(request, name, True)


@router.post("/endpoints/{name:anyname}/disable",
             summary="Disable an endpoint (kept through `hearth apply` and restarts until enabled)", responses=OK)
async def disable_endpoint(name: str, request: Request) -> Response:
    return await _toggle(request, name, False)


@router.get("/endpoints/{name:anyname}/status", summary="Live state of an endpoint: leases, windows, health",
            responses=OK)
async def endpoint_status(name: str, request: Request) -> Response:
    check_name(name)
    rt = runtime(request)
    ep = rt.gateway.registry.endpoints.get(name)
    if ep is None:
        raise HearthError("not_found", f"No endpoint named `{name}`.")
    try:
        scopes = {}
        for s in scopes_for(ep):
            u = await rt.state.usage(s.key)
            scopes[s.key] = {"in_flight": u.in_flight, "max_concurrency": s.max_concurrency,
                             "rpm_used": u.rpm_used, "rpm": s.rpm, "tpm_used": u.tpm_used, "tpm": s.tpm,
                             "daily_tokens_used": u.daily_tokens_used, "daily_tokens": s.daily_tokens,
                             "cooldown_s": round(u.cooldown_s, 3)}
    except StateUnavailable as exc:
        raise HearthError("state_backend_unavailable", retry_after=2) from exc
    return ok(request, {"name": name, "enabled": ep.enabled, "disabled_reason": ep.disabled_reason,
                        "disabled_by": ep.disabled_by, "api_key": ep.api_key_hint, "scopes": scopes,
                        "health": rt.gateway.health.snapshot(name, rt.gateway.health.clock.now())})
