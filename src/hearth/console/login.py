"""Signing in and out of the console.

``GET /console/login`` sets a short-lived random nonce cookie and renders a form carrying a token derived
from it; ``POST`` checks the token (login CSRF), then the credentials, then sets the signed session cookie
(``HttpOnly``, ``SameSite=Strict``, ``Secure`` over TLS, ``Path=/console``) and redirects. A failed sign-in
says only that the name or secret is wrong; after :data:`MAX_FAILURES` of them from one address within
:data:`FAILURE_WINDOW_S` the form answers 429 until the window passes (the right secret included).
``POST /console/logout`` (CSRF-checked) ends the session.
"""

from __future__ import annotations

import os
from typing import Final

from fastapi import APIRouter, Request
from starlette.responses import Response

from hearth.api.deps import client_ip, runtime
from hearth.console import session as sessions
from hearth.console.auth import (
    ConsoleRefused,
    checked_form,
    clear_cookie,
    current,
    end_session,
    now_s,
    read_form,
    require,
    same_origin,
    session_key,
    set_cookie,
)
from hearth.console.render import page, redirect
from hearth.console.users import ConsoleUsersInvalid, sign_in
from hearth.observability.logging import get_logger
from hearth.state.base import StateUnavailable

router = APIRouter(prefix="/console", include_in_schema=False)  # its routes go into each app as built (router.py)
log = get_logger("hearth.console")
LOGIN_NONCE_S: Final = 1800
MAX_FAILURES: Final = 10
FAILURE_WINDOW_S: Final = 900.0


def _failures_key(request: Request) -> str:
    return f"console:sign-in-failures:{client_ip(request) or '-'}"


async def _failures(request: Request) -> int:
    """Failed sign-ins from this address within the window (kept in the state backend, so every process
    counts them; read-then-write, so concurrent attempts may overshoot the limit by a few)."""
    try:
        raw = await runtime(request).state.cache_get(_failures_key(request))
    except StateUnavailable as exc:
        raise ConsoleRefused(503, "The state backend is unavailable; try again shortly.") from exc
    return int(raw or b"0")


async def _count_failure(request: Request, before: int) -> None:
    try:
        await runtime(request).state.cache_set(_failures_key(request), str(before + 1).encode(), FAILURE_WINDOW_S)
    except StateUnavailable as exc:
        raise ConsoleRefused(503, "The state backend is unavailable; try again shortly.") from exc


def _next(target: str | None) -> str:
    """Only a path inside the console: never an open redirect."""
    if target and target.startswith("/console") and not target.startswith("//") and "\\" not in target:
        return target
    return "/console/overview"


def _login_page(request: Request, *, error: str | None = None, status: int = 200) -> Response:
    nonce = os.urandom(16).hex()
    response = page(request, "login.html", None, status=status, login_error=error,
                    token=sessions.login_token(session_key(request), nonce),
                    next=_next(request.query_params.get("next")))
    set_cookie(request, response, sessions.LOGIN_COOKIE, nonce, max_age=LOGIN_NONCE_S)
    return response


@router.get("/login", include_in_schema=False)
async def login_form(request: Request) -> Response:
    if await current(request) is not None:
        return redirect(_next(request.query_params.get("next")))
    return _login_page(request)


@router.post("/login", include_in_schema=False)
async def login(request: Request) -> Response:
    key = session_key(request)
    form = await read_form(request)
    nonce = request.cookies.get(sessions.LOGIN_COOKIE, "")
    if not same_origin(request) or not nonce or not sessions.token_matches(sessions.login_token(key, nonce),
                                                                           form.get("csrf")):
        raise ConsoleRefused(403, "Refused: the sign-in form is stale or was sent from elsewhere. Reload the page.")
    settings = runtime(request).settings
    failures = await _failures(request)
    if failures >= MAX_FAILURES:
        log.warning("console_sign_in_throttled", client_ip=client_ip(request))
        raise ConsoleRefused(429, f"Too many failed sign-ins from this address: try again in "
                                  f"{int(FAILURE_WINDOW_S // 60)} minutes.")
    try:
        found = sign_in(settings, form.get("user", "").strip(), form.get("secret", ""))
    except ConsoleUsersInvalid as exc:
        raise ConsoleRefused(500, str(exc)) from exc
    if found is None:
        await _count_failure(request, failures)
        log.info("console_sign_in_refused", user=form.get("user", "")[:128], client_ip=client_ip(request))
        return _login_page(request, error="Wrong name or secret.", status=401)
    made = sessions.new_session(key, user=found.user, role=found.role, credential=found.credential,
                                now=now_s(request), lifetime_s=settings.console_session_s)
    log.info("console_signed_in", user=found.user, role=found.role)
    response = redirect(_next(form.get("next")))
    set_cookie(request, response, sessions.COOKIE, sessions.encode(key, made), max_age=int(settings.console_session_s))
    clear_cookie(request, response, sessions.LOGIN_COOKIE)
    return response


@router.post("/logout", include_in_schema=False)
async def logout(request: Request) -> Response:
    console = await require(request)
    await checked_form(request, console)
    await end_session(request, console)
    log.info("console_signed_out", user=console.user)
    response = redirect("/console/login", notice="Signed out.")
    clear_cookie(request, response, sessions.COOKIE)
    return response
