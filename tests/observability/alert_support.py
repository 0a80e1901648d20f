"""A real alert receiver on 127.0.0.1 that checks every request's signature, for the alert tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from aiohttp import web

from hearth.auth.signing import verify_request
from hearth.capabilities.address_guard import AddressGuard
from hearth.testing.server_thread import free_port

KEY = "alert-key-0123456789abcdef"
LOCAL = AddressGuard(["127.0.0.0/8"])


class Receiver:
    """Answers the statuses in ``script`` first (then 204), recording only the signed deliveries it accepted;
    a request with a bad or replayed signature is answered 401 and counted in ``forged``."""

    def __init__(self) -> None:
        self.script: list[int] = []
        self.received: list[dict[str, Any]] = []
        self.refused = 0
        self.forged = 0
        self.url = ""
        self._nonces: set[str] = set()
        self.got = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()

        async def claim(nonce: str, _ttl: float) -> bool:
            fresh = nonce not in self._nonces
            self._nonces.add(nonce)
            return fresh

        try:
            await verify_request(key=KEY, method="POST", path_with_query=request.path_qs, body=body,
                                 headers=request.headers, claim_nonce=claim)
        except Exception:
            self.forged += 1
            return web.Response(status=401)
        if self.script:
            self.refused += 1
            return web.Response(status=self.script.pop(0))
        self.received.append({"body": orjson.loads(body), "headers": dict(request.headers)})
        self.got.set()
        return web.Response(status=204)

    def alerts(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [r["body"]["alert"] for r in self.received if kind is None or r["body"]["alert"]["kind"] == kind]


@contextlib.asynccontextmanager
async def running_receiver() -> AsyncIterator[Receiver]:
    r = Receiver()
    app = web.Application()
    app.router.add_post("/hooks/alerts", r.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    r.url = f"http://127.0.0.1:{port}/hooks/alerts?src=hearth"
    try:
        yield r
    finally:
        await runner.cleanup()
