"""The capability API's response cache, opt-in per scene: an identical request within the TTL answers
with ``cache_hit: true``, no model call and no charge; anything that changes the request misses."""

from __future__ import annotations

from typing import Any

from tests.support import AUTH, gateway_registry


def _registry(fake: Any, **scene: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up"}],
                           prices=[{"model": "up", "input_per_1m": 1000.0, "output_per_1m": 1000.0}])
    reg["scenes"] = [{"name": "summary", "default_model": "m", **scene}]
    return reg


async def _summarize(http: Any, server: Any, text: str, **extra: Any) -> dict[str, Any]:
    r = await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH,
                        json={"text": text, "scene": "summary", **extra})
    assert r.status_code == 200, r.text
    return dict(r.json()["data"])


async def test_an_identical_request_is_answered_from_the_cache_without_a_model_call(fake, hearth_server, http):
    server = hearth_server(_registry(fake, cache_ttl_s=60))
    first = await _summarize(http, server, "The same text.")
    second = await _summarize(http, server, "The same text.")
    assert (first["cache_hit"], second["cache_hit"]) == (False, True)
    assert second["summary"] == first["summary"]
    assert second["attempts"] == [] and second["cost"] == 0 and second["usage"]["total_tokens"] == 0
    assert first["cost"] > 0
    assert fake.stats.requests == 1


async def test_a_different_text_or_locale_misses_the_cache(fake, hearth_server, http):
    server = hearth_server(_registry(fake, cache_ttl_s=60))
    await _summarize(http, server, "Text one.")
    assert (await _summarize(http, server, "Text two."))["cache_hit"] is False
    assert (await _summarize(http, server, "Text one.", locale="zh"))["cache_hit"] is False
    assert fake.stats.requests == 3


async def test_without_a_cache_ttl_nothing_is_cached(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    await _summarize(http, server, "Same.")
    assert (await _summarize(http, server, "Same."))["cache_hit"] is False
    assert fake.stats.requests == 2


async def test_two_texts_that_redact_alike_never_share_a_cached_answer(fake, hearth_server, http):
    server = hearth_server(_registry(fake, cache_ttl_s=60, guardrails={"redact_pii": True, "restore_pii": True}))
    fake.set_defaults(content="Call [PHONE_1].")
    first = await _summarize(http, server, "Call me at 13812345678.")
    second = await _summarize(http, server, "Call me at 13987654321.")
    assert first["summary"] == "Call 13812345678."
    assert (second["cache_hit"], second["summary"]) == (False, "Call 13987654321.")
    again = await _summarize(http, server, "Call me at 13987654321.")
    assert (again["cache_hit"], again["summary"]) == (True, "Call 13987654321.")
    assert fake.stats.requests == 2
