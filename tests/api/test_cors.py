"""CORS for browser callers, when ``cors_origins`` (``HEARTH_CORS_ORIGINS``) is configured.

It wraps the whole ASGI app, so the hot OpenAI routes (served in front of FastAPI) answer preflights
and carry the headers as well as FastAPI's routes do. Without the setting no CORS header is sent.
"""

from __future__ import annotations

from typing import Any

import pytest

from hearth.settings import Settings
from tests.support import AUTH, chat_body, gateway_registry

ORIGIN = "https://console.example.com"


def _server(fake: Any, hearth_server: Any, **settings: Any) -> Any:
    return hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                            "upstream_model": "up"}]), **settings)


def _preflight(method: str = "POST") -> dict[str, str]:
    return {"Origin": ORIGIN, "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization, content-type, x-hearth-scene"}


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/models", "/api/v1/request-logs"])
async def test_a_preflight_from_a_configured_origin_is_answered(fake, hearth_server, http, path):
    server = _server(fake, hearth_server, cors_origins=[ORIGIN, "https://other.example.com"])
    r = await http.options(server.base_url + path, headers=_preflight("GET" if "models" in path else "POST"))
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == ORIGIN
    allowed = r.headers["access-control-allow-headers"].lower()
    assert "authorization" in allowed and "x-hearth-scene" in allowed
    assert "POST" in r.headers["access-control-allow-methods"]
    assert fake.stats.requests == 0


async def test_real_requests_carry_the_origin_and_expose_hearths_headers(fake, hearth_server, http):
    server = _server(fake, hearth_server, cors_origins=[ORIGIN])
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers={**AUTH, "Origin": ORIGIN})
    assert r.status_code == 200, r.text
    assert r.headers["access-control-allow-origin"] == ORIGIN
    exposed = {h.strip().lower() for h in r.headers["access-control-expose-headers"].split(",")}
    assert {"x-request-id", "x-hearth-model", "x-hearth-upstream-model", "retry-after"} <= exposed
    # an error answer too (a browser must be able to read why it was refused)
    r = await http.get(server.base_url + "/v1/models", headers={"Origin": ORIGIN})
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == ORIGIN
    r = await http.get(server.base_url + "/healthz", headers={"Origin": ORIGIN})
    assert r.headers["access-control-allow-origin"] == ORIGIN


async def test_other_origins_get_no_cors_headers(fake, hearth_server, http):
    server = _server(fake, hearth_server, cors_origins=[ORIGIN])
    r = await http.options(server.base_url + "/v1/chat/completions",
                           headers={**_preflight(), "Origin": "https://evil.example.com"})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "Origin": "https://evil.example.com"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


async def test_without_the_setting_no_cors_headers_are_sent(fake, hearth_server, http):
    server = _server(fake, hearth_server)
    r = await http.options(server.base_url + "/v1/chat/completions", headers=_preflight())
    assert "access-control-allow-origin" not in r.headers
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers={**AUTH, "Origin": ORIGIN})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_the_environment_variable_is_a_comma_separated_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HEARTH_CORS_ORIGINS", f"{ORIGIN}, https://b.example.com")
    assert Settings().cors_origins == [ORIGIN, "https://b.example.com"]
    monkeypatch.setenv("HEARTH_CORS_ORIGINS", "")
    assert Settings().cors_origins == []
    monkeypatch.delenv("HEARTH_CORS_ORIGINS")
    assert Settings(cors_origins=["*"]).cors_origins == ["*"]
