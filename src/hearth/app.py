"""The ASGI application: routers, error rendering, request ids, and the runtime's lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import ORJSONResponse

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


def create_asgi(settings: Settings | None = None) -> RequestIdMiddleware:
    """What uvicorn serves: request ids around the hot OpenAI routes, FastAPI for the rest."""
    return RequestIdMiddleware(HotPathApp(create_app(settings)))


def fastapi_app(asgi: RequestIdMiddleware) -> FastAPI:
    app = asgi.app
    assert isinstance(app, HotPathApp)
    return app.api
