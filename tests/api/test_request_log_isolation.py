"""Over real HTTP: a hostile X-Request-Id is replaced, and costs neither its own log row nor anyone else's."""

from __future__ import annotations

import asyncio
from typing import Any

from hearth.observability.request_id import MAX_REQUEST_ID
from tests.support import ADMIN, AUTH, chat_body, gateway_registry


async def _logs(http: Any, server: Any, want: int) -> dict[str, Any]:
    for _ in range(100):
        data: dict[str, Any] = (await http.get(server.base_url + "/api/v1/request-logs", params={"limit": 200},
                                               headers=ADMIN)).json()["data"]
        if data["total"] >= want:
            return data
        await asyncio.sleep(0.05)
    return data


async def test_overlong_request_ids_are_replaced_and_every_callers_row_is_written(database_url, fake, hearth_server,
                                                                                  http):
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    server = hearth_server(registry, database_url=database_url, request_log_flush_s=0.2)
    url = server.base_url + "/v1/chat/completions"
    sent = {"long65": "a" * 65, "long200": "b" * 200, "fits64": "c" * 64, "badchar": "x y", "plain": "req-plain"}

    async def call(rid: str | None) -> Any:
        headers = dict(AUTH) if rid is None else {**AUTH, "X-Request-Id": rid}
        return await http.post(url, json=chat_body(), headers=headers)

    # the hostile ids and 20 other callers' requests land in the same flush window
    answers = await asyncio.gather(*(call(rid) for rid in sent.values()), *(call(None) for _ in range(20)))
    assert [r.status_code for r in answers] == [200] * 25
    echoed = dict(zip(sent, (r.headers["x-request-id"] for r in answers), strict=False))
    assert echoed["fits64"] == sent["fits64"] and echoed["plain"] == "req-plain"
    for name in ("long65", "long200", "badchar"):
        assert echoed[name] != sent[name] and 0 < len(echoed[name]) <= MAX_REQUEST_ID

    data = await _logs(http, server, 25)
    assert data["total"] == 25
    ids = {row["request_id"] for row in data["items"]}
    assert set(echoed.values()) <= ids  # each logged under the id it was answered with
    assert not any(i.startswith(("aaaa", "bbbb")) for i in ids)  # never stored cut
    stats = (await http.get(server.base_url + "/api/v1/admin/stats", headers=ADMIN)).json()["data"]
    writer = stats["request_log_writer"]
    assert (writer["written"], writer["dead"], writer["dropped"], writer["failed_batches"]) == (25, 0, 0, 0)
    assert writer["pending"] == 0 and writer["lost"] == 0 and writer["last_error"] is None
    if callable(getattr(server.runtime.ledger, "stats", None)):
        assert isinstance(stats["budget_ledger"], dict)
    else:
        assert "budget_ledger" not in stats
