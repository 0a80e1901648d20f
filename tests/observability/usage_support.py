"""Harness for the usage-event tests: records, a webhook receiver, a private nats-server, unique names.

Everything runs on 127.0.0.1: the webhook receiver is an aiohttp server in the test's loop; NATS and
RabbitMQ are the machine's real servers (unique subjects, streams and queues per test), and the tests
that stop NATS start their own ``nats-server`` (never the shared one).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from hearth.auth.signing import HEADER_NONCE, HEADER_SIGNATURE, HEADER_TIMESTAMP, sign
from hearth.observability.request_log import RequestLogRecord

SHARED_NATS_URL = "nats://127.0.0.1:4222"
AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


def unique(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:12]}"


def record(i: int, **over: Any) -> RequestLogRecord:
    values: dict[str, Any] = dict(
        request_id=f"req-{i}", created_at=datetime(2026, 12, 3, 8, 0, 0, i * 1000 % 1_000_000, tzinfo=UTC),
        caller="tester", route="chat", model="m", endpoint="a", upstream_model="up", stream=False, status=200,
        error_code=None, attempts=1, prompt_tokens=10 + i, completion_tokens=20, usage_estimated=False,
        cost=0.001, latency_ms=12.5, ttft_ms=None, end_user="u", tenant="t", client_ip="10.0.0.1", scene=None,
        fallback_used=False, attempted_models=["m"], effective_max_tokens=100, estimated_cost=0.002)
    values.update(over)
    return RequestLogRecord(**values)


async def eventually(check: Callable[[], Awaitable[bool]], *, timeout_s: float = 30.0, what: str = "") -> None:
    """Wait until ``check()`` holds (polling a real server's or the database's state), failing after the bound."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {timeout_s} s: {what}")
        await asyncio.sleep(0.02)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class WebhookReceiver:
    """An aiohttp server on 127.0.0.1 that records each POST (and answers ``status``)."""

    key: str
    status: int = 200
    posts: list[dict[str, Any]] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/usage"

    async def _handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.posts.append({"headers": dict(request.headers), "raw": raw, "path": request.path_qs,
                           "status": self.status})
        return web.Response(status=self.status)

    def signature_ok(self, post: dict[str, Any]) -> bool:
        h = post["headers"]
        expected = sign(self.key, "POST", post["path"], post["raw"], timestamp=h[HEADER_TIMESTAMP],
                        nonce=h[HEADER_NONCE])
        return bool(h.get(HEADER_SIGNATURE) == expected)

    def events(self) -> list[dict[str, Any]]:
        """Every event of every accepted POST (duplicates included)."""
        out: list[dict[str, Any]] = []
        for post in self.posts:
            if 200 <= post["status"] < 300:
                out += orjson.loads(post["raw"])["events"]
        return out

    async def start(self) -> WebhookReceiver:
        app = web.Application()
        app.router.add_post("/usage", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


class PrivateNats:
    """A ``nats-server`` of this test's own (JetStream on, its store in ``store``), stopped and started at will."""

    def __init__(self, store: Path) -> None:
        self.port = free_port()
        self.store = store
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self._proc = subprocess.Popen([NATS_SERVER, "-a", "127.0.0.1", "-p", str(self.port), "-js",
                                       "-sd", str(self.store)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    raise RuntimeError("the private nats-server did not start") from None
                time.sleep(0.02)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
