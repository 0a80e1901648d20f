"""The ASGI application: routers, error rendering, request ids, and the runtime's lifespan."""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import signal
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, ORJSONResponse
from starlette.middleware.cors import CORSMiddleware
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp

from hearth import __version__
from hearth.api import (
    admin,
    admin_operations,
    ai,
    alerts,
    anthropic_messages,
    batches,
    budgets,
    callers_admin,
    dead_letters,
    document_jobs,
    documents,
    files,
    health,
    images,
    mcp,
    metrics,
    model_registry,
    openai,
    prompts,
    request_logs,
    reviews,
    schedules,
    tasks,
    usage_admin,
    workflow_runs,
    workflows,
)
from hearth.api import responses as responses_api
from hearth.api.direct_routes import DirectRoutes
from hearth.api.error_handlers import install_error_handlers
from hearth.console import install_console
from hearth.observability.logging import configure_logging, get_logger
from hearth.observability.request_id import RequestIdMiddleware
from hearth.observability.trace_middleware import TraceMiddleware
from hearth.observability.tracing import start_tracing
from hearth.process_memory import release_startup_garbage
from hearth.runtime import Runtime, start_runtime
from hearth.settings import Settings, load_settings

log = get_logger("hearth.app")


# The API's routers in matching order (a route that matches first wins). Their routes go into each app as their
# modules built them, one set per process, instead of through include_router (hearth.api.route_defaults says why).
_ROUTERS: tuple[APIRouter, ...] = (
    health.router,
    metrics.router,
    openai.router,
    callers_admin.router,  # before admin.router: its /{kind} routes would claim /callers
    alerts.router,  # before admin.router: its /{kind} routes would claim /alerts
    admin_operations.router,  # before admin.router: its /{kind} routes would claim /queues
    usage_admin.router,  # before admin.router: its /{kind} routes would claim /usage
    admin.router,
    request_logs.router,
    budgets.router,
    prompts.router,
    ai.router,
    model_registry.router,
    tasks.router,
    dead_letters.router,
    schedules.router,
    reviews.router,
    workflow_runs.router,  # before workflows.router: its /{name} routes would claim /runs
    workflows.router,
    document_jobs.router,  # before documents.router: its /{id} routes would claim /jobs
    documents.router,
    images.router,
    mcp.router,  # the MCP gateway (docs/mcp.md)
    anthropic_messages.router,
    files.router,
    batches.router,
    responses_api.router,  # /v1/responses, /v1/completions (docs/responses.md)
)


def create_app(settings: Settings | None = None) -> FastAPI:
    resolved = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        rt = await start_runtime(resolved)
        if threading.current_thread() is threading.main_thread():  # this server owns its process (not a test's thread)
            release_startup_garbage()
        app.state.runtime = rt
        app.state.grpc = None
        sampling = metrics.start_sampling(rt)  # several workers: each keeps its gauges fresh
        log.info("hearth_ready", host=resolved.host, port=resolved.port, state_backend=rt.state.name,
                 database=resolved.database_url.split("://", 1)[0], models=sorted(rt.gateway.registry.models))
        try:
            app.state.grpc = await _start_grpc(rt)  # None unless grpc_port is set (docs/grpc.md)
            with _shutdown_begins_on_signals(rt):
                yield
        finally:
            if sampling is not None:
                sampling.cancel()
            if app.state.grpc is not None:  # its calls in flight end (stream grace) before the runtime closes
                await app.state.grpc.stop()
            await rt.stop()

    app = FastAPI(title="Hearth", version=__version__, lifespan=lifespan, default_response_class=ORJSONResponse,
                  routes=[route for router in _ROUTERS for route in router.routes],
                  description="Self-hosted AI capability service: OpenAI-compatible gateway, admin and logs.",
                  docs_url=None, redoc_url=None,  # FastAPI's pages load their scripts from a CDN
                  # FastAPI's own OpenTelemetry spans and metrics are off: Hearth traces itself (traces are
                  # opt-in, docs/operations.md), and FastAPI's would duplicate its request spans
                  telemetry={"tracing": False, "metrics": False, "logs": False})
    install_error_handlers(app)
    _install_offline_docs(app)
    install_console(app)  # /console: the web console (docs/console.md)
    return app


@contextmanager
def _shutdown_begins_on_signals(rt: Runtime) -> Iterator[None]:
    """SIGTERM / SIGINT begin the runtime's shutdown at once (:mod:`hearth.shutdown`).

    uvicorn handles these signals itself: it stops accepting, waits for open connections
    (``timeout_graceful_shutdown``), and only then runs the lifespan's shutdown. The runtime must know at
    the first moment — ``/readyz`` turns 503, the worker stops claiming, the stream grace starts, the
    total bound is armed — so, for the lifespan's duration, the handler the server installed is called
    through one that tells the runtime first (one and several uvicorn workers alike: each worker process
    installs its own). Nothing is wrapped outside the main thread (a server run in a thread, as in tests)
    or when no handler of the server's is there (signals keep their default meaning).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def on_signal(sig: int, frame: FrameType | None) -> None:
        loop.call_soon_threadsafe(functools.partial(rt.shutdown.begin, bound_process=True))
        handler = previous[sig]
        assert callable(handler)
        handler(sig, frame)

    wrapped = [sig for sig, handler in previous.items() if callable(handler)]
    for sig in wrapped:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig in wrapped:
            if signal.getsignal(sig) is on_signal:
                signal.signal(sig, previous[sig])


def _install_offline_docs(app: FastAPI) -> None:
    """``/docs``: Swagger UI (5.x, which reads OpenAPI 3.1) from the ``swagger-ui-py`` package's own files,
    served under ``/docs/assets``, so the page works on a machine without internet access."""
    spec = importlib.util.find_spec("swagger_ui")  # located, not imported: only its static files are used
    assert spec is not None and spec.submodule_search_locations, "swagger-ui-py is a dependency"
    app.mount("/docs/assets", StaticFiles(directory=Path(spec.submodule_search_locations[0]) / "static"),
              name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs(request: Request) -> HTMLResponse:
        root = str(request.scope.get("root_path", "")).rstrip("/")
        return get_swagger_ui_html(openapi_url=f"{root}{app.openapi_url}", title="Hearth — API",
                                   swagger_js_url=f"{root}/docs/assets/swagger-ui-bundle.js",
                                   swagger_css_url=f"{root}/docs/assets/swagger-ui.css",
                                   swagger_favicon_url=f"{root}/docs/assets/favicon-32x32.png")


# What a browser caller may read of an answer: request ids, routing, budgets, retry advice, upstream limits.
CORS_EXPOSED_HEADERS = ("x-request-id", "x-hearth-endpoint", "x-hearth-attempts", "x-hearth-model",
                        "x-hearth-upstream-model", "x-hearth-budget", "x-hearth-budget-remaining",
                        "x-hearth-budget-unit", "x-should-retry", "retry-after", "retry-after-ms",
                        "x-ratelimit-limit-requests", "x-ratelimit-limit-tokens", "x-ratelimit-remaining-requests",
                        "x-ratelimit-remaining-tokens", "x-ratelimit-reset-requests", "x-ratelimit-reset-tokens")


def create_asgi(settings: Settings | None = None) -> RequestIdMiddleware:
    """What uvicorn serves: request ids around the hot routes (OpenAI, capabilities), FastAPI for the rest.

    With ``cors_origins`` configured, CORS wraps the whole app — the hot routes too, preflights included
    (inside the request ids, so a refused preflight has one as well). Browsers send the API key as
    ``Authorization``, not as a cookie, so credentials mode is not enabled.
    """
    resolved = settings
    if resolved is None:
        # uvicorn's factory path (HEARTH_WORKERS > 1): each worker is a fresh (spawned) interpreter, so
        # the logging `hearth serve` configured in the parent is not there; without this the workers
        # would ignore HEARTH_LOG_LEVEL and log plain text.
        resolved = load_settings()
        configure_logging(resolved.log_level)
    direct = DirectRoutes(create_app(resolved))
    inner: ASGIApp = direct
    if resolved.cors_origins:
        inner = CORSMiddleware(inner, allow_origins=resolved.cors_origins, allow_methods=["*"], allow_headers=["*"],
                               expose_headers=list(CORS_EXPOSED_HEADERS), max_age=600)
    if start_tracing(resolved) is not None:  # traces configured (docs/operations.md): a span per request
        inner = TraceMiddleware(inner, frozenset(path for _, path in direct.routes))
    return RequestIdMiddleware(inner)


def fastapi_app(asgi: RequestIdMiddleware) -> FastAPI:
    app = asgi.app
    if isinstance(app, TraceMiddleware):
        app = app.app
    if isinstance(app, CORSMiddleware):
        app = app.app
    assert isinstance(app, DirectRoutes)
    return app.api


async def _start_grpc(rt: Runtime) -> Any:
    """The gRPC door on this runtime when ``grpc_port`` is set (imported only then: grpcio loads native code)."""
    if rt.settings.grpc_port is None:
        return None
    from hearth.grpc_api.server import GrpcDoor

    return await GrpcDoor.start(rt)
