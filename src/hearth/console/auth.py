"""The console's request-side security: who is signed in, what their role allows, CSRF on every POST.

Every console page calls :func:`require` with the least role it needs; every POST reads its form through
:func:`checked_form`, which refuses (403) a form without this session's CSRF token or one sent from
another origin. A session is valid while its signature holds, it has not expired, the credential it was
opened with is still the configured one, and it was not ended by signing out (the ended session ids are
kept in the state backend until they would have expired anyway, so every process sees a sign-out).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, quote, urlsplit

from fastapi import Request
from starlette.responses import Response

from hearth.api.deps import runtime
from hearth.api.request_body import read_limited
from hearth.console import session as sessions
from hearth.console.users import current_account, role_at_least
from hearth.registry.key_vault import load_master_key
from hearth.state.base import StateUnavailable

MAX_FORM_BYTES: Final = 256 * 1024
ENDED_PREFIX: Final = "console:ended:"


class ConsoleRedirect(Exception):
    def __init__(self, location: str) -> None:
        super().__init__(location)
        self.location = location


class ConsoleRefused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class Console:
    """The signed-in user of one request."""

    user: str
    role: str
    sid: str
    expires_at: int
    csrf: str

    def can(self, role: str) -> bool:
        return role_at_least(self.role, role)


def session_key(request: Request) -> bytes:
    """The signing key, derived once per application from the master key the runtime uses."""
    state = request.app.state
    key: bytes | None = getattr(state, "console_key", None)
    if key is None:
        s = runtime(request).settings
        key = sessions.derive_key(load_master_key(s.master_key, s.master_key_file))
        state.console_key = key
    return key


def now_s(request: Request) -> float:
    return runtime(request).gateway.health.clock.now()


async def current(request: Request) -> Console | None:
    """The request's valid session, or None."""
    key = session_key(request)
    found = sessions.decode(key, request.cookies.get(sessions.COOKIE), now=now_s(request))
    if found is None:
        return None
    account = current_account(runtime(request).settings, found.user)
    if account is None or sessions.fingerprint(key, account[1]) != found.credential:
        return None
    try:
        if await runtime(request).state.cache_get(ENDED_PREFIX + found.sid) is not None:
            return None
    except StateUnavailable as exc:
        raise ConsoleRefused(503, "The state backend is unavailable; sessions cannot be checked.") from exc
    return Console(user=found.user, role=account[0], sid=found.sid, expires_at=found.expires_at,
                   csrf=sessions.csrf_token(key, found.sid))


async def require(request: Request, role: str = "viewer") -> Console:
    """The signed-in user if their role is at least ``role``; otherwise a redirect to the sign-in page
    (no session) or a 403 page (a role too low)."""
    console = await current(request)
    if console is None:
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        raise ConsoleRedirect(f"/console/login?next={quote(target, safe='')}")
    if not console.can(role):
        raise ConsoleRefused(403, f"This needs the {role} role; you are signed in as {console.user} "
                                  f"({console.role}).")
    return console


def same_origin(request: Request) -> bool:
    """A browser's POST says where it comes from; one from another origin is refused (with the CSRF token,
    defence in depth). A request without ``Origin`` (older clients, tests) is left to the token."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def read_form(request: Request) -> dict[str, str]:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise ConsoleRefused(415, "The console takes URL-encoded forms.")
    raw = await read_limited(request, MAX_FORM_BYTES)
    try:
        return dict(parse_qsl(raw.decode(), keep_blank_values=True, max_num_fields=64))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConsoleRefused(400, "The form could not be read.") from exc


async def checked_form(request: Request, console: Console) -> dict[str, str]:
    """The POSTed form, once its CSRF token is this session's and its origin is this server."""
    if not same_origin(request):
        raise ConsoleRefused(403, "Refused: the form was sent from another origin.")
    form = await read_form(request)
    if not sessions.token_matches(console.csrf, form.get("csrf")):
        raise ConsoleRefused(403, "Refused: the form's CSRF token is missing or not this session's. Reload the page.")
    return form


def secure(request: Request) -> bool:
    """``Secure`` cookies when served over TLS, or always when configured (TLS ends at a proxy in front)."""
    if request.url.scheme == "https":
        return True
    settings = getattr(getattr(request.app.state, "runtime", None), "settings", None)
    return bool(settings and settings.console_secure_cookies)


def set_cookie(request: Request, response: Response, name: str, value: str, *, max_age: int) -> None:
    response.set_cookie(name, value, max_age=max_age, path="/console", httponly=True, samesite="strict",
                        secure=secure(request))


def clear_cookie(request: Request, response: Response, name: str) -> None:
    response.delete_cookie(name, path="/console", httponly=True, samesite="strict", secure=secure(request))


async def end_session(request: Request, console: Console) -> None:
    """Sign-out: the session id is recorded as ended until the moment it would have expired."""
    ttl = max(1.0, console.expires_at - now_s(request))
    try:
        await runtime(request).state.cache_set(ENDED_PREFIX + console.sid, b"1", ttl)
    except StateUnavailable as exc:
        raise ConsoleRefused(503, "The state backend is unavailable; try signing out again.") from exc
