"""Routes built by ``api_router()`` share one OpenAPI model field per response model: FastAPI would build one
per model per route (a pydantic ``TypeAdapter`` each — 1,093 for this API, most of them the same error envelope)."""

from __future__ import annotations

import pytest
from fastapi.routing import APIRoute
from pydantic import BaseModel

from hearth.api.route_defaults import DeferredOpenApi, api_router
from hearth.app import _ROUTERS


class _Failure(BaseModel):
    reason: str


def test_routes_with_the_same_error_model_share_its_field_and_keep_their_own_descriptions() -> None:
    router = api_router(responses={400: {"model": _Failure}})

    @router.get("/a", responses={404: {"model": _Failure, "description": "no such a"}, 204: {"description": "empty"}})
    def a() -> dict[str, str]:
        return {}

    @router.get("/b")
    def b() -> dict[str, str]:
        return {}

    route_a, route_b = (r for r in router.routes if isinstance(r, APIRoute))
    assert route_a.response_fields[400] is route_a.response_fields[404] is route_b.response_fields[400]
    assert 204 not in route_a.response_fields  # a response without a model has no field
    assert route_a.responses[404] == {"model": _Failure, "description": "no such a"}  # as declared, for the document


def test_a_model_declared_for_a_status_without_a_body_is_refused_as_fastapi_refuses_it() -> None:
    router = api_router()
    with pytest.raises(ValueError, match="304 must not have a response body"):
        @router.get("/c", responses={304: {"model": _Failure}})
        def c() -> dict[str, str]:
            return {}


def test_the_whole_api_builds_one_field_per_response_model() -> None:
    fields = [f for router in _ROUTERS for r in router.routes if isinstance(r, APIRoute)
              for f in r.response_fields.values()]
    assert len(fields) > 1000
    assert len({id(f) for f in fields}) == len({f.field_info.annotation for f in fields})


def test_a_deferred_openapi_part_is_built_once_when_the_document_needs_it() -> None:
    built: list[int] = []

    def body() -> dict[str, object]:
        built.append(1)
        return {"required": True}

    router = api_router()

    @router.post("/c", openapi_extra={"requestBody": DeferredOpenApi(body), "x-kept": {"as": "declared"}})
    def c() -> dict[str, str]:
        return {}

    [route] = (r for r in router.routes if isinstance(r, APIRoute))
    assert built == []  # declaring the route built nothing
    assert route.openapi_extra == {"requestBody": {"required": True}, "x-kept": {"as": "declared"}}
    assert route.openapi_extra == {"requestBody": {"required": True}, "x-kept": {"as": "declared"}}
    assert built == [1]
