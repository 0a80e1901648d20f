"""Plain helpers shared by the tests: constants, registries, request bodies, ledger reads.

The one module test modules import helpers from. Fixtures live in ``tests/conftest.py``; process and
server harnesses in their own modules (``tests/e2e/processes.py``, ``tests/e2e/redis_server.py``,
``tests/store/tcp_proxy.py``). No test module imports another test module (or ``conftest``):
``tests/test_test_hygiene.py`` checks it, so moving a test never breaks another one.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import func, select

from hearth.observability.request_log import RequestLogRecord
from hearth.state.base import StateBackend
from hearth.state.memory import MemoryState
from hearth.store.db import create_engine
from hearth.store.tables import budget_ledger
from hearth.testing.fake_clock import FakeClock
from hearth.testing.server_thread import free_port
from hearth.wire.tokens import prompt_upper_bound

REPO_ROOT = Path(__file__).resolve().parents[1]
PG_ADMIN_DSN = os.environ.get("HEARTH_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("HEARTH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() == "true"
MASTER_KEY = "00" * 32
# Property tests run `examples(n)` cases: n in `make test`, n × this for a deeper search on demand
# (`HEARTH_TEST_EXAMPLES_SCALE=10 .venv/bin/pytest tests/workflows/test_cron.py`).
EXAMPLES_SCALE = float(os.environ.get("HEARTH_TEST_EXAMPLES_SCALE", "1"))

AUTH = {"Authorization": "Bearer test-key-123"}
ADMIN = {"Authorization": "Bearer admin-token-xyz"}


def examples(n: int) -> int:
    """``max_examples`` for a property test: ``n`` scaled by ``HEARTH_TEST_EXAMPLES_SCALE`` (default 1)."""
    return max(1, round(n * EXAMPLES_SCALE))


def chat_body(content: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **extra}


def write_config(path: Path, registry: dict[str, Any], server: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump({"server": server or {}, **registry}))
    return path


def gateway_registry(endpoints: list[dict[str, Any]], *, model: str = "m",
                     quota_groups: list[dict[str, Any]] | None = None,
                     prices: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A registry with one provider per kind, the given endpoints in model ``model``, caller key ``test-key-123``."""
    return {
        "providers": [{"name": "openai-like", "kind": "openai"}, {"name": "anthropic-like", "kind": "anthropic"},
                      {"name": "sim", "kind": "simulated"}],
        "quota_groups": quota_groups or [],
        "endpoints": endpoints,
        "models": [{"name": model, "endpoints": [e["name"] for e in endpoints]}],
        "prices": prices or [],
        "callers": [{"name": "tester", "key": "test-key-123"}],
    }


# --------------------------------------------------------------------------- strict budgets

PRICE = 1000.0  # per 1M tokens, in and out: a token costs exactly 1000 micro-units
MAX_TOKENS = 20  # the fake upstream answers exactly 20 completion tokens, so reservations are tight


def budget_registry(fake: Any, limit: float, unit: str = "money", **budget: Any) -> dict[str, Any]:
    """One endpoint on ``fake`` priced at :data:`PRICE`, and a daily budget ``limit`` for caller ``tester``."""
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up", "max_concurrency": 1000}],
                           prices=[{"model": "up", "input_per_1m": PRICE, "output_per_1m": PRICE}])
    reg["budgets"] = [{"name": "daily", "caller": "tester", "scope": "caller", "period": "day", "unit": unit,
                       "limit": limit, **budget}]
    return reg


def reservation_tokens() -> int:
    return prompt_upper_bound(chat_body()) + MAX_TOKENS  # what a strict budget reserves per call


async def ledger_summary(database_url: str) -> dict[str, Any]:
    """The budget ledger read back: reservations and settlements by (reservation id, counter), how many
    calls they cover, what is charged, open and spent, and duplicates."""
    engine = create_engine(database_url)
    c = budget_ledger.c
    try:
        async with engine.connect() as conn:
            rows = (await conn.execute(select(budget_ledger))).mappings().all()
            dupes = (await conn.execute(
                select(c.call_id, c.counter_key, c.kind, func.count())
                .group_by(c.call_id, c.counter_key, c.kind).having(func.count() > 1))).all()
    finally:
        await engine.dispose()
    # A ``call`` row is a reservation (amount + refund) and its settlement (amount) in one.
    reserves = {(r["call_id"], r["counter_key"]): r["amount"] + (r["refund"] if r["kind"] == "call" else 0)
                for r in rows if r["kind"] in ("reserve", "call")}
    settles = {(r["call_id"], r["counter_key"]): r for r in rows if r["kind"] in ("settle", "call")}
    charged = sum(r["amount"] for r in settles.values())
    open_reserved = sum(a for key, a in reserves.items() if key not in settles)
    return {"reserves": reserves, "settles": settles, "charged": charged, "open": open_reserved,
            "spend": charged + open_reserved, "duplicates": dupes,
            "reserved_calls": sum(r["calls"] for r in rows if r["kind"] in ("reserve", "call")),
            "settled_calls": sum(r["calls"] for r in rows if r["kind"] in ("settle", "call"))}


# --------------------------------------------------------------------------- signed requests

SIGNING_KEY = "caller-signing-key-0123456789"
SIGNING_DOC = REPO_ROOT / "docs" / "signing.md"
_VECTOR_BLOCK = re.compile(r"^```json signing-test-vector\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def signing_registry(fake: Any) -> dict[str, Any]:
    """One endpoint on ``fake``; caller ``tester`` must sign every request with :data:`SIGNING_KEY`."""
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up", "api_key": "sk-upstream-key-abcdef"}])
    registry["callers"] = [{"name": "tester", "key": "test-key-123", "signing_key": SIGNING_KEY,
                            "require_signature": True}]
    return registry


def load_signing_vectors() -> list[dict[str, str]]:
    """The test vectors published in docs/signing.md (```json signing-test-vector blocks)."""
    vectors = [json.loads(block) for block in _VECTOR_BLOCK.findall(SIGNING_DOC.read_text(encoding="utf-8"))]
    assert vectors, "docs/signing.md has no ```json signing-test-vector blocks"
    return vectors


# --------------------------------------------------------------------------- time in state-backend tests


class StateTime:
    """Time as the ``state`` backend under test sees it.

    The memory backend reads a :class:`FakeClock`, so a lease TTL, a cooldown or a minute window
    passes at once. Redis decides expiry with its own clock (``TIME`` and key TTLs inside the
    scripts), which no test can move: there time passes for real, so keep those waits short."""

    def __init__(self, backend: StateBackend, clock: FakeClock) -> None:
        self._fake = clock if isinstance(backend, MemoryState) else None

    def now(self) -> float:
        return self._fake.now() if self._fake is not None else time.time()

    async def elapse(self, seconds: float) -> None:
        if self._fake is not None:
            self._fake.advance(seconds)
        else:
            await asyncio.sleep(seconds)

    async def away_from_minute_edge(self, margin_s: float = 0.9) -> None:
        """RPM/TPM count in one-minute windows: don't start a counting test just before one ends
        (a test that counts within ``margin_s`` of starting; on Redis this waits at most that long)."""
        left = 60 - self.now() % 60
        if left < margin_s:
            await self.elapse(left + 0.01)


async def request_log_row(http: Any, server: Any, request_id: str, *, route: str | None = None) -> dict[str, Any]:
    """The request-log row of one request, through the admin API (logs are written asynchronously:
    poll up to 3 s). A capability call writes two rows under one request id, its model call's (``chat``) and
    its own (``capability``), in batches that may commit apart: name the ``route`` to wait for the one wanted."""
    params = {"request_id": request_id, **({"route": route} if route is not None else {})}
    for _ in range(60):
        items = (await http.get(server.base_url + "/api/v1/request-logs", params=params,
                                headers=ADMIN)).json()["data"]["items"]
        if items:
            return dict(items[0])
        await asyncio.sleep(0.05)
    raise AssertionError(f"no request log row for {request_id}")


@dataclass(frozen=True, slots=True)
class Reply:
    """What :func:`post_many` returns per request (the parts of an ``httpx.Response`` tests read)."""

    status_code: int
    text: str
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.text)


async def post_many(urls: list[str], n: int, body: dict[str, Any], headers: dict[str, str]) -> list[Reply]:
    """``n`` POSTs at once (round-robin over ``urls``), each with a connection of its own.

    aiohttp, not the ``http`` fixture's httpx: httpx's pool scans every connection on each request
    (quadratic with 500 in flight), enough CPU to starve a server running in the test's own process —
    seen as reservation commits that took more than their 5 s timeout."""
    import aiohttp

    connector = aiohttp.TCPConnector(limit=n)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        async def one(url: str) -> Reply:
            async with session.post(url, json=body, headers=headers) as resp:
                return Reply(resp.status, await resp.text(), {k.lower(): v for k, v in resp.headers.items()})

        return list(await asyncio.gather(*(one(urls[i % len(urls)]) for i in range(n))))


# --------------------------------------------------------------------------- the command line


def hearth_process(args: list[str], *, cwd: Path, env: dict[str, str],
                   timeout_s: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m hearth ARGS`` as an operator runs it: a real process in ``cwd`` whose HEARTH_* variables
    are exactly ``env`` (the rest of this process's environment is inherited)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    full.update(env)
    return subprocess.run([sys.executable, "-m", "hearth", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout_s)


def hearth_in_process(args: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """What :func:`hearth_process` returns, without starting an interpreter (~1–2 s each): the typer app
    of ``python -m hearth`` called in this process, in ``cwd``, with HEARTH_* exactly ``env`` (every other
    HEARTH_* variable unset for the call, all restored after).

    The process's exit is reproduced: ``sys.exit(n)`` / ``typer.Exit(n)`` → ``returncode`` n, a
    ``SystemExit("message")`` → the message on stderr and 1, as the interpreter does. Log records of
    WARNING and above go to stderr too, as Python's last-resort handler writes them in a process that
    configured no logging (``hearth serve`` does; the commands run this way do not). Any other exception
    propagates (the process would die with its traceback): the test fails with it.

    Not thread-safe (it sets ``os.environ``, the working directory and ``sys.stdout``/``sys.stderr``);
    from an async test, call it in a thread (``asyncio.to_thread``): the commands run ``asyncio.run``.
    """
    import logging

    from typer.testing import CliRunner

    from hearth.cli import app

    overrides: dict[str, str | None] = {k: None for k in os.environ if k.startswith("HEARTH_")}
    overrides.update(env)
    root = logging.getLogger()
    cwd_before = os.getcwd()
    with CliRunner().isolation(env=overrides) as (out, err, _):
        last_resort = logging.StreamHandler(sys.stderr)  # the isolated stderr
        last_resort.setLevel(logging.WARNING)
        root.addHandler(last_resort)
        os.chdir(cwd)
        try:
            app(args, prog_name="hearth")
            code = 0  # typer exits through SystemExit even on success; reaching here is exit 0 too
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        finally:
            os.chdir(cwd_before)
            root.removeHandler(last_resort)
            sys.stdout.flush()
            sys.stderr.flush()
        return subprocess.CompletedProcess(["hearth", *args], code, out.getvalue().decode(),
                                           err.getvalue().decode())


# --------------------------------------------------------------------------- images

def png_image(data: bytes) -> tuple[int, int, list[bytes]]:
    """(width, height, chunk types) of a PNG whose structure is checked: the signature, every chunk's CRC, an
    IHDR first and an IEND last, and IDAT data that inflates to exactly one filter byte plus one byte per pixel
    per row (the 8-bit palette images Hearth's simulated provider and the fake upstream draw)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature"
    at, kinds, idat, ihdr = 8, [], b"", b""
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        assert zlib.crc32(kind + body) == crc, f"bad CRC in chunk {kind!r}"
        kinds.append(kind)
        if kind == b"IHDR":
            ihdr = body
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    assert at == len(data) and kinds[0] == b"IHDR" and kinds[-1] == b"IEND", kinds
    width, height, depth, colour, _, _, _ = struct.unpack(">IIBBBBB", ihdr)
    assert (depth, colour) == (8, 3), (depth, colour)
    assert len(zlib.decompress(idat)) == height * (1 + width)
    return width, height, kinds


def request_log_record(i: int, **over: Any) -> RequestLogRecord:
    """A request-log record of a successful call (request id ``req-{i}``, now), with ``over`` changed."""
    values: dict[str, Any] = dict(
        request_id=f"req-{i}", created_at=datetime.now(UTC), caller="tester", route="chat", model="m",
        endpoint="a", upstream_model="up", stream=False, status=200, error_code=None, attempts=1,
        prompt_tokens=10, completion_tokens=20, usage_estimated=False, cost=0.001, latency_ms=12.5,
        ttft_ms=None, end_user="u", tenant="t", client_ip="10.0.0.1", scene=None, fallback_used=False,
        attempted_models=["m"], effective_max_tokens=100, estimated_cost=0.002)
    values.update(over)
    return RequestLogRecord(**values)


# --------------------------------------------------------------------------- a private redis-server

REDIS_SERVER_BINARY = shutil.which("redis-server")
_REDIS_READY = b"Ready to accept connections"


def start_redis_server(log_path: Path, *extra: str, port: int | None = None,
                       timeout_s: float = 5.0) -> tuple[subprocess.Popen[bytes], int]:
    """Start a ``redis-server`` child on a loopback port and return it (and the port) once *it* listens.

    Readiness is the server's own log line ("Ready to accept connections"), never a PING: between
    ``free_port()`` and the server's bind, another test's server may take the port, and would answer the
    PING ("Protocol error, got "H" as reply type byte" when it was an HTTP server) while this one exits
    with "Address already in use". Such a start is tried again on a new port, or — with ``port`` given,
    a restart on the same port whose last instance may still hold it — on that port, until ``timeout_s``.
    ``log_path`` gets the log (one file per start: ``.1``, ``.2`` … after the first)."""
    assert REDIS_SERVER_BINARY is not None, "callers skip or fail first when redis-server is missing"
    deadline = time.monotonic() + timeout_s
    attempt = 0
    while True:
        attempt += 1
        chosen = port or free_port()
        log = log_path if attempt == 1 else log_path.with_name(f"{log_path.name}.{attempt}")
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_bytes(b"")
        proc = subprocess.Popen(
            [REDIS_SERVER_BINARY, "--port", str(chosen), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--logfile", str(log), *extra],
            cwd=log.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and time.monotonic() < deadline:
            if _REDIS_READY in log.read_bytes():
                return proc, chosen
            time.sleep(0.01)
        if proc.poll() is None:  # neither ready nor gone by the deadline
            proc.kill()
            proc.wait(5)
        if time.monotonic() >= deadline:
            raise TimeoutError(f"redis-server did not start (port {chosen}): {log.read_text(errors='replace')[-500:]}")
        time.sleep(0.02)


async def send_raw_request(port: int, request: bytes, *, dribble: int = 0) -> bytes:
    """Send ``request`` (in ``dribble``-byte writes if set) and return the status line, or b"" if cut."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        if dribble:
            try:
                for i in range(0, len(request), dribble):
                    writer.write(request[i:i + dribble])
                    await writer.drain()
            except ConnectionError:
                pass  # the server answered and closed while we were still sending
        else:
            writer.write(request)
        return await asyncio.wait_for(reader.readline(), 10)
    except ConnectionError:
        return b""
    finally:
        writer.close()
