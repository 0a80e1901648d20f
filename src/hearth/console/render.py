"""Server-rendered pages: the console's Jinja2 environment (autoescaped), page responses and redirects.

Pages set ``Cache-Control: no-store`` (they show live state and carry CSRF tokens) and a Content Security
Policy that allows only this server's own styles and scripts: everything the console needs is shipped in
the package, so it works on a machine without internet access.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlencode

import orjson
from fastapi import Request
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.responses import HTMLResponse, RedirectResponse

from hearth.console.auth import Console

HERE: Final = Path(__file__).resolve().parent
STATIC_DIR: Final = HERE / "static"
SECURITY_HEADERS: Final = {
    "cache-control": "no-store",
    "content-security-policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "x-frame-options": "DENY",
}


def _when(value: Any) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return str(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return str(value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"))
    return str(value)


def _pretty(value: Any) -> str:
    text: bytes = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS, default=str)
    return text.decode()


def _query(base: dict[str, Any], **changes: Any) -> str:
    merged = {k: v for k, v in {**base, **changes}.items() if v not in (None, "")}
    return "?" + urlencode(merged) if merged else ""


ENV: Final = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(default=True),
                         trim_blocks=True, lstrip_blocks=True)
ENV.filters.update(when=_when, pretty=_pretty)
ENV.globals.update(query=_query)

NAV: Final = (("overview", "Overview"), ("endpoints", "Endpoints"), ("request-logs", "Calls"), ("tasks", "Tasks"),
              ("dead-letters", "Dead letters"), ("reviews", "Reviews"), ("prompts", "Prompts"),
              ("schedules", "Schedules"), ("budgets", "Budgets"), ("usage", "Usage"), ("playground", "Playground"),
              ("workflows", "Workflows"), ("runs", "Runs"), ("queues", "Queues"), ("quota-groups", "Quota groups"))


def page(request: Request, template: str, console: Console | None, *, status: int = 200,
         **values: Any) -> HTMLResponse:
    params = request.query_params
    html = ENV.get_template(template).render(
        console=console, nav=NAV, notice=params.get("notice"), error=params.get("error"), **values)
    return HTMLResponse(html, status_code=status, headers=SECURITY_HEADERS)


def redirect(location: str, **flash: str) -> RedirectResponse:
    """A 303 after a POST (the browser GETs the page again: a reload never repeats the action)."""
    if flash:
        location += ("&" if "?" in location else "?") + urlencode(flash)
    return RedirectResponse(location, status_code=303, headers={"cache-control": "no-store"})
