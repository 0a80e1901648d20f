"""The ASGI application: routers, error rendering, request ids, and the runtime's lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import ORJSONResponse
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp

from hearth import __version__
from hearth.api import admin, budgets, callers_admin, health, openai, request_logs
from hearth.api.error_handlers import install_error_handlers
from hearth.api.hot_path import HotPathApp
from hearth.observability.logging import get_logger
from hearth.observability.request_id import RequestIdMiddleware
from hearth.runtime import start_runtime
from hearth.settings import Settings, load_settings

log = get_logger("hearth.app")


def create_app(settings: Settings | None = None) -> FastAPI:
    resolved = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rt = await start_runtime(resolved)
        app.state.runtime = rt
        log.info("hearth_ready", host=resolved.host, port=resolved.port, state_backend=rt.state.name,
                 database=resolved.database_url.split("://", 1)[0], models=sorted(rt.gateway.registry.models))
        try:
            yield
        finally:
            await rt.stop()

    app = FastAPI(title="Hearth", version=__version__, lifespan=lifespan, default_response_class=ORJSONResponse,
                  description="Self-hosted AI capability service: OpenAI-compatible gateway, admin and logs.")
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(openai.router)
    app.include_router(callers_admin.router)  # before admin.router: its /{kind} routes would claim /callers
    app.include_router(admin.router)
    app.include_router(request_logs.router)
    app.include_router(budgets.router)
    return app


# What a browser caller may read of an answer: request ids, routing, budgets, retry advice, upstream limits.
CORS_EXPOSED_HEADERS = ("x-request-id", "x-hearth-endpoint", "x-hearth-attempts", "x-hearth-model",
                        "x-hearth-upstream-model", "x-hearth-budget", "x-hearth-budget-remaining",
                        "x-hearth-budget-unit", "x-should-retry", "retry-after", "retry-after-ms",
                        "x-ratelimit-limit-requests", "x-ratelimit-limit-tokens", "x-ratelimit-remaining-requests",
                        "x-ratelimit-remaining-tokens", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")


def create_asgi(settings: Settings | None = None) -> RequestIdMiddleware:
    """What uvicorn serves: request ids around the hot OpenAI routes, FastAPI for the rest.

    With ``cors_origins`` configured, CORS wraps the whole app — the hot routes too, preflights included
    (inside the request ids, so a refused preflight has one as well). Browsers send the API key as
    ``Authorization``, not as a cookie, so credentials mode is not enabled.
    """
    resolved = settings or load_settings()
    inner: ASGIApp = HotPathApp(create_app(resolved))
    if resolved.cors_origins:
        inner = CORSMiddleware(inner, allow_origins=resolved.cors_origins, allow_methods=["*"], allow_headers=["*"],
                               expose_headers=list(CORS_EXPOSED_HEADERS), max_age=600)
    return RequestIdMiddleware(inner)


def fastapi_app(asgi: RequestIdMiddleware) -> FastAPI:
    app = asgi.app
    if isinstance(app, CORSMiddleware):
        app = app.app
    assert isinstance(app, HotPathApp)
    return app.api
