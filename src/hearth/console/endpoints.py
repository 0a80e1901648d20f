"""The endpoints page: each endpoint's health, cooldown, in-flight against its limit, RPM/TPM use and
masked key, with enable and disable (admin: it changes the registry), and a test call (operator: one tiny chat
request at most once a minute per endpoint, :mod:`hearth.gateway.endpoint_test_call`) whose last outcome is shown.

The list comes from the registry snapshot (in memory) and the state backend's live counters, a page of
:data:`PAGE` endpoints at a time keyed by name. Only ``api_key_hint`` (masked) is ever shown.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import request_id, runtime
from hearth.console.auth import ConsoleRefused, checked_form, require
from hearth.console.render import page, redirect
from hearth.errors import HearthError
from hearth.gateway.endpoint_admission import scopes_for
from hearth.gateway.endpoint_test_call import MAX_TOKENS as TEST_MAX_TOKENS
from hearth.gateway.endpoint_test_call import last_test, run_endpoint_test
from hearth.observability.logging import get_logger
from hearth.observability.rollup_reports import usage_breakdown, window_named
from hearth.registry.snapshot import Endpoint
from hearth.registry.store import set_endpoint_enabled
from hearth.state.base import StateUnavailable

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
log = get_logger("hearth.console")
PAGE: Final = 50
TRAFFIC_WINDOW: Final = "1h"  # the window of the calls and p95 columns (minute rollups)


async def endpoint_row(request: Request, ep: Endpoint) -> dict[str, Any]:
    rt = runtime(request)
    health = rt.gateway.health.snapshot(ep.name, rt.gateway.health.clock.now())
    scopes: list[dict[str, Any]] = []
    for s in scopes_for(ep):
        u = await rt.state.usage(s.key)
        scopes.append({"key": s.key, "in_flight": u.in_flight, "max_concurrency": s.max_concurrency,
                       "rpm_used": u.rpm_used, "rpm": s.rpm, "tpm_used": u.tpm_used, "tpm": s.tpm,
                       "cooldown_s": round(u.cooldown_s, 1)})
    cooldown = max([float(str(health["cooldown_s"]))] + [float(s["cooldown_s"]) for s in scopes])
    state = "disabled" if not ep.enabled else "cooling down" if cooldown > 0 else \
        "circuit open" if health["circuit"] == "open" else "healthy"
    return {"name": ep.name, "provider": ep.provider, "upstream_model": ep.upstream_model,
            "quota_group": ep.quota_group.name if ep.quota_group else None, "enabled": ep.enabled,
            "disabled_reason": ep.disabled_reason, "disabled_by": ep.disabled_by, "key": ep.api_key_hint or "—",
            "health": health, "scopes": scopes, "cooldown_s": round(cooldown, 1), "state": state,
            "priority": ep.priority, "last_test": await last_test(rt.state, ep.name),
            "testable": "chat" in ep.capabilities}  # a test call is a chat request


@router.get("/endpoints", include_in_schema=False)
async def endpoints(request: Request) -> Response:
    console = await require(request)
    after = request.query_params.get("after", "")
    names = sorted(n for n in runtime(request).gateway.registry.endpoints if n > after)
    shown, more = names[:PAGE], len(names) > PAGE
    registry = runtime(request).gateway.registry
    try:
        rows = [await endpoint_row(request, registry.endpoints[n]) for n in shown]
    except StateUnavailable as exc:
        raise ConsoleRefused(503, "The state backend is unavailable: live counters cannot be read.") from exc
    _, _, traffic = await usage_breakdown(runtime(request).engine, window_named(TRAFFIC_WINDOW), "endpoint")
    last_hour = dict(traffic)
    for row in rows:  # calls, errors and p95 over the last hour, from the rollups (one grouped read per page)
        row["traffic"] = last_hour.get(row["name"])
    return page(request, "endpoints.html", console, rows=rows, next_after=shown[-1] if more else None,
                test_max_tokens=TEST_MAX_TOKENS, traffic_window=TRAFFIC_WINDOW)


@router.post("/endpoints/{name}/test", include_in_schema=False)
async def test_call(name: str, request: Request) -> Response:
    """One test call; the page shows its outcome (and keeps showing it as the endpoint's last test)."""
    console = await require(request, "operator")
    await checked_form(request, console)
    try:
        result = await run_endpoint_test(runtime(request).gateway, name, operator=console.user,
                                         request_id=request_id(request))
    except HearthError as exc:
        return redirect("/console/endpoints", error=f"{name}: {exc.message}")
    latency = f" in {result.latency_ms:.0f} ms" if result.latency_ms is not None else ""
    if result.ok:
        return redirect("/console/endpoints", notice=f"{name} answered {result.status}{latency}.")
    return redirect("/console/endpoints", error=f"{name} test failed: {result.status} {result.error_code}{latency}"
                                                + (f" — {result.message}" if result.message else ""))


@router.post("/endpoints/{name}/{action}", include_in_schema=False)
async def toggle(name: str, action: str, request: Request) -> Response:
    console = await require(request, "admin")
    form = await checked_form(request, console)
    if action not in ("enable", "disable"):
        raise ConsoleRefused(404, "No such endpoint action.")
    rt = runtime(request)
    if name not in rt.gateway.registry.endpoints:
        return redirect("/console/endpoints", error=f"No endpoint named {name}.")
    enabled = action == "enable"
    reason = form.get("reason", "").strip()[:500] or None
    try:
        await set_endpoint_enabled(rt.engine, name, enabled, None if enabled else
                                   f"disabled by {console.user}" + (f": {reason}" if reason else ""),
                                   by="admin")
        if enabled:
            await rt.state.clear_cooldown(f"ep:{name}")
        await rt.reload_registry()
    except (HearthError, StateUnavailable) as exc:
        return redirect("/console/endpoints", error=f"{name}: {exc}")
    log.info("console_endpoint_toggled", user=console.user, endpoint=name, enabled=enabled)
    return redirect("/console/endpoints", notice=f"{name} {action}d.")

