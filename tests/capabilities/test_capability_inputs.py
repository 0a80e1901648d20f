"""Capability inputs end to end through the HTTP API: ``file_url`` to a local server is refused unless
allowlisted (and so is a redirect from an allowlisted server to a refused address); ``file_id`` resolves
inside the configured root only. Only 127.0.0.x is ever contacted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.support import AUTH, gateway_registry


@pytest.fixture
async def files_server() -> AsyncIterator[str]:
    async def text(_: web.Request) -> web.Response:
        return web.Response(text="Hearth reads this file. It has two sentences.", content_type="text/plain")

    async def hop(_: web.Request) -> web.Response:
        raise web.HTTPFound("http://127.0.0.2:9/secret")

    app = web.Application()
    app.router.add_get("/doc.txt", text)
    app.router.add_get("/hop", hop)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _registry(fake: Any) -> dict[str, Any]:
    return gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                              "upstream_model": "up"}])


async def _summarize(http: Any, server: Any, **source: Any) -> Any:
    return await http.post(server.base_url + "/api/v1/ai/summarize", headers=AUTH, json={"model": "m", **source})


async def test_a_local_file_url_is_refused_unless_allowlisted(fake, hearth_server, http, files_server, tmp_path):
    closed = hearth_server(_registry(fake))
    refused = await _summarize(http, closed, file_url=files_server + "/doc.txt")
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "file_url_refused")
    assert fake.stats.requests == 0
    open_ = hearth_server(_registry(fake), file_url_allow=["127.0.0.1/32"],
                          database_url=f"sqlite+aiosqlite:///{tmp_path}/second.db")
    allowed = await _summarize(http, open_, file_url=files_server + "/doc.txt")
    assert allowed.status_code == 200, allowed.text
    assert allowed.json()["data"]["input_source"] == "file_url"
    assert "Hearth reads this file." in fake.stats.last_body["messages"][-1]["content"]


async def test_a_redirect_from_an_allowlisted_server_to_a_refused_address_is_refused(
        fake, hearth_server, http, files_server):
    server = hearth_server(_registry(fake), file_url_allow=["127.0.0.1/32"])
    r = await _summarize(http, server, file_url=files_server + "/hop")
    assert (r.status_code, r.json()["error"]["code"]) == (400, "file_url_refused")
    assert fake.stats.requests == 0


async def test_file_id_reads_inside_the_root_and_refuses_everything_else(fake, hearth_server, http, tmp_path):
    root = tmp_path / "inputs"
    root.mkdir()
    (root / "bill.txt").write_text("Invoice INV-9. Total: 10.00 USD.", encoding="utf-8")
    (root / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (tmp_path / "outside.txt").write_text("secret", encoding="utf-8")
    (root / "link.txt").symlink_to(tmp_path / "outside.txt")
    server = hearth_server(_registry(fake), file_root=str(root), file_max_bytes=1000)
    ok = await _summarize(http, server, file_id="bill.txt")
    assert ok.status_code == 200, ok.text
    for file_id, code in (("../outside.txt", "file_path_refused"), ("/etc/passwd", "file_path_refused"),
                          ("link.txt", "file_path_refused"), ("missing.txt", "file_not_found"),
                          ("image.txt", "file_type_unsupported")):
        r = await _summarize(http, server, file_id=file_id)
        assert r.json()["error"]["code"] == code, (file_id, r.text)
    (root / "big.txt").write_text("x" * 2000, encoding="utf-8")
    big = await _summarize(http, server, file_id="big.txt")
    assert (big.status_code, big.json()["error"]["code"]) == (413, "file_too_large")
    assert fake.stats.requests == 1
    assert "secret" not in str(fake.stats.last_body)
