"""Signing in to the console over plain HTTP (httpx), for the console's tests: read the sign-in form's
CSRF token, post the credentials, keep the session cookie in the client's jar."""

from __future__ import annotations

import re
from typing import Any

import httpx

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found, "no CSRF token in the page"
    return found.group(1)


async def sign_in(client: httpx.AsyncClient, user: str = "admin", secret: str = "admin-token-xyz") -> httpx.Response:
    form = await client.get("/console/login")
    assert form.status_code == 200, form.text
    return await client.post("/console/login", data={"csrf": csrf_of(form.text), "user": user, "secret": secret,
                                                     "next": "/console/overview"})


async def page_token(client: httpx.AsyncClient, path: str) -> str:
    r = await client.get(path)
    assert r.status_code == 200, r.text
    return csrf_of(r.text)


def registry(fake: Any) -> dict[str, Any]:
    """One endpoint on the fake upstream (with a key, shown masked), model ``m``, caller ``tester``."""
    return {
        "providers": [{"name": "openai-like", "kind": "openai"}],
        "endpoints": [{"name": "ep-a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up",
                       "api_key": "sk-live-SECRET-0123456789abcdef"}],
        "models": [{"name": "m", "endpoints": ["ep-a"]}],
        "callers": [{"name": "tester", "key": "test-key-123"}],
    }
