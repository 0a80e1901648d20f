"""Scene governance over real HTTP: default model, allowlists, the max_tokens cap, fallback rules.

Two public models, ``primary`` (served by ``fake``) and ``backup`` (served by ``fake2``), and a
scene ``chat`` whose default is ``primary`` with ``backup`` as its fallback. Every rule of the
issue's scene section has a test here; refusals are checked to reach no upstream at all.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from hearth.testing.fake_upstream import FakeBehavior, FakeUpstream
from hearth.wire.tokens import prompt_upper_bound
from tests.support import ADMIN, AUTH, gateway_registry

CAP = 256
MESSAGES = [{"role": "user", "content": "Summarise the quarterly report in three bullet points, please."}]


def _ep(name: str, base_url: str, upstream_model: str) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": upstream_model,
            "api_key": f"sk-key-of-{name}-abcdef"}


def _registry(fake: FakeUpstream, fake2: FakeUpstream, *, scenes: list[dict[str, Any]] | None = None,
              caller: dict[str, Any] | None = None, prices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    registry = gateway_registry([_ep("ep-primary", fake.base_url, "up-primary"),
                                 _ep("ep-backup", fake2.base_url, "up-backup")], prices=prices)
    registry["models"] = [{"name": "primary", "endpoints": ["ep-primary"]},
                          {"name": "backup", "endpoints": ["ep-backup"]}]
    registry["scenes"] = scenes if scenes is not None else [
        {"name": "chat", "default_model": "primary", "allowed_models": ["primary", "backup"],
         "max_tokens_cap": CAP, "fallback_models": ["backup"]},
    ]
    registry["callers"] = [{"name": "tester", "key": "test-key-123", **(caller or {})}]
    return registry


def _body(**extra: Any) -> dict[str, Any]:
    return {"messages": MESSAGES, **extra}


async def _chat(http: Any, server: Any, body: dict[str, Any], scene: str | None = "chat",
                **headers: str) -> Any:
    sent = {**AUTH, "X-Request-Id": f"scene-{uuid.uuid4().hex}", **headers}
    if scene is not None:
        sent["X-Hearth-Scene"] = scene
    return await http.post(server.base_url + "/v1/chat/completions", json=body, headers=sent)


async def _log_row(http: Any, server: Any, response: Any) -> dict[str, Any]:
    """The request-log row of ``response`` (logs are written asynchronously: poll briefly)."""
    rid = response.headers["x-request-id"]
    for _ in range(100):
        data = (await http.get(server.base_url + "/api/v1/request-logs", params={"request_id": rid},
                               headers=ADMIN)).json()["data"]
        if data["items"]:
            assert len(data["items"]) == 1, data
            row: dict[str, Any] = data["items"][0]
            return row
        await asyncio.sleep(0.05)
    raise AssertionError(f"no request log row for request {rid}")


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    assert isinstance(error["message"], str) and error["message"]
    return error


def _untouched(*upstreams: FakeUpstream) -> None:
    for upstream in upstreams:
        assert upstream.stats.requests == 0, upstream.stats.to_json()


# ---- default model and the max_tokens cap ----------------------------------------------------------


async def test_no_model_uses_the_scenes_default_model(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    r = await _chat(http, server, _body(max_tokens=100))
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-model"] == "primary"
    assert r.headers["x-hearth-endpoint"] == "ep-primary"
    assert fake.stats.requests == 1 and fake2.stats.requests == 0
    assert fake.stats.last_body["model"] == "up-primary"
    assert fake.stats.last_body["max_tokens"] == 100  # below the cap: sent as asked
    row = await _log_row(http, server, r)
    assert row["status"] == 200 and row["model"] == "primary"
    assert row["scene"] == "chat"
    assert row["effective_max_tokens"] == 100
    assert row["fallback_used"] is False
    assert row["attempted_models"] == ["primary"]


async def test_without_max_tokens_the_cap_is_sent_upstream_and_recorded(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    r = await _chat(http, server, _body())
    assert r.status_code == 200, r.text
    assert fake.stats.last_body["max_tokens"] == CAP
    row = await _log_row(http, server, r)
    assert row["scene"] == "chat" and row["effective_max_tokens"] == CAP


async def test_max_tokens_exactly_at_the_cap_is_allowed(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    r = await _chat(http, server, _body(max_tokens=CAP))
    assert r.status_code == 200, r.text
    assert fake.stats.last_body["max_tokens"] == CAP


async def test_max_tokens_above_the_cap_is_refused_before_any_upstream(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    error = _error(await _chat(http, server, _body(max_tokens=CAP + 1)), 400, "scene_max_tokens_exceeded")
    assert error["type"] == "invalid_request_error" and error["param"] == "max_tokens"
    # max_completion_tokens is the newer spelling of the same limit
    _error(await _chat(http, server, _body(max_completion_tokens=CAP + 1)), 400, "scene_max_tokens_exceeded")
    # an explicitly named model is held to the cap too
    _error(await _chat(http, server, _body(model="backup", max_tokens=CAP * 10)), 400, "scene_max_tokens_exceeded")
    _untouched(fake, fake2)


# ---- allowlists ------------------------------------------------------------------------------------


async def test_model_outside_the_scene_allowlist_is_403_and_reaches_no_upstream(fake, fake2, hearth_server, http):
    scenes = [{"name": "chat", "default_model": "primary", "max_tokens_cap": CAP}]  # allowlist: primary only
    server = hearth_server(_registry(fake, fake2, scenes=scenes))
    error = _error(await _chat(http, server, _body(model="backup")), 403, "model_not_allowed")
    assert error["type"] == "permission_error" and error["param"] == "model"
    _untouched(fake, fake2)
    # the allowed model named explicitly works
    r = await _chat(http, server, _body(model="primary"))
    assert r.status_code == 200 and r.headers["x-hearth-model"] == "primary"


async def test_an_explicit_model_inside_the_allowlist_is_used(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    r = await _chat(http, server, _body(model="backup"))
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-model"] == "backup"
    assert fake.stats.requests == 0 and fake2.stats.requests == 1
    assert fake2.stats.last_body["max_tokens"] == CAP  # the cap applies to explicit models as well
    row = await _log_row(http, server, r)
    assert row["scene"] == "chat" and row["attempted_models"] == ["backup"] and row["fallback_used"] is False


async def test_caller_allowed_models_refuses_a_model_the_scene_allows(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2, caller={"allowed_models": ["primary"]}))
    _error(await _chat(http, server, _body(model="backup")), 403, "model_not_allowed")
    _untouched(fake, fake2)
    # outside any scene the caller's allowlist holds as well
    _error(await _chat(http, server, _body(model="backup"), scene=None), 403, "model_not_allowed")
    _untouched(fake, fake2)
    r = await _chat(http, server, _body(model="primary"))
    assert r.status_code == 200 and r.headers["x-hearth-model"] == "primary"


async def test_caller_allowed_models_refuses_the_scenes_default_model(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2, caller={"allowed_models": ["backup"]}))
    _error(await _chat(http, server, _body()), 403, "model_not_allowed")
    _untouched(fake, fake2)


# ---- fallback: only on the default route, only for retryable failures ------------------------------


async def test_default_route_falls_back_on_a_retryable_upstream_failure(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    fake.set_defaults(status=500)
    r = await _chat(http, server, _body())
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-model"] == "backup"
    assert r.headers["x-hearth-endpoint"] == "ep-backup"
    assert r.headers["x-hearth-attempts"] == "2"
    assert fake.stats.requests == 1 and fake2.stats.requests == 1
    assert fake2.stats.last_body["model"] == "up-backup" and fake2.stats.last_body["max_tokens"] == CAP
    row = await _log_row(http, server, r)
    assert row["status"] == 200 and row["model"] == "backup" and row["endpoint"] == "ep-backup"
    assert row["scene"] == "chat"
    assert row["fallback_used"] is True
    assert row["attempted_models"] == ["primary", "backup"]
    assert row["effective_max_tokens"] == CAP


async def test_explicitly_requested_model_never_falls_back(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    fake.set_defaults(status=500)
    r = await _chat(http, server, _body(model="primary"))
    _error(r, 502, "upstream_error")
    assert fake.stats.requests == 1
    _untouched(fake2)
    row = await _log_row(http, server, r)
    assert row["status"] == 502 and row["error_code"] == "upstream_error"
    assert row["fallback_used"] is False
    assert row["attempted_models"] == ["primary"]


async def test_default_route_does_not_fall_back_on_a_non_retryable_error(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    fake.set_defaults(status=400)
    r = await _chat(http, server, _body())
    assert r.status_code == 400, r.text
    assert r.json()["error"]["message"] == "Fake upstream rejected the request."  # the upstream's own error
    assert fake.stats.requests == 1
    _untouched(fake2)
    row = await _log_row(http, server, r)
    assert row["status"] == 400 and row["fallback_used"] is False and row["attempted_models"] == ["primary"]


async def test_fallback_skips_models_the_caller_may_not_use(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2, caller={"allowed_models": ["primary"]}))
    fake.set_defaults(status=500)
    _error(await _chat(http, server, _body()), 502, "upstream_error")
    _untouched(fake2)


async def test_a_scene_without_fallbacks_returns_the_upstream_failure(fake, fake2, hearth_server, http):
    scenes = [{"name": "chat", "default_model": "primary", "allowed_models": ["backup"], "max_tokens_cap": CAP}]
    server = hearth_server(_registry(fake, fake2, scenes=scenes))
    fake.set_defaults(status=503)
    _error(await _chat(http, server, _body()), 502, "upstream_error")
    _untouched(fake2)


async def test_streaming_default_route_falls_back_and_gets_the_cap(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    fake.set_defaults(status=500)
    r = await _chat(http, server, _body(stream=True))
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-model"] == "backup"
    assert r.text.rstrip().endswith("data: [DONE]")
    assert fake2.stats.last_body["stream"] is True and fake2.stats.last_body["max_tokens"] == CAP
    row = await _log_row(http, server, r)
    assert row["fallback_used"] is True and row["attempted_models"] == ["primary", "backup"]


# ---- which scene applies ---------------------------------------------------------------------------


def _two_scenes() -> list[dict[str, Any]]:
    return [{"name": "chat", "default_model": "primary", "max_tokens_cap": CAP},
            {"name": "batch", "default_model": "backup", "max_tokens_cap": 64}]


async def test_scene_header_overrides_the_callers_default_scene(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2, scenes=_two_scenes(), caller={"default_scene": "chat"}))
    r = await _chat(http, server, _body(), scene=None)  # no header → the caller's default scene
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-model"] == "primary" and fake.stats.last_body["max_tokens"] == CAP
    row = await _log_row(http, server, r)
    assert row["scene"] == "chat" and row["effective_max_tokens"] == CAP

    r = await _chat(http, server, _body(), scene="batch")
    assert r.status_code == 200, r.text
    assert r.headers["x-hearth-model"] == "backup" and fake2.stats.last_body["max_tokens"] == 64
    row = await _log_row(http, server, r)
    assert row["scene"] == "batch" and row["effective_max_tokens"] == 64
    # the header's scene rules apply, not the default scene's: 100 is under chat's cap but over batch's
    _error(await _chat(http, server, _body(max_tokens=100), scene="batch"), 400, "scene_max_tokens_exceeded")


async def test_without_scene_or_default_scene_a_model_is_required(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    error = _error(await _chat(http, server, _body(), scene=None), 400, "invalid_request")
    assert error["param"] == "model"
    _untouched(fake, fake2)
    r = await _chat(http, server, _body(model="backup", max_tokens=CAP * 10), scene=None)  # no scene → no cap
    assert r.status_code == 200, r.text
    assert fake2.stats.last_body["max_tokens"] == CAP * 10
    row = await _log_row(http, server, r)
    assert row["scene"] is None and row["effective_max_tokens"] == CAP * 10


async def test_caller_allowed_scenes_refuses_another_scene(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2, scenes=_two_scenes(), caller={"allowed_scenes": ["chat"]}))
    error = _error(await _chat(http, server, _body(), scene="batch"), 403, "scene_not_allowed")
    assert error["type"] == "permission_error"
    _untouched(fake, fake2)
    assert (await _chat(http, server, _body(), scene="chat")).status_code == 200


async def test_unknown_scene_is_404(fake, fake2, hearth_server, http):
    server = hearth_server(_registry(fake, fake2))
    error = _error(await _chat(http, server, _body(), scene="no-such-scene"), 404, "scene_not_found")
    assert error["type"] == "invalid_request_error"
    _untouched(fake, fake2)


async def test_a_disabled_scene_is_not_found(fake, fake2, hearth_server, http):
    scenes = [{"name": "chat", "default_model": "primary", "max_tokens_cap": CAP, "enabled": False}]
    server = hearth_server(_registry(fake, fake2, scenes=scenes))
    _error(await _chat(http, server, _body()), 404, "scene_not_found")
    _untouched(fake, fake2)


# ---- the estimated cost of the reservation ---------------------------------------------------------


async def test_estimated_cost_prices_the_prompt_bound_plus_the_cap(fake, fake2, hearth_server, http):
    price_in, price_out = 2.0, 8.0
    scenes = [{"name": "chat", "default_model": "primary", "max_tokens_cap": CAP}]
    server = hearth_server(_registry(fake, fake2, scenes=scenes,
                                     prices=[{"model": "primary", "input_per_1m": price_in,
                                              "output_per_1m": price_out}]))
    prompt = prompt_upper_bound(_body())  # what a strict budget would reserve for the prompt
    r = await _chat(http, server, _body())
    assert r.status_code == 200, r.text
    row = await _log_row(http, server, r)
    assert row["effective_max_tokens"] == CAP
    assert abs(row["estimated_cost"] - (prompt * price_in + CAP * price_out) / 1e6) < 1e-12
    # an explicit max_tokens under the cap is what gets priced
    r = await _chat(http, server, _body(max_tokens=10))
    row = await _log_row(http, server, r)
    assert abs(row["estimated_cost"] - (prompt * price_in + 10 * price_out) / 1e6) < 1e-12


async def test_fallback_is_decided_per_call(fake, fake2, hearth_server, http):
    """A one-off failure of the default model falls back for that call only; the next uses the default."""
    server = hearth_server(_registry(fake, fake2))
    fake.script(FakeBehavior(status=502))
    r = await _chat(http, server, _body())
    assert r.status_code == 200 and r.headers["x-hearth-model"] == "backup"
    r = await _chat(http, server, _body())  # the script is used up: primary serves again
    assert r.status_code == 200 and r.headers["x-hearth-model"] == "primary"
