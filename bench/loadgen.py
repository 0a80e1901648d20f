"""Small load clients used by ``gateway_bench.py`` (run as a subprocess, pinned with ``taskset``).

Three modes, each printing one JSON object on stdout:

``ttft``
    One request at a time (concurrency 1) on one keep-alive connection with the blocking
    ``http.client``: for each streamed request, the time from just before the request is written
    until the first SSE event whose ``choices[0].delta.content`` is non-empty has been read
    (time to first token), and until the stream ended. Synchronous code keeps the client's own
    overhead small and identical for every target, so "through the gateway minus direct" is fair.

``latency``
    The same loop for non-stream requests: time until the whole JSON answer has been read. Raw
    samples (``wrk`` would apply its coordinated-omission correction, which adds synthetic samples
    after every stall and so changes the distribution a closed-loop client actually saw).

``closed``
    The fallback throughput generator when ``wrk`` is not installed: ``concurrency`` aiohttp
    workers in a closed loop, each reading every response completely. It is far more expensive per
    request than ``wrk`` and may itself be the bottleneck; ``gateway_bench.py`` reports which
    generator produced a number.

Only loopback URLs are accepted; every run is bounded by a duration and a request count.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import math
import sys
import time
from typing import Any
from urllib.parse import urlsplit

_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def percentiles(values: list[float], points: tuple[float, ...] = (50, 90, 99, 99.9)) -> dict[str, float]:
    """Nearest-rank percentiles of ``values`` (milliseconds in, milliseconds out)."""
    if not values:
        return {}
    ordered = sorted(values)
    out: dict[str, float] = {}
    for p in points:
        rank = max(1, math.ceil(p / 100 * len(ordered)))
        out[f"p{p:g}"] = ordered[rank - 1]
    out["mean"] = sum(ordered) / len(ordered)
    out["max"] = ordered[-1]
    return out


def _check_loopback(url: str) -> tuple[str, int, str]:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.scheme != "http" or host not in _LOOPBACK:
        raise SystemExit(f"refusing non-loopback URL: {url}")
    return host, parts.port or 80, parts.path or "/"


def _first_content(events: bytes) -> bool:
    """True when one of the complete SSE events in ``events`` carries a non-empty content delta."""
    for event in events.split(b"\n\n"):
        for line in event.split(b"\n"):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if not data or data == b"[DONE]":
                continue
            try:
                obj = json.loads(data)
            except ValueError:
                continue
            choices = obj.get("choices") if isinstance(obj, dict) else None
            if choices and isinstance(choices[0], dict):
                delta = choices[0].get("delta") or {}
                if isinstance(delta, dict) and delta.get("content"):
                    return True
    return False


def _one_stream(conn: http.client.HTTPConnection, path: str, body: bytes,
                headers: dict[str, str]) -> tuple[float, float, int]:
    """Send one streaming request; return (ttft_ms, total_ms, status)."""
    t0 = time.perf_counter()
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    if resp.status != 200:
        resp.read()
        return math.nan, (time.perf_counter() - t0) * 1000, resp.status
    ttft = math.nan
    pending = b""
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            break
        if math.isnan(ttft):
            pending += chunk.replace(b"\r\n", b"\n")
            cut = pending.rfind(b"\n\n")
            if cut >= 0:
                complete, pending = pending[:cut], pending[cut + 2:]
                if _first_content(complete):
                    ttft = (time.perf_counter() - t0) * 1000
    total = (time.perf_counter() - t0) * 1000
    return ttft, total, 200


def _one_plain(conn: http.client.HTTPConnection, path: str, body: bytes,
               headers: dict[str, str]) -> tuple[float, float, int]:
    """Send one non-stream request and read the whole answer; return (total_ms, total_ms, status)."""
    t0 = time.perf_counter()
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    resp.read()
    total = (time.perf_counter() - t0) * 1000
    return total, total, resp.status


def run_sequential(mode: str, url: str, body: bytes, headers: dict[str, str], duration: float, warmup: float,
                   max_requests: int) -> dict[str, Any]:
    """Concurrency 1 on one keep-alive connection: raw per-request samples, no correction applied."""
    host, port, path = _check_loopback(url)
    stream = mode == "ttft"
    one = _one_stream if stream else _one_plain
    accept = "text/event-stream" if stream else "application/json"
    hdrs = {"Content-Type": "application/json", "Accept": accept, **headers}
    conn = http.client.HTTPConnection(host, port, timeout=30)
    firsts: list[float] = []
    totals: list[float] = []
    errors = 0
    sent = 0
    warm_end = time.monotonic() + warmup
    while time.monotonic() < warm_end and sent < max_requests:
        one(conn, path, body, hdrs)
        sent += 1
    warmup_requests = sent
    end = time.monotonic() + duration
    started = time.monotonic()
    while time.monotonic() < end and sent < max_requests:
        sent += 1
        try:
            first, total, status = one(conn, path, body, hdrs)
        except (OSError, http.client.HTTPException):
            errors += 1
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=30)
            continue
        if status != 200 or math.isnan(first):
            errors += 1
            continue
        firsts.append(first)
        totals.append(total)
    elapsed = time.monotonic() - started
    conn.close()
    out: dict[str, Any] = {"mode": mode, "requests": len(totals), "errors": errors, "duration_s": elapsed,
                           "warmup_requests": warmup_requests}
    if stream:
        out["ttft_ms"] = percentiles(firsts)
        out["total_ms"] = percentiles(totals)
    else:
        out["latency_ms"] = percentiles(totals)
    return out


async def _closed(url: str, body: bytes, headers: dict[str, str], concurrency: int, duration: float,
                  max_requests: int) -> dict[str, Any]:
    import aiohttp

    _check_loopback(url)
    hdrs = {"Content-Type": "application/json", **headers}
    latencies: list[float] = []
    errors = 0
    budget = max_requests
    connector = aiohttp.TCPConnector(limit=concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        end = time.monotonic() + duration

        async def worker() -> None:
            nonlocal errors, budget
            while time.monotonic() < end and budget > 0:
                budget -= 1
                t0 = time.perf_counter()
                try:
                    async with session.post(url, data=body, headers=hdrs) as resp:
                        await resp.read()
                        ok = resp.status == 200
                except (aiohttp.ClientError, TimeoutError):
                    ok = False
                if ok:
                    latencies.append((time.perf_counter() - t0) * 1000)
                else:
                    errors += 1

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.monotonic() - started
    return {"mode": "closed", "requests": len(latencies), "errors": errors, "duration_s": elapsed,
            "latency_ms": percentiles(latencies)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("ttft", "latency", "closed"))
    ap.add_argument("--url", required=True)
    ap.add_argument("--body-file", required=True)
    ap.add_argument("--header", action="append", default=[], help="Name: value (repeatable)")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--max-requests", type=int, default=2_000_000)
    args = ap.parse_args(argv)
    with open(args.body_file, "rb") as fh:
        body = fh.read()
    headers: dict[str, str] = {}
    for item in args.header:
        name, _, value = item.partition(":")
        headers[name.strip()] = value.strip()
    if args.mode in ("ttft", "latency"):
        result = run_sequential(args.mode, args.url, body, headers, args.duration, args.warmup, args.max_requests)
    else:
        warm: dict[str, Any] = {"requests": 0, "errors": 0}
        if args.warmup > 0:
            warm = asyncio.run(_closed(args.url, body, headers, args.concurrency, args.warmup, args.max_requests))
        result = asyncio.run(_closed(args.url, body, headers, args.concurrency, args.duration,
                                     args.max_requests))
        result["warmup_requests"] = warm["requests"] + warm["errors"]
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
