"""Reading an upstream's Retry-After: delta-seconds, an HTTP-date, OpenAI's ``retry-after-ms``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest
from aiohttp import web
from multidict import CIMultiDict

from hearth.errors import UpstreamHTTPError
from hearth.providers.anthropic import AnthropicProvider
from hearth.providers.http1_client import Http1Pool
from hearth.providers.openai_compat import OpenAICompatProvider
from hearth.providers.upstream_http import MAX_RETRY_AFTER_S, parse_retry_after
from hearth.registry.snapshot import Endpoint
from hearth.testing.fake_upstream import FakeBehavior
from tests.support import AUTH, chat_body, gateway_registry

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def _parse(now: datetime = NOW, **headers: str) -> float | None:
    return parse_retry_after(CIMultiDict({k.replace("_", "-"): v for k, v in headers.items()}),
                             now=now.timestamp())


def test_delta_seconds():
    assert _parse(retry_after="5") == 5.0
    assert _parse(retry_after=" 0 ") == 0.0
    assert _parse(retry_after="1.5") == 1.5  # not RFC 9110, but some providers send it


def test_http_date_is_the_time_left_until_it():
    assert _parse(retry_after=format_datetime(NOW + timedelta(seconds=42), usegmt=True)) == 42.0
    assert _parse(retry_after="Sun, 01 Mar 2026 12:00:30 GMT") == 30.0
    assert _parse(retry_after="Sunday, 01-Mar-26 12:00:10 GMT") == 10.0  # the obsolete RFC 850 form
    assert _parse(retry_after="Sun Mar  1 12:00:05 2026") == 5.0  # and the asctime one (GMT, though naive)
    assert _parse(retry_after=format_datetime(NOW - timedelta(minutes=5), usegmt=True)) == 0.0  # already past


def test_retry_after_ms_is_preferred_when_present():
    assert _parse(retry_after="3", retry_after_ms="2500") == 2.5
    assert _parse(retry_after_ms="120") == 0.12
    assert _parse(retry_after="3", retry_after_ms="soon") == 3.0  # an unreadable ms falls back


@pytest.mark.parametrize("value", ["", "  ", "soon", "-3", "nan", "inf", "1e3", "Mon, 99 Foo 2026 25:61:00 GMT"])
def test_unreadable_values_mean_unknown(value: str):
    assert _parse(retry_after=value) is None


def test_absent_means_unknown_and_huge_is_capped():
    assert parse_retry_after(CIMultiDict()) is None
    assert _parse(retry_after="99999999999") == MAX_RETRY_AFTER_S


def test_names_are_case_insensitive_with_aiohttp_headers():
    assert parse_retry_after(CIMultiDict({"RETRY-AFTER": "9"})) == 9.0
    assert parse_retry_after(CIMultiDict({"Retry-After-Ms": "900"})) == 0.9


# ---- both providers read it from a real HTTP answer ------------------------------------------------------

@pytest.fixture
async def date_upstream() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """A tiny real server answering every POST with 429 and the next headers queued in the list."""
    queued: list[dict[str, str]] = []

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "slow down", "type": "rate_limit_error"}}, status=429,
                                 headers=queued.pop(0) if queued else {})

    app = web.Application()
    app.router.add_post("/v1/{tail:.*}", refuse)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1", queued
    finally:
        await runner.cleanup()


def _endpoint(base_url: str, kind: str) -> Endpoint:
    return Endpoint(name="e", provider="p", kind=kind, base_url=base_url, upstream_model="up", api_key="sk-test")


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_providers_read_every_form_from_the_answer(kind: str, date_upstream: Any):
    base_url, queued = date_upstream
    soon = datetime.now(UTC) + timedelta(seconds=20)
    queued += [{"Retry-After": format_datetime(soon, usegmt=True)}, {"Retry-After": "4"},
               {"Retry-After": "3", "retry-after-ms": "2500"}, {}]
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    pool = Http1Pool()
    try:
        provider = OpenAICompatProvider(pool) if kind == "openai" else AnthropicProvider(pool)
        seen: list[float | None] = []
        for _ in range(4):
            with pytest.raises(UpstreamHTTPError) as refused:
                await provider.chat(_endpoint(base_url, kind), body, 5.0)
            assert refused.value.status == 429
            seen.append(refused.value.retry_after)
    finally:
        await pool.aclose()
    assert seen[0] is not None and 18 <= seen[0] <= 20
    assert seen[1:] == [4.0, 2.5, None]


async def test_an_anthropic_429_is_told_to_the_client_exactly(fake, hearth_server, http):
    server = hearth_server(gateway_registry([{"name": "claude", "provider": "anthropic-like",
                                              "base_url": fake.base_url, "upstream_model": "claude-test",
                                              "api_key": "sk-ant-test-key-0000"}]))
    fake.script(FakeBehavior(status=429, retry_after=2.5))
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body(max_tokens=10), headers=AUTH)
    assert r.status_code == 429 and r.json()["error"]["code"] == "upstream_rate_limited", r.text
    assert r.headers["retry-after"] == "3" and r.headers["x-should-retry"] == "true"
    assert 2300 <= int(r.headers["retry-after-ms"]) <= 2500
