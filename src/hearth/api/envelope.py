"""Hearth's response envelope for non-OpenAI routes: ``{"success", "data", "error"}``."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from starlette.responses import Response

from hearth.api.deps import request_id


def ok(request: Request, data: Any, status: int = 200) -> Response:
    body = {"success": True, "data": data, "error": None, "request_id": request_id(request)}
    raw = orjson.dumps(body, default=str, option=orjson.OPT_NON_STR_KEYS)
    return Response(raw, status_code=status, media_type="application/json")
