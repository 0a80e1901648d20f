"""Mounts the console on the application: its pages under ``/console``, its static files, and the
rendering of its two control-flow signals (a redirect to sign in, a refusal as an HTML page)."""

from __future__ import annotations

from fastapi import APIRouter, FastAPI, Request
from starlette.responses import Response
from starlette.staticfiles import StaticFiles

from hearth.console import (
    budgets,
    dead_letters,
    endpoints,
    login,
    overview,
    playground,
    prompts,
    queues,
    quota_groups,
    request_logs,
    reviews,
    schedules,
    tasks,
    usage,
    workflows,
)
from hearth.console.auth import ConsoleRedirect, ConsoleRefused, current
from hearth.console.render import STATIC_DIR, page, redirect

router = APIRouter(prefix="/console", include_in_schema=False)


@router.get("")
@router.get("/")
async def home() -> Response:
    return redirect("/console/overview")


async def _redirect(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConsoleRedirect)
    return redirect(exc.location)


async def _refused(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ConsoleRefused)
    try:
        console = await current(request)
    except ConsoleRefused:
        console = None
    return page(request, "refused.html", console, status=exc.status, message=exc.message)


# The console's pages in matching order. Their routes go into each app as their modules built them, one set per
# process, instead of through include_router (hearth.api.route_defaults says why).
_ROUTERS = (login.router, overview.router, endpoints.router, request_logs.router, tasks.router, dead_letters.router,
            reviews.router, prompts.router, schedules.router, budgets.router, playground.router, quota_groups.router,
            workflows.router, queues.router, usage.router, router)


def install_console(app: FastAPI) -> None:
    app.mount("/console/static", StaticFiles(directory=STATIC_DIR), name="console-static")
    app.add_exception_handler(ConsoleRedirect, _redirect)
    app.add_exception_handler(ConsoleRefused, _refused)
    app.router.routes.extend(route for r in _ROUTERS for route in r.routes)
