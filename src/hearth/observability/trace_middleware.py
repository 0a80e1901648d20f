"""ASGI middleware: one server span per HTTP request, child of the caller's W3C ``traceparent`` if it sent one.

Installed only when tracing is on (:func:`hearth.app.create_asgi`), so a process without traces pays nothing
for it. The span is named ``METHOD route`` after the route *template* (``GET /api/v1/tasks/{task_id}``), never
the raw path (whose ids would make every name unique): the hot routes dispatched in front of FastAPI match
their exact path, which is their template; FastAPI's routes leave theirs in ``scope["route"]``; a request no
route matched is named after its method alone. The span is :data:`hearth.observability.tracing.parent` while
the request runs, so the gateway call, a submitted task or a workflow pass it starts hangs under it — a
stream's too, whose body is sent inside this middleware.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from hearth.observability import tracing


class TraceMiddleware:
    def __init__(self, app: ASGIApp, direct_paths: frozenset[str] = frozenset()) -> None:
        self.app = app
        self.direct_paths = direct_paths  # paths that are their own route template (the direct routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        t = tracing.active
        if t is None or scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        header: bytes | None = None
        for name, value in scope["headers"]:
            if name == b"traceparent":
                header = value
                break
        method = scope.get("method", "")
        span = t.start(method, under=tracing.remote_parent(header), kind="server",
                       attributes={"http.request.method": method,
                                   "hearth.request_id": scope.get("state", {}).get("request_id")})
        status = 500

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        token = tracing.parent.set(span)
        try:
            await self.app(scope, receive, send_status)
        finally:
            tracing.parent.reset(token)
            route = self._route(scope)
            if route is not None:
                span.update_name(f"{method} {route}")
            tracing.end(span, error=f"http_{status}" if status >= 500 else None,
                        attributes={"http.route": route, "http.response.status_code": status})

    def _route(self, scope: Scope) -> str | None:
        path = scope.get("path", "")
        if path in self.direct_paths:
            return str(path)
        route = scope.get("route")
        template = getattr(route, "path", None)
        return template if isinstance(template, str) else None
