"""Slow and silent streaming clients cannot hold an endpoint's slots (issue 7, item 7).

The clients here are raw sockets with a tiny receive buffer that read about 100 bytes a second,
so the kernel buffers and uvicorn's write buffer fill within moments while the fake upstream
streams a long answer as fast as Hearth takes it. With ``stream_send_timeout_s`` at 1 s every such
stream must be ended about a second after its buffer filled: connection dropped, upstream closed,
slots released, logged as 499 ``client_too_slow`` — while other callers are served as usual.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

import orjson
import pytest

from tests.support import ADMIN, AUTH, chat_body

# The stall timeout: long enough that fifty buffers fill before it cuts the first stream even on a slow,
# coverage-traced run (at 1 s the cuts sometimes began before the stall could be observed).
SEND_TIMEOUT_S = 2.0
SLOW_CLIENTS = 60
SLOTS = 50
CHUNKS = 4000  # ~0.8 MB per answer: far more than the kernel and uvicorn buffers of one connection hold


def _ep(name: str, base_url: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "provider": "openai-like", "base_url": base_url, "upstream_model": "up",
            "api_key": f"sk-key-of-{name}-abcdef", **extra}


def _registry(slow_url: str, other_url: str) -> dict[str, Any]:
    """Model ``m`` on endpoint ``a`` (50 slots, the one the slow clients stall); model ``other`` on ``b``."""
    return {
        "providers": [{"name": "openai-like", "kind": "openai"}],
        "endpoints": [_ep("a", slow_url, max_concurrency=SLOTS), _ep("b", other_url)],
        "models": [{"name": "m", "endpoints": ["a"]}, {"name": "other", "endpoints": ["b"]}],
        "callers": [{"name": "tester", "key": "test-key-123"}],
    }


def _request(port: int, body: dict[str, Any]) -> bytes:
    payload = orjson.dumps(body)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Authorization: {AUTH['Authorization']}\r\nContent-Length: {len(payload)}\r\n\r\n")
    return head.encode() + payload


_TCP_ESTABLISHED, _TCP_CLOSE = 1, 7  # tcpi_state values (linux/tcp_states.h); 7 after a reset


def _tcp_state(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]


async def _slow_reader(port: int, cut: list[tuple[float, int]], started: list[float]) -> None:
    """Ask for a stream, then read 25 bytes every 0.25 s until the server drops the connection.

    A reset connection keeps the bytes already in this socket's receive buffer readable (minutes of
    reading at this pace), so the drop is seen in the socket's TCP state instead.
    """
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # Before connect: a small window, and an Internet-sized segment. (Loopback's 64 KiB MSS would let the
    # server's kernel buffer a megabyte of the answer: its send buffer is sized from the congestion window.)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1400)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, _request(port, chat_body("go", stream=True)))
        first = True
        while (state := _tcp_state(sock)) == _TCP_ESTABLISHED:
            try:
                data = await asyncio.wait_for(loop.sock_recv(sock, 25), 15)
            except ConnectionResetError:
                state = _TCP_CLOSE
                break
            if not data:
                break
            if first:
                started.append(time.monotonic())
                first = False
            await asyncio.sleep(0.25)
        cut.append((time.monotonic(), state))
    finally:
        sock.close()


async def _write_buffers(server: Any) -> list[int]:
    """The write-buffer sizes of the server's open connections (uvicorn protocols' transports)."""
    connections = list(server._server.server_state.connections)
    return [c.transport.get_write_buffer_size() for c in connections if c.transport is not None]


async def _rows(http: Any, server: Any, want: int, **params: Any) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 5
    while True:
        data = (await http.get(server.base_url + "/api/v1/request-logs",
                               params={"limit": 500, **params}, headers=ADMIN)).json()["data"]
        if data["total"] >= want or time.monotonic() > deadline:
            return list(data["items"])
        await asyncio.sleep(0.05)


async def _in_flight(http: Any, server: Any, name: str) -> int:
    status = (await http.get(server.base_url + f"/api/v1/admin/endpoints/{name}/status", headers=ADMIN)).json()
    return int(status["data"]["scopes"][f"ep:{name}"]["in_flight"])


async def test_sixty_slow_readers_cannot_hold_fifty_slots(fake, fake2, hearth_server, http, caplog):
    caplog.set_level(logging.WARNING)
    server = hearth_server(_registry(fake.base_url, fake2.base_url), stream_send_timeout_s=SEND_TIMEOUT_S,
                           admission_wait_s=8.0)
    fake.set_defaults(chunks=CHUNKS, chunk_delay_ms=1)  # still streaming when the stall timeout strikes
    test_started = time.monotonic()
    cut: list[tuple[float, int]] = []
    started: list[float] = []
    readers = [asyncio.create_task(_slow_reader(server.port, cut, started)) for _ in range(SLOW_CLIENTS)]

    # All 50 slots end up held by streams whose clients do not keep up.
    deadline = time.monotonic() + 5
    while await _in_flight(http, server, "a") < SLOTS:
        assert time.monotonic() < deadline, "the slow clients never took all the slots"
        await asyncio.sleep(0.02)
    # Then their buffers fill: uvicorn pauses a stream's sends above its 64 KiB high-water mark (the kernel
    # keeps at most 16 KiB unsent on top). No connection holds more than that plus one write: nothing is queued
    # per stream beyond it. A write is the events of one upstream read (relay.py writes each read's events at
    # once), a few ~200-byte events here — more of them per read on a busy machine (66,711 bytes seen once, at
    # load 14), so the bound allows 8 KiB for that one write.
    deadline = time.monotonic() + 10
    while True:
        buffers = server.call(_write_buffers(server))
        assert max(buffers, default=0) <= 64 * 1024 + 8 * 1024, sorted(buffers)[-5:]
        if len([n for n in buffers if n >= 64 * 1024]) >= SLOTS - 5:  # (the first may be cut before the last)
            break
        assert time.monotonic() < deadline, "the streams never stalled"
        await asyncio.sleep(0.01)
    stalled_at = time.monotonic()

    # Callers of another endpoint are not slowed down by the stalled streams.
    for _ in range(5):
        t0 = time.monotonic()
        r = await http.post(server.base_url + "/v1/chat/completions", json={**chat_body(), "model": "other"},
                            headers=AUTH)
        assert r.status_code == 200
        assert time.monotonic() - t0 < SEND_TIMEOUT_S / 2  # never queued behind a stalled stream

    # A normal caller of the stalled endpoint waits for a slot, and gets one once the stall timeout ends the
    # slow streams (the 10 slow clients still waiting are admitted alongside, and stall in their turn).
    asked = time.monotonic()
    r = await http.post(server.base_url + "/v1/chat/completions", json=chat_body("normal"), headers=AUTH)
    served = time.monotonic()
    assert r.status_code == 200, r.text
    assert served - stalled_at < SEND_TIMEOUT_S + 3.0, (served - stalled_at, served - asked)

    await asyncio.wait_for(asyncio.gather(*readers), 10)  # every slow connection was dropped by the server
    assert len(cut) == SLOW_CLIENTS
    assert {state for _, state in cut} == {_TCP_CLOSE}  # reset, not a graceful end of the answer
    assert max(at for at, _ in cut) - test_started < 4 * SEND_TIMEOUT_S + 4.0

    # Slots released, upstreams closed, every slow stream logged as 499 client_too_slow.
    deadline = time.monotonic() + 2
    while (await _in_flight(http, server, "a")) or fake.stats.in_flight:
        assert time.monotonic() < deadline, (fake.stats, await _in_flight(http, server, "a"))
        await asyncio.sleep(0.05)
    assert fake.stats.disconnects == SLOW_CLIENTS
    rows = await _rows(http, server, SLOW_CLIENTS + 6, route="chat")
    slow = [row for row in rows if row["stream"]]
    assert len(slow) == SLOW_CLIENTS
    assert {(row["status"], row["error_code"]) for row in slow} == {(499, "client_too_slow")}
    # Nothing was logged as an error on the way (no unhandled exception, no incomplete-response complaint).
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR], caplog.text


@pytest.mark.parametrize("reads", [True, False])
async def test_a_client_that_keeps_reading_is_never_cut(reads, fake, hearth_server, http):
    """The send timeout bounds one blocked send, not the stream: a slow upstream (frames far apart) or a
    client that reads at its own pace within the timeout keeps its stream to the end."""
    registry = _registry(fake.base_url, fake.base_url)
    server = hearth_server(registry, stream_send_timeout_s=0.3)
    if reads:
        fake.set_defaults(chunks=3000)  # ~600 kB: the buffers fill, the client drains them, slower than Hearth
    else:
        fake.set_defaults(chunks=1, chunk_delay_ms=400)  # each frame comes later than the send timeout
    received = 0
    async with http.stream("POST", server.base_url + "/v1/chat/completions", json=chat_body(stream=True),
                           headers=AUTH) as r:
        assert r.status_code == 200
        async for chunk in r.aiter_raw(16384):
            received += len(chunk)
            if reads:
                await asyncio.sleep(0.005)
        tail = chunk
    assert tail.endswith(b"data: [DONE]\n\n")
    rows = await _rows(http, server, 1, route="chat")
    assert rows and rows[0]["status"] == 200 and rows[0]["error_code"] is None
