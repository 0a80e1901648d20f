"""The chat playground in the browser: its SSE parser fed byte chunks cut anywhere, and the whole page against
a Hearth server and a fake upstream that splits its events at every byte — the text shown is the upstream's;
a busy answer shows the busy state and nothing is sent again until a person presses Retry; Stop aborts
and shows "stopped", never a failure, and never resubmits."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest
import pytest_asyncio

from hearth.console import session as sessions
from hearth.console.passwords import hash_password
from hearth.testing.fake_upstream import FakeBehavior, reply_text
from tests.console.console_client import page_token, sign_in

# the shared browser lives on the session's event loop (tests/console/conftest.py)
pytestmark = pytest.mark.asyncio(loop_scope="session")

VIEWER_PASSWORD = "viewer-password-1"
BUSY = "The generation channel is full; please try again later. This question was not submitted twice."

# A stream with everything seed 001 §8.4 names: CRLF and LF line ends, a comment, several data lines,
# multi-byte UTF-8 (CJK, an emoji), an id, an event without data, and an unterminated tail.
STREAM = ("event: message\r\ndata: {\"answer\":\"你好，\"}\r\nid: 1\r\n\r\n"
          ": keep-alive comment\n\n"
          "event: message\ndata: {\"answer\":\"世界 🔥\"}\nid: 2\n\n"
          "data: line one\ndata: line two\n\n"
          "event: heartbeat\r\n\r\n"
          "event: done\ndata: {\"request_id\":\"r\"}\n\n"
          "data: never terminated").encode()
EXPECTED = [{"event": "message", "data": "{\"answer\":\"你好，\"}", "id": "1"},
            {"event": "message", "data": "{\"answer\":\"世界 🔥\"}", "id": "2"},
            {"event": "message", "data": "line one\nline two", "id": "2"},
            {"event": "heartbeat", "data": "", "id": "2"},
            {"event": "done", "data": "{\"request_id\":\"r\"}", "id": "2"}]

PARSE = """([chunks, max]) => {
  const out = [];
  const parser = new HearthSSE.SSEParser((e) => out.push(e), max);
  try {
    for (const c of chunks) parser.push(new Uint8Array(c));
    return {events: out, unterminated: parser.end(), error: null};
  } catch (err) {
    return {events: out, unterminated: null, error: (err instanceof HearthSSE.SSEError) + ": " + err.message};
  }
}"""


def _cuts(data: bytes, sizes: list[int]) -> list[list[int]]:
    out, i = [], 0
    for n in sizes:
        out.append(list(data[i:i + n]))
        i += n
    return [*out, list(data[i:])] if i < len(data) else out


@pytest.fixture
def server(fake: Any, hearth_server: Any) -> Any:
    return hearth_server({
        "providers": [{"name": "openai-like", "kind": "openai"}],
        "endpoints": [{"name": "ep-a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up"}],
        "models": [{"name": "m", "endpoints": ["ep-a"]}],
        "callers": [{"name": "tester", "key": "test-key-123"}],
    }, console_playground_caller="tester", console_users=[
        {"name": "vera", "role": "viewer", "password_hash": hash_password(VIEWER_PASSWORD)}])


@pytest_asyncio.fixture(loop_scope="session")
async def playground(page: Any) -> Any:
    await page.click("header nav a[href='/console/playground']")
    await page.wait_for_selector("[data-playground]")
    # the element is parsed before the script at the page's end has run: wait for what the script defines
    await page.wait_for_function("() => window.HearthSSE !== undefined && window.hearthPlayground !== undefined")
    return page


async def test_the_parser_reads_a_stream_cut_anywhere(playground):
    rng = random.Random(7)
    cuttings = {"one chunk": [len(STREAM)], "every byte": [1] * len(STREAM),
                **{f"random {k}": [rng.randint(1, 9) for _ in range(len(STREAM))] for k in range(5)}}
    for name, sizes in cuttings.items():
        result = await playground.evaluate(PARSE, [_cuts(STREAM, sizes), 4096])
        assert result == {"events": EXPECTED, "unterminated": True, "error": None}, name
    cr_alone = await playground.evaluate(PARSE, [[list(b"data: a\r"), list(b"\r"), list(b"data: b\r\n\r\n")], 4096])
    assert [e["data"] for e in cr_alone["events"]] == ["a", "b"]  # a lone CR ends a line, split or not


async def test_the_parser_refuses_an_event_larger_than_its_maximum(playground):
    big = b"data: " + b"x" * 600 + b"\ndata: " + b"y" * 600 + b"\n\n"
    result = await playground.evaluate(PARSE, [_cuts(big, [100] * 20), 1000])
    assert result["events"] == [] and result["error"] == "true: an event is larger than 1000 characters"
    endless = b"data: " + b"z" * 5000  # one line that never ends
    result = await playground.evaluate(PARSE, [_cuts(endless, [100] * 60), 1000])
    assert result["error"] == "true: an event line is larger than 1000 characters"


async def test_a_streamed_answer_split_at_every_byte_shows_the_upstreams_text(fake, playground, shots):
    from playwright.async_api import expect

    fake.set_defaults(split="bytes", chunks=24)
    await playground.fill("[data-role=question]", "Tell me about hearths.")
    await playground.click("[data-role=send]")
    await expect(playground.get_by_test_id("note")).to_have_text("")
    await expect(playground.get_by_test_id("status")).to_have_text("completed")
    assert await playground.get_by_test_id("answer").inner_text() == reply_text(24)
    await expect(playground.get_by_test_id("meta")).to_contain_text("model m")
    await shots.take(playground, "playground")
    await playground.fill("[data-role=question]", "And a second turn?")
    await playground.click("[data-role=send]")
    await expect(playground.get_by_test_id("status")).to_have_text("completed")
    assert fake.stats.requests == 2
    assert len(fake.stats.last_body["messages"]) >= 4  # the first exchange went along as history


async def test_a_busy_answer_shows_busy_and_sends_nothing_again_until_retry(fake, playground):
    from playwright.async_api import expect

    fake.script(FakeBehavior(status=429, retry_after=30))
    posts: list[str] = []
    playground.on("request", lambda r: posts.append(r.url) if r.url.endswith("/console/playground/chat") else None)
    await playground.fill("[data-role=question]", "Hello?")
    await playground.click("[data-role=send]")
    await expect(playground.get_by_test_id("status")).to_have_text("busy")
    await expect(playground.get_by_test_id("note")).to_have_text(BUSY)
    assert await playground.locator("[data-role=send]").is_enabled()
    assert len(posts) == 1 and fake.stats.requests == 1
    await playground.click("[data-role=retry]")  # a person's click: one new request, under a new id
    await expect(playground.locator("[data-playground]")).to_have_attribute("data-sent", "2")
    await expect(playground.get_by_test_id("status")).to_have_text("busy")  # the endpoint still cools down
    assert len(posts) == 2


async def test_stop_aborts_shows_stopped_and_never_resubmits(fake, playground):
    from playwright.async_api import expect

    fake.set_defaults(chunks=200, chunk_delay_ms=50)
    posts: list[str] = []
    playground.on("request", lambda r: posts.append(r.url) if r.url.endswith("/console/playground/chat") else None)
    await playground.fill("[data-role=question]", "Take your time.")
    await playground.click("[data-role=send]")
    await expect(playground.get_by_test_id("status")).to_have_text("generating")
    await playground.click("[data-role=stop]")
    await expect(playground.get_by_test_id("status")).to_have_text("stopped")
    shown = await playground.get_by_test_id("answer").inner_text()
    assert shown and len(shown) < len(reply_text(200))
    loop = asyncio.get_running_loop()
    until = loop.time() + 10
    while fake.stats.disconnects < 1:  # the abort reached the upstream: Hearth cancelled its call
        assert loop.time() < until, "the upstream call was not cancelled"
        await asyncio.sleep(0.05)
    assert len(posts) == 1 and fake.stats.requests == 1


async def test_the_chat_route_needs_the_operator_role_and_this_sessions_csrf_header(fake, server):
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
        await sign_in(client)
        token = await page_token(client, "/console/playground")
        body = {"messages": [{"role": "user", "content": "hi"}], "model": "m", "request_id": "req-csrf-1"}
        for headers in ({}, {"x-csrf-token": "forged"}, {"x-csrf-token": token, "origin": "https://evil.example"}):
            r = await client.post("/console/playground/chat", json=body, headers=headers)
            assert r.status_code == 403, headers
        assert fake.stats.requests == 0
        async with client.stream("POST", "/console/playground/chat", json=body,
                                 headers={"x-csrf-token": token}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            text = (await r.aread()).decode()
        assert "event: done" in text and fake.stats.requests == 1
        assert sessions.COOKIE in client.cookies
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as viewer:
        await sign_in(viewer, "vera", VIEWER_PASSWORD)
        page = await viewer.get("/console/playground")
        assert page.status_code == 200 and "needs the operator role" in page.text
        r = await viewer.post("/console/playground/chat", json=body, headers={"x-csrf-token": token})
        assert r.status_code == 403
    assert fake.stats.requests == 1
