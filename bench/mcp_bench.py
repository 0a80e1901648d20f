"""MCP gateway benchmark: ``tools/call`` through Hearth's ``/mcp`` vs straight to the upstream MCP server.

One run starts, on loopback only, an upstream MCP server (``python -m hearth.testing.mcp_upstream``: the
official SDK's server over Streamable HTTP, JSON answers, a bearer token) and Hearth (``hearth serve``, one
worker, SQLite in a temp dir, memory state, the upstream registered under ``mcp_servers:`` with an allow
rule, audit on). The client is the official SDK's ``Client`` (Streamable HTTP), one session to each target.

At concurrency 1 it calls ``echo`` alternately through Hearth and directly (the order flips every round, so
drift on this shared machine hits both alike), after a warm-up, and reports each target's p50/p90/p99 and
the difference of the medians — Hearth's overhead per call (its own hop: authenticate, validate, authorize,
audit, re-forward on the pooled upstream session).

With ``--chat`` it then measures the chat route the same way (Hearth vs the fake upstream, non-stream, c=1,
interleaved): on a busy shared machine the two hops' overheads side by side say more than either alone.

Usage: ``python bench/mcp_bench.py [--calls 2000] [--warmup 200] [--chat]``
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import gateway_bench as gb
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

CALLER_KEY = "bench-key-0123456789"
UPSTREAM_TOKEN = "bench-upstream-token-0123"


def hearth_yaml(upstream_port: int, fake_port: int) -> str:
    return f"""\
providers:
  - name: fake
    kind: openai
    base_url: http://{gb.HOST}:{fake_port}/v1
endpoints:
  - name: fake-1
    provider: fake
    upstream_model: {gb.UPSTREAM_MODEL}
    api_key: {gb.UPSTREAM_KEY}
    max_concurrency: 1000
models:
  - name: {gb.PUBLIC_MODEL}
    endpoints: [fake-1]
callers:
  - name: bench
    key: {CALLER_KEY}
mcp_servers:
  - name: up
    url: http://{gb.HOST}:{upstream_port}/mcp
    credential: {UPSTREAM_TOKEN}
    rules:
      - effect: allow
        callers: [bench]
        tools: [echo]
        arguments:
          text: {{max_length: 64}}
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _chat(session: aiohttp.ClientSession, url: str, key: str, model: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20}
    async with session.post(url, json=body, headers={"Authorization": f"Bearer {key}"}) as response:
        await response.read()
        if response.status != 200:
            raise RuntimeError(f"chat: HTTP {response.status}")


async def measure_chat(hearth_port: int, fake_port: int, calls: int, warmup: int) -> dict[str, list[float]]:
    """The chat route's own hop in the same conditions (c=1, interleaved): Hearth vs the fake upstream."""
    targets = {"chat via Hearth": (f"http://{gb.HOST}:{hearth_port}/v1/chat/completions", CALLER_KEY,
                                   gb.PUBLIC_MODEL),
               "chat direct": (f"http://{gb.HOST}:{fake_port}/v1/chat/completions", gb.UPSTREAM_KEY,
                               gb.UPSTREAM_MODEL)}
    out: dict[str, list[float]] = {name: [] for name in targets}
    async with aiohttp.ClientSession() as session:
        for _ in range(warmup):
            for url, key, model in targets.values():
                await _chat(session, url, key, model)
        names = list(targets)
        for i in range(calls):
            for name in (names if i % 2 == 0 else names[::-1]):
                started = time.perf_counter()
                await _chat(session, *targets[name])
                out[name].append((time.perf_counter() - started) * 1000)
    return out


async def measure(hearth_url: str, direct_url: str, calls: int, warmup: int) -> dict[str, list[float]]:
    async with (httpx2.AsyncClient(headers={"Authorization": f"Bearer {CALLER_KEY}"}, timeout=30) as h_http,
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {UPSTREAM_TOKEN}"}, timeout=30) as d_http,
                Client(streamable_http_client(hearth_url, http_client=h_http), mode="legacy") as via_hearth,
                Client(streamable_http_client(direct_url, http_client=d_http), mode="legacy") as direct):
        clients = {"hearth": (via_hearth, "up__echo"), "direct": (direct, "echo")}
        for _ in range(warmup):
            for client, tool in clients.values():
                await client.call_tool(tool, {"text": "warm"})
        out: dict[str, list[float]] = {"hearth": [], "direct": []}
        for i in range(calls):
            order = ("hearth", "direct") if i % 2 == 0 else ("direct", "hearth")
            for name in order:
                client, tool = clients[name]
                started = time.perf_counter()
                result = await client.call_tool(tool, {"text": "hi"})
                out[name].append((time.perf_counter() - started) * 1000)
                if result.is_error:
                    raise RuntimeError(f"{name}: the call failed: {result}")
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per target (interleaved)")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--chat", action="store_true", help="also measure the chat route vs the fake upstream (after "
                    "the MCP calls, same processes), to tell the machine's load from the MCP hop's own cost")
    args = ap.parse_args()
    procs = gb.ProcGroup()
    with tempfile.TemporaryDirectory(prefix="hearth-mcp-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        try:
            up_port, hearth_port, fake_port = gb.free_port(), gb.free_port(), gb.free_port()
            fake = procs.start("fake-upstream", [*gb.hearth_argv(), "fake-upstream", "--host", gb.HOST, "--port",
                                                 str(fake_port), "--latency-ms", "0"],
                               env=dict(gb.os.environ), log_path=tmp / "fake.log", cwd=gb.ROOT, cpus=None)
            upstream = procs.start("mcp-upstream", [sys.executable, "-m", "hearth.testing.mcp_upstream", "--port",
                                                    str(up_port), "--token", UPSTREAM_TOKEN],
                                   env=dict(gb.os.environ), log_path=tmp / "upstream.log", cwd=gb.ROOT, cpus=None)
            _wait_port(up_port, upstream)
            config = tmp / "hearth.yaml"
            _wait_port(fake_port, fake)
            config.write_text(hearth_yaml(up_port, fake_port))
            env = {k: v for k, v in gb.os.environ.items() if not k.startswith("HEARTH_")}
            env.update({"HEARTH_CONFIG": str(config), "HEARTH_HOST": gb.HOST, "HEARTH_PORT": str(hearth_port),
                        "HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'hearth.db'}",
                        "HEARTH_MASTER_KEY": secrets.token_hex(32), "HEARTH_LOG_LEVEL": "warning"})
            hearth = procs.start("hearth", [*gb.hearth_argv(), "serve"], env=env, log_path=tmp / "hearth.log",
                                 cwd=gb.ROOT, cpus=None)
            gb.wait_http_ok(hearth, hearth_port, "/healthz", timeout=60)  # no model: /readyz says not ready
            lat = asyncio.run(measure(f"http://{gb.HOST}:{hearth_port}/mcp", f"http://{gb.HOST}:{up_port}/mcp",
                                      args.calls, args.warmup))
            chat = asyncio.run(measure_chat(hearth_port, fake_port, args.calls, args.warmup)) if args.chat else {}
        finally:
            procs.stop_all()
    h, d = lat["hearth"], lat["direct"]
    p50h, p50d = statistics.median(h), statistics.median(d)
    info = gb.machine_info()
    print(f"# MCP tools/call, c=1, {args.calls} calls per target interleaved, {datetime.now(UTC):%Y-%m-%d %H:%M} "
          f"UTC, {info['cpu_model']} ({info['nproc']} CPUs), load at start {info['loadavg_at_start']}")
    print("| target | p50 ms | p90 ms | p99 ms |")
    print("|---|---|---|---|")
    for name, values in (("through Hearth", h), ("direct", d)):
        print(f"| {name} | {statistics.median(values):.3f} | {percentile(values, 0.9):.3f} | "
              f"{percentile(values, 0.99):.3f} |")
    for name, values in chat.items():
        print(f"| {name} (non-stream, for comparison) | {statistics.median(values):.3f} | "
              f"{percentile(values, 0.9):.3f} | {percentile(values, 0.99):.3f} |")
    print(f"\nHearth overhead (difference of medians): {p50h - p50d:.3f} ms per MCP tools/call")
    if chat:
        added = statistics.median(chat["chat via Hearth"]) - statistics.median(chat["chat direct"])
        print(f"The chat route's own overhead in the same conditions: {added:.3f} ms per call")


def _wait_port(port: int, proc: gb.Proc, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            raise RuntimeError(f"{proc.name} exited: {proc.log_path.read_text(errors='replace')[-2000:]}")
        try:
            with gb.socket.create_connection((gb.HOST, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"{proc.name} did not listen on {port}")


if __name__ == "__main__":
    main()
