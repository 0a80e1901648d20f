"""Request heads are bounded by the server `hearth serve` runs: a huge header is a 431, never a 500,
and the process keeps serving everyone else (docs/operations.md, "Request limits")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from hearth.api.http_protocol import MAX_REQUEST_HEAD_BYTES
from tests.e2e import processes
from tests.support import AUTH, MASTER_KEY, chat_body, gateway_registry, send_raw_request, write_config


async def test_huge_header_gets_431_from_a_real_process_which_keeps_serving(tmp_path: Path, fake: Any, http):
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    config = write_config(tmp_path / "hearth.yaml", registry)
    proc = processes.start(tmp_path, {"HEARTH_CONFIG": config, "HEARTH_MASTER_KEY": MASTER_KEY,
                                      "HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path}/h.db"})
    try:
        url = proc.base_url + "/v1/chat/completions"
        assert (await http.post(url, json=chat_body(), headers=AUTH)).status_code == 200

        # a 100 KB header in one write, through an ordinary client
        r = await http.post(url, json=chat_body(), headers={**AUTH, "X-Big": "a" * 100_000})
        assert r.status_code == 431
        # the same size dribbled in small writes, and one header far larger than any read
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-key-123\r\n"
        for request, dribble in ((head + b"X-Big: " + b"b" * 100_000 + b"\r\n\r\n", 500),
                                 (head + b"".join(b"X-H%d: v\r\n" % i for i in range(20_000)) + b"\r\n", 4096),
                                 (head + b"X-Big: " + b"c" * 1_000_000 + b"\r\n\r\n", 65_536)):
            status = await send_raw_request(proc.port, request, dribble=dribble)
            assert status.startswith(b"HTTP/1.1 431"), status
        # a head just under the limit is served
        r = await http.post(url, json=chat_body(), headers={**AUTH, "X-Big": "d" * (MAX_REQUEST_HEAD_BYTES - 2000)})
        assert r.status_code == 200, r.text

        # others were served all along, and still are
        results = await asyncio.gather(*[http.post(url, json=chat_body(), headers=AUTH) for _ in range(20)])
        assert [x.status_code for x in results] == [200] * 20
        assert fake.stats.requests == 22
        assert "Traceback" not in proc.output()
    finally:
        proc.stop()
