"""The prompt pages: prompts (paged by code), one prompt's versions with their contents, history and stats over
the last 24 hours (calls, error rate, p50/p95 latency, tokens — from the request log's capability rows, a bounded
index range read: :func:`hearth.observability.request_log.prompt_version_window`), activation with a reason, and a
canary share for an inactive version (admin role: both change what capability calls render).

Activating an older version is the rollback; the prompt store audits each change with the signed-in
user as the operator, and this process reloads its catalog at once (others within their refresh).
"""

from __future__ import annotations

import difflib
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson
from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.console.auth import ConsoleRefused, checked_form, require
from hearth.console.render import page, redirect
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.observability.request_log import prompt_version_window
from hearth.prompts import store
from hearth.prompts.spec import VersionPatch

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
log = get_logger("hearth.console")
PAGE: Final = 50
STATS_WINDOW: Final = timedelta(hours=24)
STATS_MAX_CALLS: Final = 5_000  # the newest capability requests of the window the stats are computed on (measured
# on PostgreSQL with 1M log rows and a 2-core machine under load: 34 ms median, 56 ms p95, aggregated by the database)
MAX_CANARY_PERCENT: Final = 50.0  # VersionPatch.canary_share's bound (0.5), as a percentage


@router.get("/prompts", include_in_schema=False)
async def prompts(request: Request) -> Response:
    console = await require(request)
    after = request.query_params.get("after", "")
    rows = [p for p in await store.list_prompts(runtime(request).engine) if p["code"] > after]
    shown = rows[:PAGE]
    return page(request, "prompts.html", console, rows=shown,
                next_after=shown[-1]["code"] if len(rows) > PAGE else None)


@router.get("/prompts/{code}", include_in_schema=False)
async def prompt(code: str, request: Request) -> Response:
    console = await require(request)
    engine = runtime(request).engine
    try:
        info = await store.get_prompt(engine, code)
        versions = await store.list_versions(engine, code)
    except HearthError as exc:
        raise ConsoleRefused(exc.status, exc.message) from exc
    active = next((v for v in versions if v["status"] == "active"), None)
    diffs = {v["version"]: diff_lines(active, v) for v in versions if active is not None and v is not active}
    stats, sampled = await prompt_version_window(engine, code, since=datetime.now(UTC) - STATS_WINDOW,
                                                 limit=STATS_MAX_CALLS)
    return page(request, "prompt.html", console, info=info, versions=list(reversed(versions)), diffs=diffs,
                active_version=active["version"] if active else None, stats=stats, stats_sampled=sampled,
                stats_max=STATS_MAX_CALLS, max_canary=MAX_CANARY_PERCENT)


def _lines(version: dict[str, Any]) -> list[str]:
    shown = {k: version.get(k) for k in ("contents", "variables", "model", "scene", "params", "output_schema")}
    text: bytes = orjson.dumps(shown, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS, default=str)
    return text.decode().splitlines()


def diff_lines(active: dict[str, Any], other: dict[str, Any]) -> list[tuple[str, str]]:
    """``other`` against the active version, line by line: ``(kind, text)`` with kind ``+``, ``-``, ``@`` or
    ``" "`` — what would change if ``other`` were activated."""
    out: list[tuple[str, str]] = []
    for line in difflib.unified_diff(_lines(active), _lines(other), lineterm="", n=2):
        if line.startswith(("---", "+++")):
            continue
        out.append((line[:1], line))
    return out


@router.post("/prompts/{code}/versions/{version}/activate", include_in_schema=False)
async def activate(code: str, version: int, request: Request) -> Response:
    console = await require(request, "admin")
    form = await checked_form(request, console)
    back = f"/console/prompts/{code}"
    reason = form.get("reason", "").strip()
    if not reason:
        return redirect(back, error="A reason is required to activate a version.")
    rt = runtime(request)
    try:
        await store.change_version(rt.engine, code, version,
                                   VersionPatch(status="active", operator=console.user, reason=reason[:2000]))
    except HearthError as exc:
        return redirect(back, error=exc.message)
    await rt.prompts.load()
    log.info("console_prompt_activated", user=console.user, code=code, version=version)
    return redirect(back, notice=f"Version {version} is active.")


@router.post("/prompts/{code}/canary", include_in_schema=False)
async def canary(code: str, request: Request) -> Response:
    """Set (``percent`` > 0) or end (0) the share of requests an inactive ``version`` serves, with a reason."""
    console = await require(request, "admin")
    form = await checked_form(request, console)
    back = f"/console/prompts/{code}"
    reason = form.get("reason", "").strip()
    if not reason:
        return redirect(back, error="A reason is required to change a canary share.")
    try:
        version = int(form.get("version", ""))
        percent = float(form.get("percent", ""))
    except ValueError:
        return redirect(back, error="Choose a version and a share in percent.")
    if not 0 <= percent <= MAX_CANARY_PERCENT:
        return redirect(back, error=f"The canary share is between 0 and {MAX_CANARY_PERCENT:g} %.")
    rt = runtime(request)
    try:
        await store.change_version(rt.engine, code, version, VersionPatch(
            canary_share=round(percent / 100, 4), operator=console.user, reason=reason[:2000]))
    except HearthError as exc:
        return redirect(back, error=exc.message)
    await rt.prompts.load()
    log.info("console_prompt_canary", user=console.user, code=code, version=version, percent=percent)
    notice = f"Version {version} serves {percent:g} % of requests." if percent else f"Version {version}: canary ended."
    return redirect(back, notice=notice)
