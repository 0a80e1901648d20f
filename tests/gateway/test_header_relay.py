"""Headers across the gateway, per provider and off by default: an allowlist of client headers sent
upstream (never credentials, cookies, hop-by-hop or x-hearth-*), and the upstream's x-ratelimit-*
headers relayed to the caller on non-stream answers and streams."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hearth.registry.config import RegistrySpec
from hearth.testing.fake_upstream import FakeBehavior
from tests.support import AUTH, chat_body, gateway_registry

RATE_HEADERS = {"x-ratelimit-remaining-requests": "42", "x-ratelimit-reset-tokens": "6ms"}
KINDS = {"openai": "openai-like", "anthropic": "anthropic-like"}


def _registry(endpoints: list[dict[str, Any]], **provider_options: Any) -> dict[str, Any]:
    registry = gateway_registry(endpoints)
    for p in registry["providers"]:
        if p["kind"] != "simulated":
            p.update(provider_options)
    return registry


def _ep(name: str, base_url: str, kind: str = "openai", **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": KINDS[kind], "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", **extra}


# ---- client headers forwarded upstream ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_only_allowlisted_client_headers_reach_the_upstream(kind, fake, hearth_server, http):
    server = hearth_server(_registry([_ep("a", fake.base_url, kind)],
                                     forward_headers=["X-Trace-Id", "openai-organization"]))
    headers = {**AUTH, "X-Trace-Id": "trace-123", "OpenAI-Organization": "org-9", "X-Other": "not listed",
               "Cookie": "session=secret"}
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=headers)
    assert r.status_code == 200, r.text
    received = {k.lower(): v for k, v in fake.stats.last_headers.items()}
    assert received["x-trace-id"] == "trace-123" and received["openai-organization"] == "org-9"
    assert "x-other" not in received and "cookie" not in received
    assert "test-key-123" not in str(received)  # the caller's key never travels upstream


async def test_streams_forward_the_allowlisted_headers_too(fake, hearth_server, http):
    server = hearth_server(_registry([_ep("a", fake.base_url)], forward_headers=["x-trace-id"]))
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers={**AUTH, "x-trace-id": "t-1"}) as r:
        assert r.status_code == 200
        await r.aread()
    assert {k.lower(): v for k, v in fake.stats.last_headers.items()}["x-trace-id"] == "t-1"


async def test_no_client_header_is_forwarded_by_default(fake, hearth_server, http):
    server = hearth_server(_registry([_ep("a", fake.base_url)]))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(),
                        headers={**AUTH, "x-trace-id": "trace-123"})
    assert r.status_code == 200
    assert "x-trace-id" not in {k.lower() for k in fake.stats.last_headers}


@pytest.mark.parametrize("name", ["Authorization", "proxy-authorization", "Cookie", "x-api-key", "Connection",
                                  "Transfer-Encoding", "te", "upgrade", "X-Hearth-Tenant", "host",
                                  "content-length", "bad header", ""])
def test_headers_that_must_never_be_forwarded_are_refused_when_the_registry_is_applied(name: str) -> None:
    registry = _registry([_ep("a", "http://127.0.0.1:1")], forward_headers=["x-trace-id", name])
    with pytest.raises(ValidationError, match="forward_headers"):
        RegistrySpec.model_validate(registry)


def test_forwarded_names_are_stored_lower_case_once() -> None:
    spec = RegistrySpec.model_validate(_registry([_ep("a", "http://127.0.0.1:1")],
                                                 forward_headers=["X-Trace-Id", "x-trace-id", "X-B3-TraceId"]))
    assert spec.providers[0].forward_headers == ["x-trace-id", "x-b3-traceid"]


# ---- the upstream's x-ratelimit-* headers relayed to the caller ------------------------------------------

async def test_ratelimit_headers_are_relayed_on_a_non_stream_answer_when_the_provider_asks(fake, hearth_server,
                                                                                          http):
    server = hearth_server(_registry([_ep("a", fake.base_url)], relay_ratelimit_headers=True))
    fake.set_defaults(response_headers={**RATE_HEADERS, "x-upstream-secret": "no"})
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200
    assert {k: r.headers.get(k) for k in RATE_HEADERS} == RATE_HEADERS
    assert "x-upstream-secret" not in r.headers


async def test_ratelimit_headers_are_relayed_on_a_stream(fake, hearth_server, http):
    server = hearth_server(_registry([_ep("a", fake.base_url)], relay_ratelimit_headers=True))
    fake.set_defaults(response_headers=RATE_HEADERS, chunks=3)
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as r:
        assert r.status_code == 200
        assert {k: r.headers.get(k) for k in RATE_HEADERS} == RATE_HEADERS
        await r.aread()


async def test_embeddings_relay_them_too(fake, hearth_server, http):
    registry = _registry([_ep("e", fake.base_url, capabilities=["embeddings"])], relay_ratelimit_headers=True)
    registry["models"] = [{"name": "emb", "endpoints": ["e"], "kind": "embedding"}]
    server = hearth_server(registry)
    fake.set_defaults(response_headers=RATE_HEADERS)
    r = await http.post(server.base_url + "/v1/embeddings", json={"model": "emb", "input": "hi"}, headers=AUTH)
    assert r.status_code == 200, r.text
    assert r.headers.get("x-ratelimit-remaining-requests") == "42"


async def test_ratelimit_headers_are_not_relayed_by_default(fake, hearth_server, http):
    server = hearth_server(_registry([_ep("a", fake.base_url)]))
    fake.set_defaults(response_headers=RATE_HEADERS)
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200
    assert not any(k.lower().startswith("x-ratelimit-") for k in r.headers)


async def test_after_a_failover_the_caller_sees_the_headers_of_the_endpoint_that_served_it(fake, fake2,
                                                                                          hearth_server, http):
    server = hearth_server(_registry([_ep("a", fake.base_url, priority=0), _ep("b", fake2.base_url, priority=1)],
                                     relay_ratelimit_headers=True))
    fake.script(FakeBehavior(status=503, response_headers={"x-ratelimit-remaining-requests": "0",
                                                           "x-ratelimit-limit-requests": "100"}))
    fake2.set_defaults(response_headers={"x-ratelimit-remaining-requests": "7"})
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(), headers=AUTH)
    assert r.status_code == 200 and r.headers["x-hearth-endpoint"] == "b"
    assert r.headers["x-ratelimit-remaining-requests"] == "7"
    assert "x-ratelimit-limit-requests" not in r.headers
