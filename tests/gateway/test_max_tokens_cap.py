"""The scene's ``max_tokens_cap`` binds every output-limit field, and the injected limit uses the field
the endpoint expects (``max_tokens_field``: ``max_tokens`` by default, or ``max_completion_tokens``).

The fake upstream records the body it received, so each test checks what really went upstream.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from hearth.registry.config import EndpointSpec
from hearth.testing.fake_upstream import FakeUpstream
from tests.support import ADMIN, AUTH, gateway_registry

CAP = 128
MESSAGES = [{"role": "user", "content": "Write a short poem about the sea."}]


def _registry(fake: FakeUpstream, **endpoint: Any) -> dict[str, Any]:
    registry = gateway_registry([{"name": "ep", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up", **endpoint}], model="m")
    registry["scenes"] = [{"name": "chat", "default_model": "m", "max_tokens_cap": CAP}]
    return registry


async def _chat(http: Any, server: Any, **extra: Any) -> Any:
    headers = {**AUTH, "X-Hearth-Scene": "chat", "X-Request-Id": f"cap-{uuid.uuid4().hex}"}
    return await http.post(server.base_url + "/v1/chat/completions", json={"messages": MESSAGES, **extra},
                           headers=headers)


def _refused(response: Any, param: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "scene_max_tokens_exceeded" and error["param"] == param, error
    assert param in error["message"]


@pytest.mark.parametrize(("fields", "param"), [
    ({"max_tokens": CAP, "max_completion_tokens": CAP + 1}, "max_completion_tokens"),
    ({"max_tokens": CAP * 10, "max_completion_tokens": 16}, "max_tokens"),
    ({"max_output_tokens": CAP + 1}, "max_output_tokens"),
    ({"max_tokens": 8, "max_output_tokens": CAP * 4}, "max_output_tokens"),
])
async def test_every_output_limit_field_is_checked_against_the_cap(fake, hearth_server, http, fields, param):
    server = hearth_server(_registry(fake))
    _refused(await _chat(http, server, **fields), param)
    _refused(await _chat(http, server, stream=True, **fields), param)
    assert fake.stats.requests == 0


async def test_a_provider_limit_field_that_is_not_a_count_is_refused_under_a_cap(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await _chat(http, server, max_output_tokens="100000")
    assert r.status_code == 400 and r.json()["error"]["param"] == "max_output_tokens", r.text
    assert fake.stats.requests == 0


async def test_by_default_the_cap_is_injected_as_max_tokens(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    r = await _chat(http, server)
    assert r.status_code == 200, r.text
    assert fake.stats.last_body["max_tokens"] == CAP and "max_completion_tokens" not in fake.stats.last_body


@pytest.mark.parametrize("stream", [False, True])
async def test_an_endpoint_that_expects_max_completion_tokens_gets_it(fake, hearth_server, http, stream):
    server = hearth_server(_registry(fake, max_tokens_field="max_completion_tokens"))
    r = await _chat(http, server, stream=stream)
    assert r.status_code == 200, r.text
    body = fake.stats.last_body
    assert body["max_completion_tokens"] == CAP and "max_tokens" not in body, body
    # a caller's own max_tokens is renamed as well: such an endpoint refuses the old name
    r = await _chat(http, server, stream=stream, max_tokens=32)
    assert r.status_code == 200, r.text
    body = fake.stats.last_body
    assert body["max_completion_tokens"] == 32 and "max_tokens" not in body, body


async def test_max_tokens_field_is_stored_and_shown(fake, hearth_server, http, database_url):
    server = hearth_server(_registry(fake, max_tokens_field="max_completion_tokens"), database_url=database_url)
    rows = (await http.get(server.base_url + "/api/v1/admin/endpoints", headers=ADMIN)).json()
    data = rows.get("data", rows)
    [ep] = [e for e in data if e["name"] == "ep"]
    assert ep["max_tokens_field"] == "max_completion_tokens"
    r = await _chat(http, server)
    assert r.status_code == 200, r.text
    assert fake.stats.last_body["max_completion_tokens"] == CAP


def test_max_tokens_field_accepts_only_the_two_names() -> None:
    base = {"name": "ep", "provider": "p", "upstream_model": "u"}
    assert EndpointSpec(**base).max_tokens_field == "max_tokens"
    assert EndpointSpec(**base, max_tokens_field="max_completion_tokens").max_tokens_field == "max_completion_tokens"
    with pytest.raises(ValidationError):
        EndpointSpec(**base, max_tokens_field="num_predict")
