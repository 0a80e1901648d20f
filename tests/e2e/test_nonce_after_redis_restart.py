"""Issue 7 acceptance: a signed request captured before a Redis restart is refused after it.

Nonces live in the state backend; a restart without persistence forgets them. Hearth must notice
the loss and refuse every signed request whose timestamp predates it (401 ``nonce_store_reset``),
so a captured request cannot be replayed within its signature window. Genuine callers are served
again within 5 s (a 503 with ``Retry-After`` while Hearth rebuilds is fine), and a forged request
never burns the nonce of the genuine one.

Two ``hearth serve`` processes on PostgreSQL and a private ``redis-server``: the request is captured
through one process and replayed through both.

Run: ``.venv/bin/pytest tests/e2e/test_nonce_after_redis_restart.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from hearth.auth.signing import signed_headers
from tests.e2e import processes
from tests.e2e.processes import HearthProcess
from tests.e2e.redis_server import RedisServer
from tests.support import AUTH, MASTER_KEY, SIGNING_KEY, chat_body, signing_registry, write_config

RECOVERY_S = 5.0
PATH = "/v1/chat/completions"


def _raw(content: str) -> bytes:
    return orjson.dumps(chat_body(content))


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis") as server:
        yield server


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=10) as client:
        yield client


def _code(response: httpx.Response) -> str | None:
    try:
        error = response.json().get("error")
    except ValueError:
        return None
    return str(error.get("code")) if isinstance(error, dict) else None


def _label(response: httpx.Response) -> str:
    code = _code(response) if response.status_code != 200 else None
    retry = " +Retry-After" if response.headers.get("retry-after") else ""
    return f"{response.status_code} {code or ''}".strip() + retry


def _busy(response: httpx.Response) -> bool:
    """Hearth noticed the loss and is rebuilding: try again."""
    return response.status_code == 503 and bool(response.headers.get("retry-after"))


async def _until(send: Callable[[], Awaitable[httpx.Response]], done: Callable[[httpx.Response], bool],
                 within: float = RECOVERY_S) -> tuple[httpx.Response, list[str]]:
    """Send until ``done(answer)`` or ``within`` seconds pass (every 100 ms); returns the last answer and all labels."""
    deadline = time.monotonic() + within
    seen: list[str] = []
    while True:
        response = await send()
        seen.append(_label(response))
        if done(response) or time.monotonic() >= deadline:
            return response, seen
        await asyncio.sleep(0.1)


async def test_a_signed_request_captured_before_a_redis_restart_is_refused_after_it(
        tmp_path: Path, postgres_url: str, fake: Any, redis_server: RedisServer, http: httpx.AsyncClient) -> None:
    env = {"HEARTH_CONFIG": write_config(tmp_path / "hearth.yaml", signing_registry(fake)),
           "HEARTH_DATABASE_URL": postgres_url, "HEARTH_STATE_BACKEND": "redis", "HEARTH_REDIS_URL": redis_server.url,
           "HEARTH_REDIS_PREFIX": "hearth-nonce:", "HEARTH_MASTER_KEY": MASTER_KEY,
           "HEARTH_ADMIN_TOKEN": "admin-token-xyz", "HEARTH_LOG_LEVEL": "warning", "HEARTH_LEASE_TTL_S": 5}
    failed: list[str] = []
    notes: list[str] = []
    served = 0
    gateways: list[HearthProcess] = []
    try:
        for name in ("gw0", "gw1"):
            gateways.append(processes.start(tmp_path, env, name=name))

        def post(gateway: HearthProcess, body: bytes, headers: dict[str, str]) -> Awaitable[httpx.Response]:
            return http.post(gateway.base_url + PATH, content=body,
                             headers={"Content-Type": "application/json", **headers})

        def signed(body: bytes, **sign: Any) -> dict[str, str]:
            return {**AUTH, **signed_headers(SIGNING_KEY, "POST", PATH, body, **sign)}

        # genuine signed requests, one served by each process, captured on the wire (the signature
        # covers the path, not the host, so a capture can be replayed through either process); signed
        # two seconds ago, well inside the window, so their whole-second timestamps are strictly older
        # than the loss below without waiting for the clock
        captures: list[tuple[bytes, dict[str, str]]] = []
        for i, gateway in enumerate(gateways):
            body = _raw(f"pay {10 + i}")
            captured = signed(body, timestamp=int(time.time()) - 2)
            first = await post(gateway, body, captured)
            assert first.status_code == 200, first.text
            served += 1
            replay = await post(gateways[1 - i], body, captured)  # the nonce store works before any fault
            assert (replay.status_code, _code(replay)) == (401, "nonce_replayed"), replay.text
            captures.append((body, captured))

        restarted = await asyncio.to_thread(redis_server.restart_empty)
        notes.append(f"captured X-Timestamps {[c['X-Timestamp'] for _, c in captures]}, Redis restarted empty at "
                     f"unix {time.time() - (time.monotonic() - restarted):.2f}")

        # the attacker replays right away, before any genuine caller: each capture through the other
        # process, so each process must have noticed the loss on its own
        for i, (body, captured) in enumerate(captures):
            gateway = gateways[1 - i]
            answer, seen = await _until(lambda g=gateway, b=body, h=captured: post(g, b, h), lambda r: not _busy(r))
            name = gateway.log_path.stem
            notes.append(f"replay of the request captured via gw{i}, sent via {name}: {seen}")
            served += seen.count("200")
            if "200" in seen:
                failed.append(f"a captured request was accepted again via {name} after the Redis restart: {seen}")
            elif (answer.status_code, _code(answer)) != (401, "nonce_store_reset"):
                failed.append(f"replay via {name}: expected 401 nonce_store_reset, got {seen}")

        # genuine callers are served again within 5 s (fresh timestamp and nonce on every try)
        def fresh_request(gateway: HearthProcess) -> Awaitable[httpx.Response]:
            fresh = _raw("fresh")
            return post(gateway, fresh, signed(fresh))

        for gateway in gateways:
            name = gateway.log_path.stem
            answer, seen = await _until(lambda g=gateway: fresh_request(g), lambda r: r.status_code == 200)
            served += seen.count("200")
            notes.append(f"fresh signed requests via {name} after the restart: {seen}")
            transient = {"401 nonce_store_reset"}  # a fresh request signed in the very second of the loss
            if answer.status_code != 200:
                failed.append(f"no fresh signed request served via {name} within {RECOVERY_S:g} s: {seen}")
            elif not all((label.startswith("503") and label.endswith("+Retry-After")) or label in transient
                         for label in seen[:-1]):
                failed.append(f"fresh signed requests via {name} got other answers before the 200: {seen}")

        # a forged request (bad signature) does not burn the nonce: the genuine one is still served
        genuine_body = _raw("pay 20")
        genuine = signed(genuine_body)
        forged = {**genuine, "X-Signature": "0" * 64}
        forged_answer = await post(gateways[1], genuine_body, forged)
        tampered_answer = await post(gateways[1], _raw("pay 20000"), genuine)
        genuine_answer = await post(gateways[0], genuine_body, genuine)
        notes.append(f"forged: {_label(forged_answer)}, tampered: {_label(tampered_answer)}, "
                     f"genuine with the same nonce: {_label(genuine_answer)}")
        for what, answer in (("forged signature", forged_answer), ("tampered body", tampered_answer)):
            if (answer.status_code, _code(answer)) != (401, "signature_invalid"):
                failed.append(f"{what}: expected 401 signature_invalid, got {_label(answer)}")
        if genuine_answer.status_code == 200:
            served += 1
        else:
            failed.append(f"the genuine request after a forged one with its nonce: {_label(genuine_answer)}")

        # still refused later, through either process, and a nonce used after the restart is burnt as usual
        later = [await post(gateway, body, captured) for gateway in gateways for body, captured in captures]
        again = await post(gateways[1], genuine_body, genuine)
        notes.append(f"captured requests once more: {[_label(r) for r in later]}; genuine request replayed: "
                     f"{_label(again)}")
        served += [r.status_code for r in (*later, again)].count(200)
        if any((r.status_code, _code(r)) not in ((401, "nonce_store_reset"), (401, "nonce_replayed")) for r in later):
            failed.append(f"the captured requests replayed later: expected 401 nonce_store_reset (or nonce_replayed), "
                          f"got {[_label(r) for r in later]}")
        if (again.status_code, _code(again)) != (401, "nonce_replayed"):
            failed.append(f"a post-restart request replayed: expected 401 nonce_replayed, got {_label(again)}")
    finally:
        for gateway in gateways:
            gateway.stop()
    upstream = fake.stats.requests
    notes.append(f"upstream calls: {upstream}, requests answered 200: {served}")
    if upstream != served:
        failed.append(f"{upstream} calls reached the upstream for {served} requests served")
    report = "\n  ".join(["nonces after a Redis restart:", *notes])
    print(report)
    assert not failed, "\n".join(["FAILED CHECKS:", *(f"- {m}" for m in failed), report])
