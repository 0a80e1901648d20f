"""Every door onto the gateway core draws on the same budgets (issue 14): one token budget is spent through
the chat route, the Responses API and Anthropic Messages — each with its official SDK — and settles to the sum
of the three calls' real usage; once too little is left, every door refuses the next call in its own format,
before anything reaches the upstream (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic
import openai
import pytest

from tests.support import ADMIN, PRICE, gateway_registry

KEY = "test-key-123"
LIMIT = 200  # tokens a day: three small calls fit, a call reserving 150 more does not
QUESTION = [{"role": "user", "content": "x"}]


def _registry(fake: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up", "capabilities": ["chat", "streaming"]}],
                           prices=[{"model": "up", "input_per_1m": PRICE, "output_per_1m": PRICE}])
    reg["budgets"] = [{"name": "daily", "caller": "tester", "scope": "caller", "period": "day", "unit": "tokens",
                       "limit": LIMIT}]
    return reg


async def _used(http: Any, server: Any, expected: int) -> int:
    """The budget's ``used``, once settlements (recorded asynchronously) reach ``expected``: poll up to 3 s."""
    used = -1
    for _ in range(60):
        items = (await http.get(server.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
        used = next(b for b in items if b["budget"] == "daily")["used"]
        if used == expected:
            break
        await asyncio.sleep(0.05)
    return int(used)


async def test_one_budget_is_spent_and_enforced_through_chat_responses_and_messages(database_url, fake,
                                                                                      hearth_server, http):
    server = hearth_server(_registry(fake), database_url=database_url)
    oai = openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=KEY, max_retries=0)
    claude = anthropic.AsyncAnthropic(base_url=server.base_url, api_key=KEY, max_retries=0)
    async with oai, claude:
        chat = await oai.chat.completions.create(model="m", max_tokens=20, messages=QUESTION)  # type: ignore[arg-type]
        response = await oai.responses.create(model="m", max_output_tokens=20, input="x")
        message = await claude.messages.create(model="m", max_tokens=20, messages=QUESTION)  # type: ignore[arg-type]
        assert chat.usage is not None and response.usage is not None
        spent = chat.usage.total_tokens + response.usage.total_tokens + message.usage.input_tokens \
            + message.usage.output_tokens
        assert await _used(http, server, spent) == spent  # one budget, three doors, real usage each
        assert LIMIT - spent < 150
        with pytest.raises(openai.RateLimitError) as by_chat:
            await oai.chat.completions.create(model="m", max_tokens=150, messages=QUESTION)  # type: ignore[arg-type]
        with pytest.raises(openai.RateLimitError) as by_responses:
            await oai.responses.create(model="m", max_output_tokens=150, input="x")
        with pytest.raises(anthropic.RateLimitError) as by_messages:
            await claude.messages.create(model="m", max_tokens=150, messages=QUESTION)  # type: ignore[arg-type]
    assert by_chat.value.code == "budget_exhausted" and by_responses.value.code == "budget_exhausted"
    assert by_messages.value.body["error"]["type"] == "billing_error"  # type: ignore[index]
    assert by_messages.value.body["error"]["code"] == "budget_exhausted"  # type: ignore[index]
    assert fake.stats.requests == 3  # the refused calls never reached the upstream
    assert await _used(http, server, spent) == spent
