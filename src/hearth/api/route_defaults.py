"""``api_router()``: how every API module declares its routes, with the defaults the app's routes share.

The app does not ``include_router`` these routers; it takes their routes as they are
(:func:`hearth.app.create_app`), built once when their module is imported and shared by every app the process
creates. FastAPI builds an included router's routes again for each app — dependants, body and response
fields, handlers: ~220 ms of CPU for this API, paid on the first requests — which a process creating many
apps (the test suite starts one per server) paid every time, and every request then walked the inclusion
tree. So whatever an inclusion would have added must be on the routes already: JSON is rendered by orjson.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from fastapi.responses import ORJSONResponse


def api_router(**options: Any) -> APIRouter:
    """An ``APIRouter`` whose routes answer JSON through orjson unless a route names its own response class."""
    return APIRouter(default_response_class=ORJSONResponse, **options)
