"""The console's sign-in, session cookie, CSRF and roles over real HTTP (httpx against a Hearth server):
the cookie's flags, refusal of a POST without this session's CSRF token or from another origin, roles
refused above their rank, sign-out ending the session for good, and no secret in any page."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from hearth.console import session as sessions
from hearth.console.passwords import hash_password, verify_password
from tests.console.console_client import csrf_of, page_token, registry, sign_in

VIEWER_PASSWORD = "viewer-password-1"
OPERATOR_PASSWORD = "operator-password-2"
USERS = [{"name": "vera", "role": "viewer", "password_hash": hash_password(VIEWER_PASSWORD)},
         {"name": "otto", "role": "operator", "password_hash": hash_password(OPERATOR_PASSWORD)}]


@pytest.fixture
def server(fake: Any, hearth_server: Any) -> Any:
    return hearth_server(registry(fake), console_users=USERS)


@pytest.fixture
async def client(server: Any) -> Any:
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as c:
        yield c


def _set_cookie(r: httpx.Response, name: str) -> str:
    found = [h for h in r.headers.get_list("set-cookie") if h.startswith(name + "=")]
    assert len(found) == 1, r.headers.get_list("set-cookie")
    return found[0]


async def test_signing_in_sets_an_httponly_strict_signed_cookie_without_any_secret(client):
    r = await sign_in(client)
    assert r.status_code == 303 and r.headers["location"] == "/console/overview"
    cookie = _set_cookie(r, sessions.COOKIE)
    flags = [p.strip().lower() for p in cookie.split(";")]
    assert "httponly" in flags and "samesite=strict" in flags and "path=/console" in flags
    assert "secure" not in flags  # plain HTTP here; over TLS the flag is set (see the next test)
    assert any(f.startswith("max-age=") for f in flags)
    assert "admin-token-xyz" not in cookie
    page = await client.get("/console/overview")
    assert page.status_code == 200 and "admin · admin" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["cache-control"] == "no-store"


def test_the_cookie_is_secure_when_the_console_is_served_over_tls():
    from starlette.requests import Request
    from starlette.responses import Response

    from hearth.console.auth import set_cookie

    scope = {"type": "http", "scheme": "https", "method": "GET", "path": "/console", "headers": [],
             "server": ("hearth", 443), "query_string": b""}
    response = Response()
    set_cookie(Request(scope), response, sessions.COOKIE, "value", max_age=60)
    assert "secure" in [p.strip().lower() for p in response.headers["set-cookie"].split(";")]


async def test_cookies_are_secure_behind_a_tls_proxy_when_configured(fake, hearth_server):
    server = hearth_server(registry(fake), console_secure_cookies=True)
    async with httpx.AsyncClient(base_url=server.base_url) as c:
        form = await c.get("/console/login")
        login_cookie = _set_cookie(form, sessions.LOGIN_COOKIE)
        assert "secure" in [p.strip().lower() for p in login_cookie.split(";")]
        # a client over plain HTTP does not send a Secure cookie back by itself: the TLS proxy's part, done here
        r = await c.post("/console/login", data={"csrf": csrf_of(form.text), "user": "admin",
                                                 "secret": "admin-token-xyz"},
                         headers={"cookie": login_cookie.split(";")[0]})
        assert "secure" in [p.strip().lower() for p in _set_cookie(r, sessions.COOKIE).split(";")]


async def test_a_wrong_secret_or_a_missing_login_token_opens_no_session(client):
    r = await sign_in(client, secret="wrong")
    assert r.status_code == 401 and "Wrong name or secret." in r.text
    assert not [h for h in r.headers.get_list("set-cookie") if h.startswith(sessions.COOKIE + "=")]
    await client.get("/console/login")
    r = await client.post("/console/login", data={"user": "admin", "secret": "admin-token-xyz"})
    assert r.status_code == 403 and "stale" in r.text
    assert (await client.get("/console/overview")).status_code == 303


async def test_repeated_failed_sign_ins_are_throttled(client):
    for _ in range(10):
        assert (await sign_in(client, secret="guess")).status_code == 401
    r = await sign_in(client)  # the right secret, too late
    assert r.status_code == 429 and "Too many failed sign-ins" in r.text
    assert (await client.get("/console/overview")).status_code == 303


async def test_pages_redirect_to_sign_in_and_come_back_after(client):
    r = await client.get("/console/tasks?state=failed")
    assert r.status_code == 303 and r.headers["location"] == "/console/login?next=%2Fconsole%2Ftasks%3Fstate%3Dfailed"
    form = await client.get(r.headers["location"])
    r = await client.post("/console/login", data={"csrf": csrf_of(form.text), "user": "admin",
                                                  "secret": "admin-token-xyz", "next": "/console/tasks?state=failed"})
    assert r.headers["location"] == "/console/tasks?state=failed"
    assert (await client.get("/console/login")).headers["location"] == "/console/overview"  # already signed in
    client.cookies.clear()
    for target in ("https://evil.example/", "//evil.example/console", "/api/v1/admin/stats"):
        form = await client.get("/console/login")
        r = await client.post("/console/login", data={"csrf": csrf_of(form.text), "user": "admin",
                                                      "secret": "admin-token-xyz", "next": target})
        assert r.headers["location"] == "/console/overview", target  # never an open redirect
        client.cookies.clear()


async def test_a_post_without_this_sessions_csrf_token_is_refused_and_changes_nothing(client, server):
    await sign_in(client)
    token = await page_token(client, "/console/endpoints")
    for data in ({"reason": "no token"}, {"csrf": "forged"}, {"csrf": token[:-2] + "xx"}):
        r = await client.post("/console/endpoints/ep-a/disable", data=data)
        assert r.status_code == 403 and "CSRF" in r.text
    r = await client.post("/console/endpoints/ep-a/disable", data={"csrf": token},
                          headers={"origin": "https://evil.example"})
    assert r.status_code == 403 and "another origin" in r.text
    assert server.runtime.gateway.registry.endpoints["ep-a"].enabled
    r = await client.post("/console/endpoints/ep-a/disable", data={"csrf": token}, headers={"origin": server.base_url})
    assert r.status_code == 303
    assert not server.runtime.gateway.registry.endpoints["ep-a"].enabled


async def test_a_csrf_token_is_bound_to_its_session(client, server):
    await sign_in(client)
    first = await page_token(client, "/console/endpoints")
    async with httpx.AsyncClient(base_url=server.base_url) as other:
        await sign_in(other)
        r = await other.post("/console/endpoints/ep-a/disable", data={"csrf": first})
        assert r.status_code == 403
        assert server.runtime.gateway.registry.endpoints["ep-a"].enabled


async def test_roles_are_refused_above_their_rank(client, server):
    r = await sign_in(client, "vera", VIEWER_PASSWORD)
    assert r.status_code == 303
    page = await client.get("/console/endpoints")
    assert page.status_code == 200 and "Disable" not in page.text  # a viewer is shown no action
    token = csrf_of(page.text)
    for path in ("/console/endpoints/ep-a/disable", "/console/dead-letters/tsk_x/redrive",
                 "/console/reviews/rev_x/claim", "/console/tasks/tsk_x/cancel",
                 "/console/prompts/p/versions/1/activate"):
        r = await client.post(path, data={"csrf": token, "reason": "r"})
        assert r.status_code == 403 and "needs the" in r.text, path
    async with httpx.AsyncClient(base_url=server.base_url) as op:
        assert (await sign_in(op, "otto", OPERATOR_PASSWORD)).status_code == 303
        token = await page_token(op, "/console/endpoints")
        r = await op.post("/console/endpoints/ep-a/disable", data={"csrf": token})
        assert r.status_code == 403 and "needs the admin role" in r.text
        r = await op.post("/console/dead-letters/tsk_missing/redrive", data={"csrf": token, "reason": "retry"})
        assert r.status_code == 303 and "error=" in r.headers["location"]  # allowed; the letter does not exist
    assert server.runtime.gateway.registry.endpoints["ep-a"].enabled
    client.cookies.clear()
    assert (await sign_in(client, "vera", OPERATOR_PASSWORD)).status_code == 401  # another user's password


async def test_signing_out_ends_the_session_even_for_a_replayed_cookie(client, server):
    await sign_in(client)
    stolen = client.cookies.get(sessions.COOKIE)
    assert stolen
    token = await page_token(client, "/console/overview")
    r = await client.post("/console/logout", data={"csrf": token})
    assert r.status_code == 303 and r.headers["location"].startswith("/console/login")
    assert 'max-age=0' in _set_cookie(r, sessions.COOKIE).lower()
    async with httpx.AsyncClient(base_url=server.base_url, cookies={sessions.COOKIE: stolen}) as replay:
        assert (await replay.get("/console/overview")).status_code == 303


async def test_a_tampered_or_malformed_cookie_is_no_session(client, server):
    await sign_in(client, "vera", VIEWER_PASSWORD)
    body, mac = client.cookies.get(sessions.COOKIE).split(".")
    as_admin = sessions._b64(sessions._unb64(body).replace(b'"u":"vera"', b'"u":"admin"'))
    assert as_admin != body
    for bad in (f"{as_admin}.{mac}", f"{body}.{mac[:-1]}{'A' if mac[-1] != 'A' else 'B'}", "x" * 2000, "garbage",
                f"{body}.{mac}.{mac}"):
        async with httpx.AsyncClient(base_url=server.base_url, cookies={sessions.COOKIE: bad}) as c:
            assert (await c.get("/console/overview")).status_code == 303, bad


async def test_no_page_shows_an_endpoint_key(client):
    await sign_in(client)
    page = await client.get("/console/endpoints")
    assert page.status_code == 200
    assert "SECRET-0123456789abcdef" not in page.text and "sk-live" not in page.text
    assert "cdef" in page.text  # the masked hint


def test_a_session_expires_and_a_key_signs_only_its_own():
    key, other = sessions.derive_key(b"k" * 32), sessions.derive_key(b"j" * 32)
    made = sessions.new_session(key, user="admin", role="admin", credential="t", now=1000.0, lifetime_s=60)
    cookie = sessions.encode(key, made)
    assert sessions.decode(key, cookie, now=1059.0) == made
    assert sessions.decode(key, cookie, now=1060.0) is None
    assert sessions.decode(other, cookie, now=1001.0) is None
    assert sessions.csrf_token(key, made.sid) != sessions.csrf_token(other, made.sid)
    assert key != b"k" * 32 and len(key) == 32


def test_password_hashes_verify_only_their_password():
    digest = hash_password("correct horse")
    assert verify_password("correct horse", digest)
    assert not verify_password("correct horsE", digest)
    assert not verify_password("correct horse", "scrypt$bad")


async def test_the_budgets_page_shows_each_budgets_use_in_its_period(fake, hearth_server):
    from tests.support import AUTH, budget_registry, chat_body

    server = hearth_server(budget_registry(fake, 100.0))
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as c:
        assert (await c.post("/v1/chat/completions", json=chat_body(), headers=AUTH)).status_code == 200
        await sign_in(c)
        page = await c.get("/console/budgets")
        assert page.status_code == 200
        row = page.text.split('data-budget="daily"', 1)[1].split("</tr>", 1)[0]
        assert "tester" in row and "day" in row and "/ 100.0 money" in row and "<meter" in row
        assert (await c.get("/console/budgets?caller=tester")).status_code == 200
        assert (await c.get("/console/budgets?caller=nobody")).status_code == 404
