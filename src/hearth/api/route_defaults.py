"""``api_router()``: how every API module declares its routes, with the defaults the app's routes share.

The app does not ``include_router`` these routers; it takes their routes as they are
(:func:`hearth.app.create_app`), built once when their module is imported and shared by every app the process
creates. FastAPI builds an included router's routes again for each app — dependants, body and response
fields, handlers: ~220 ms of CPU for this API, paid on the first requests — which a process creating many
apps (the test suite starts one per server) paid every time, and every request then walked the inclusion
tree. So whatever an inclusion would have added must be on the routes already: JSON is rendered by orjson.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter
from fastapi.responses import ORJSONResponse
from fastapi.routing import APIRoute
from fastapi.utils import create_model_field, is_body_allowed_for_status_code


def api_router(**options: Any) -> APIRouter:
    """An ``APIRouter`` whose routes answer JSON through orjson unless a route names its own response class."""
    return APIRouter(default_response_class=ORJSONResponse, route_class=DocumentedResponsesRoute, **options)


@dataclass(frozen=True, slots=True)
class DeferredOpenApi:
    """A value of a route's ``openapi_extra`` built when the OpenAPI document is first rendered, not when the route
    is declared: a request body's JSON schema costs ~1 ms to generate, and most processes never render the document."""

    build: Callable[[], dict[str, Any]]


class DocumentedResponsesRoute(APIRoute):
    """A route whose additional ``responses`` (the error envelopes every route declares for the OpenAPI document)
    share one model field per model across all routes, and whose ``openapi_extra`` may hold
    :class:`DeferredOpenApi` values.

    FastAPI builds a field — a pydantic ``TypeAdapter`` and its core schema — for every ``{"model": ...}`` of
    every route: 1,093 for this API, 1,014 of them the same three error envelopes, which cost ~0.23 s of start-up
    and ~4 MiB per process. They serve only the OpenAPI document (the schema of the model, referenced by name),
    so one field per model gives the same document.
    """

    _openapi_extra: dict[str, Any] | None

    def __init__(self, path: str, endpoint: Callable[..., Any], *,
                 responses: dict[int | str, dict[str, Any]] | None = None, **options: Any) -> None:
        declared = responses or {}
        for code, response in declared.items():
            if response.get("model") and not is_body_allowed_for_status_code(code):
                raise ValueError(f"{path}: status code {code} must not have a response body")
        super().__init__(path, endpoint, **options,
                         responses={code: {k: v for k, v in r.items() if k != "model"} for code, r in declared.items()})
        self.responses = declared
        self.response_fields = {code: _response_field(r["model"]) for code, r in declared.items() if r.get("model")}

    @property
    def openapi_extra(self) -> dict[str, Any] | None:
        """As declared, with each :class:`DeferredOpenApi` value built (once, on first use)."""
        extra = self._openapi_extra
        if extra is not None and any(isinstance(v, DeferredOpenApi) for v in extra.values()):
            built: dict[str, Any] = {k: v.build() if isinstance(v, DeferredOpenApi) else v for k, v in extra.items()}
            self._openapi_extra = extra = built
        return extra

    @openapi_extra.setter
    def openapi_extra(self, value: dict[str, Any] | None) -> None:
        self._openapi_extra = value


@functools.cache
def _response_field(model: type[Any]) -> Any:
    return create_model_field(name=f"Response_{model.__name__}", type_=model, mode="serialization")
