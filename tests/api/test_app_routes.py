"""The app's routes are built once per process, when their modules are imported, and every app takes them as
they are (hearth.api.route_defaults): nothing is built per app, and the defaults an inclusion would have added
are on the routes themselves."""

from __future__ import annotations

from pathlib import Path

from fastapi.datastructures import DefaultPlaceholder
from fastapi.responses import ORJSONResponse
from fastapi.routing import APIRoute

from hearth.app import create_app
from hearth.settings import Settings


def _app(tmp_path: Path) -> list[object]:
    return list(create_app(Settings(database_url=f"sqlite+aiosqlite:///{tmp_path}/h.db")).routes)


def test_two_apps_share_every_api_and_console_route(tmp_path: Path) -> None:
    a, b = _app(tmp_path), _app(tmp_path)
    shared = [ra for ra, rb in zip(a, b, strict=True) if ra is rb]
    api_routes = [r for r in a if isinstance(r, APIRoute)]
    assert len(api_routes) > 100
    assert all(r in shared for r in api_routes if r.path != "/docs")  # /docs: added per app (its own page)
    assert not [r for r in a if type(r).__name__ == "_IncludedRouter"]  # nothing left to build on a first request


def test_every_api_route_renders_json_through_orjson(tmp_path: Path) -> None:
    routes = [r for r in _app(tmp_path) if isinstance(r, APIRoute) and r.include_in_schema]
    assert routes
    assert [r.path for r in routes if isinstance(r.response_class, DefaultPlaceholder)] == []
    assert {r.response_class for r in routes} >= {ORJSONResponse}
