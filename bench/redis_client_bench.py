"""Which Redis client should the state backend use? CPU per governed call, measured (issue 8).

A governed call (caller/tenant/user/IP limits, two budgets, a signed request's nonce, the endpoint
and its quota group) sends the Redis state backend exactly this, in order:

1. ``EVALSHA acquire.lua`` — every scope, both budget reservations, the nonce and the reservation key,
   the endpoint's cooldown and the epoch check, in one script (``RedisState.acquire``, called by
   ``gateway/caller_admission.py``);
2. ``GET <prefix>epoch`` — after the reservation's ledger commit (``BudgetLedger._superseded``; one
   per commit group, so one per call at c=1 and fewer under load — counted once per call here);
3. ``EVALSHA finish.lua`` — release the caller's and the endpoint's leases and settle both budgets
   (``RedisState.release_and_settle``, called by ``finish_caller``).

The bench drives **``RedisState`` itself** (the real Lua scripts, the real encoders of
``state/redis_scripts.py``, the real decoders) with its client swapped for each candidate, so every
candidate pays the same Python around it and sends byte-for-byte the same commands:

* ``resp``     — ``hearth.state.resp.RespClient`` (one pipelined connection, hiredis parser, a watchdog);
* ``redis-py`` — ``redis.asyncio.Redis`` (hiredis parser, its connection pool, ``socket_timeout`` =
  the state timeout, no retries: an admission script must never be sent twice);
* ``coredis``  — ``coredis.Redis`` (``stream_timeout`` = the state timeout, ``NoRetryPolicy``); not a
  Hearth dependency: ``pip install coredis`` into the venv for the bench only;
* ``none``     — no Redis at all: canned replies, i.e. the cost of RedisState's own Python (encoders,
  decoders, leases) plus the event loop. Subtract it to see what the client itself costs.

Measured per client, interleaved over ``--rounds`` (shuffled order each round), medians reported:

* c=1: ``--calls`` sequential governed calls; CPU per call = ``time.process_time()`` delta / calls (this
  process only: redis-server's own CPU is not in it), wall p50 of one call;
* c=64: the same number of calls in ``asyncio.gather`` batches of 64; CPU per call and calls/s;
  sockets open after the run (a pool opens one per concurrent command, resp.py shares one).

``--instructions`` also counts instructions per call with ``valgrind --tool=callgrind`` (total Ir of a
run with ``--calls`` calls minus a run with ``--calls``/5, divided by the difference), which the
machine's noise does not move; it takes a few minutes.

Everything runs on uvloop (as ``hearth serve`` does) against the machine's Redis (``--url``, default
``redis://127.0.0.1:6379/0``) under a unique key prefix; the keys are deleted afterwards.

Usage: ``python bench/redis_client_bench.py [--calls 3000] [--rounds 5] [--instructions] [--json FILE]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import re
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import uvloop

from hearth.state.base import BudgetCharge, Epoch, Scope
from hearth.state.redis import RedisState
from hearth.state.resp import RespClient, Script

CLIENTS = ("resp", "redis-py", "coredis", "none")
TIMEOUT_S = 2.0  # HEARTH_STATE_TIMEOUT_S default (a worker under valgrind gets --timeout 60)
CONNECT_TIMEOUT_S = 1.0  # RedisState's
HUGE = 10_000_000

# What the governance benchmark's governed caller takes per call (bench/governance_bench.py): limits on
# caller, tenant, user and IP; the endpoint and its quota group (gateway_bench's registry); two budgets.
CALLER_SCOPES = (
    Scope("caller:bench-gov", 10_000, HUGE, HUGE * 1000),
    Scope("tenant:bench-gov:tenant-1", 10_000, HUGE, HUGE * 1000),
    Scope("user:bench-gov:user-a", 10_000, HUGE, HUGE * 1000),
    Scope("ip:127.0.0.1", 10_000, HUGE, HUGE * 1000),
)
ENDPOINT_SCOPES = (Scope("ep:fake-1", 1000), Scope("qg:bench-account", 2000))
BUDGETS = (
    BudgetCharge("money:caller:bench-gov:2026-12-01", 10**15, 1_234, 2 * 86400),
    BudgetCharge("tokens:user:bench-gov:user-a:2026-12", 10**15, 300, 32 * 86400),
)
TOKENS = 300  # prompt upper bound + the scene's max_tokens_cap
ACTUAL_TOKENS = 40
REFUNDS = (1_000, 260)  # reserved minus actual


class Client(Protocol):
    """What RedisState asks of its client (RespClient's surface)."""

    async def run(self, script: Script, keys: list[str], args: list[Any]) -> Any: ...
    async def execute(self, *args: Any) -> Any: ...
    async def execute_many(self, *commands: tuple[Any, ...]) -> list[Any]: ...
    async def close(self) -> None: ...


class RedisPyClient:
    def __init__(self, url: str) -> None:
        import redis.asyncio as aioredis
        from redis.asyncio.retry import Retry
        from redis.backoff import NoBackoff
        from redis.exceptions import NoScriptError
        from redis.utils import HIREDIS_AVAILABLE

        assert HIREDIS_AVAILABLE, "redis-py without hiredis would not be a fair candidate"
        self._noscript = NoScriptError
        self._r = aioredis.Redis.from_url(url, socket_timeout=TIMEOUT_S, socket_connect_timeout=CONNECT_TIMEOUT_S,
                                          retry=Retry(NoBackoff(), 0), decode_responses=False)

    async def run(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        try:
            return await self._r.evalsha(script.sha, len(keys), *keys, *args)  # type: ignore[misc]
        except self._noscript:
            return await self._r.eval(script.body, len(keys), *keys, *args)  # type: ignore[misc]

    async def execute(self, *args: Any) -> Any:
        return await self._r.execute_command(*args)

    async def execute_many(self, *commands: tuple[Any, ...]) -> list[Any]:
        async with self._r.pipeline(transaction=False) as pipe:
            for c in commands:
                pipe.execute_command(*c)
            return await pipe.execute()  # type: ignore[no-any-return]

    async def close(self) -> None:
        await self._r.aclose()


class CoredisClient:
    def __init__(self, url: str) -> None:
        import coredis
        from coredis.exceptions import NoScriptError
        from coredis.retry import NoRetryPolicy

        self._noscript = NoScriptError
        self._r = coredis.Redis.from_url(url, stream_timeout=TIMEOUT_S, connect_timeout=CONNECT_TIMEOUT_S,
                                         retry_policy=NoRetryPolicy(), decode_responses=False)
        self._entered = False

    async def _ready(self) -> Any:
        if not self._entered:
            await self._r.__aenter__()
            self._entered = True
        return self._r

    async def run(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        r = await self._ready()
        try:
            return await r.evalsha(script.sha, keys=keys, args=args)
        except self._noscript:
            return await r.eval(script.body, keys=keys, args=args)

    async def execute(self, *args: Any) -> Any:
        r = await self._ready()
        name = args[0].lower() if isinstance(args[0], str) else args[0].decode().lower()
        if name == "get":
            return await r.get(args[1])
        if name == "time":
            return await r.time()
        raise NotImplementedError(name)

    async def execute_many(self, *commands: tuple[Any, ...]) -> list[Any]:
        return [await self.execute(*c) for c in commands]

    async def close(self) -> None:
        if self._entered:
            await self._r.__aexit__(None, None, None)


class CannedClient:
    """No Redis: the replies a governed call gets, so only RedisState's own Python is measured."""

    def __init__(self, epoch: bytes) -> None:
        self._epoch = epoch
        self._acquire_sha = b""

    async def run(self, script: Script, keys: list[str], args: list[Any]) -> Any:
        await asyncio.sleep(0)  # a real reply arrives in a later loop step
        if isinstance(args[0], int):  # finish (ARGV[1] = settle): settled, epoch, counters after
            return [1, self._epoch, 234, 40]
        if "|" in args[0]:  # install_epoch (ARGV[1] = the epoch)
            return self._epoch
        return [1, args[8], 1_234, 300]  # acquire: admitted, in minute ARGV[9], counters after the charge

    async def execute(self, *args: Any) -> Any:
        await asyncio.sleep(0)
        return self._epoch if args[0] == "GET" else [b"1", b"0"]

    async def execute_many(self, *commands: tuple[Any, ...]) -> list[Any]:
        return [await self.execute(*c) for c in commands]

    async def close(self) -> None:
        return None


def make_state(kind: str, url: str, prefix: str) -> RedisState:
    state = RedisState(url, prefix, command_timeout_s=TIMEOUT_S)
    if kind == "resp":
        return state
    client: Client
    if kind == "redis-py":
        client = RedisPyClient(url)
    elif kind == "coredis":
        client = CoredisClient(url)
    elif kind == "none":
        client = CannedClient(b"bench|0.000|0")
    else:
        raise ValueError(kind)
    state._redis = client  # type: ignore[assignment]
    return state


async def governed_call(state: RedisState, call_id: str) -> None:
    """The state-backend part of one governed call, as the gateway sends it."""
    res = await state.acquire(call_id, CALLER_SCOPES + ENDPOINT_SCOPES, TOKENS, 60.0,
                              cooldown_keys=("ep:fake-1",), budgets=BUDGETS,
                              once=((f"nonce:bench-gov:{call_id}", 300.0),), deadline=time.time() + TIMEOUT_S,
                              check_epoch=True)
    assert res.lease is not None, res.refusal
    caller_lease, endpoint_lease = res.lease.split(len(CALLER_SCOPES))
    epoch = await state.read_epoch()  # the check after the reservation's ledger commit
    assert epoch == state.epoch
    settled = await state.release_and_settle(caller_lease, ACTUAL_TOKENS, REFUNDS, ((endpoint_lease, ACTUAL_TOKENS),))
    assert settled


def open_sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return n


async def measure(kind: str, url: str, prefix: str, calls: int, concurrency: int, tag: str,
                  warm: int | None = None) -> dict[str, Any]:
    sockets_at_start = open_sockets()
    state = make_state(kind, url, prefix)
    try:
        await state.install_epoch(Epoch("bench", 0.0, 0), {}, (), 60.0)
        warm = warm if warm is not None else max(64, calls // 10)
        for i in range(0, warm, concurrency):  # connections dialled, scripts loaded, caches warm
            await asyncio.gather(*(governed_call(state, f"{tag}w{i + j}") for j in range(min(concurrency, warm - i))))
        lat: list[float] = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if concurrency == 1:
            for i in range(calls):
                t = time.perf_counter()
                await governed_call(state, f"{tag}{i}")
                lat.append(time.perf_counter() - t)
        else:
            for i in range(0, calls, concurrency):
                await asyncio.gather(*(governed_call(state, f"{tag}{i + j}")
                                       for j in range(min(concurrency, calls - i))))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        out: dict[str, Any] = {"cpu_us_per_call": cpu / calls * 1e6, "calls_per_s": calls / wall,
                               "sockets": open_sockets() - sockets_at_start}
        if lat:
            out["wall_p50_us"] = statistics.median(lat) * 1e6
            out["wall_p99_us"] = sorted(lat)[int(len(lat) * 0.99)] * 1e6
        return out
    finally:
        await state.close()


async def delete_prefix(url: str, prefix: str) -> int:
    client = RespClient(url)
    deleted, cursor = 0, b"0"
    try:
        while True:
            cursor, keys = await client.execute("SCAN", cursor, "MATCH", prefix + "*", "COUNT", 1000)
            if keys:
                deleted += await client.execute("DEL", *keys)
            if cursor in (b"0", 0):
                return deleted
    finally:
        await client.close()


def available(kind: str) -> str | None:
    """Why ``kind`` cannot be measured here, or None."""
    if kind == "coredis":
        try:
            import coredis  # noqa: F401
        except ImportError:
            return "coredis is not installed (pip install coredis into the venv; it is not a Hearth dependency)"
    return None


def versions() -> dict[str, str]:
    out = {"python": platform.python_version(), "uvloop": uvloop.__version__}
    for mod in ("redis", "hiredis", "coredis"):
        with contextlib.suppress(ImportError):
            out[mod] = __import__(mod).__version__
    return out


def redis_server_version(url: str) -> str:
    async def info() -> str:
        c = RespClient(url)
        try:
            raw = await c.execute("INFO", "server")
        finally:
            await c.close()
        m = re.search(rb"redis_version:(\S+)", raw)
        return m.group(1).decode() if m else "?"

    return uvloop.run(info())


def run_rounds(args: argparse.Namespace, kinds: list[str], prefix: str) -> dict[str, Any]:
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {k: {"c1": [], "c64": []} for k in kinds}
    rng = random.Random(args.seed)
    for r in range(args.rounds):
        order = kinds[:]
        rng.shuffle(order)
        for kind in order:
            for scen, conc in (("c1", 1), ("c64", 64)):
                tag = f"{r}{kind[0]}{scen}-{secrets.token_hex(3)}-"
                res = uvloop.run(measure(kind, args.url, prefix, args.calls, conc, tag))
                runs[kind][scen].append(res)
                print(f"round {r + 1} {kind:9s} {scen}: {res['cpu_us_per_call']:7.1f} µs CPU/call, "
                      f"{res['calls_per_s']:7.0f} calls/s" + (f", p50 {res['wall_p50_us']:6.0f} µs"
                                                              if "wall_p50_us" in res else "")
                      + f", sockets {res['sockets']}", flush=True)
    return runs


def summarize(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for kind, scens in runs.items():
        row: dict[str, float] = {}
        for scen, results in scens.items():
            if not results:
                continue
            for key in ("cpu_us_per_call", "calls_per_s", "wall_p50_us", "wall_p99_us", "sockets"):
                vals = [res[key] for res in results if key in res]
                if vals:
                    row[f"{scen}_{key}"] = statistics.median(vals)
            row[f"{scen}_cpu_spread"] = (max(r["cpu_us_per_call"] for r in results)
                                         - min(r["cpu_us_per_call"] for r in results))
        out[kind] = row
    return out


# ---- instruction counts ---------------------------------------------------------------------------------


def worker(args: argparse.Namespace) -> int:
    """One measurement in this process (the target of ``valgrind``, ~50x slower: timeouts are widened)."""
    global TIMEOUT_S, CONNECT_TIMEOUT_S
    TIMEOUT_S = CONNECT_TIMEOUT_S = args.timeout
    prefix = f"bench-rc-{os.getpid()}-{secrets.token_hex(4)}:"
    try:
        uvloop.run(measure(args.worker, args.url, prefix, args.calls, args.concurrency, "v", warm=64))
    finally:
        uvloop.run(delete_prefix(args.url, prefix))
    return 0


def callgrind_ir(kind: str, url: str, calls: int, concurrency: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        for attempt in range(3):  # under valgrind a call is ~50x slower: a rare stall can hit the 2 s timeout
            done = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                                   __file__, "--worker", kind, "--calls", str(calls), "--concurrency",
                                   str(concurrency), "--url", url, "--timeout", "60"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode == 0:
                break
            tail = [ln for ln in done.stderr.splitlines() if not ln.startswith("==")][-3:]
            print(f"callgrind run {kind} c={concurrency} n={calls} failed (attempt {attempt + 1}): {tail}")
        else:
            raise RuntimeError(f"callgrind runs of {kind} keep failing")
        m = re.search(r"^(?:summary|totals): (\d+)", out.read_text(errors="replace"), re.M)
        assert m, "no totals in the callgrind output"
        return int(m.group(1))


def instructions(kinds: list[str], url: str, calls: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    small = max(64, calls // 5)
    for kind in kinds:
        row: dict[str, float] = {}
        for scen, conc in (("c1", 1), ("c64", 64)):
            big_ir, small_ir = callgrind_ir(kind, url, calls, conc), callgrind_ir(kind, url, small, conc)
            row[f"{scen}_instructions_per_call"] = (big_ir - small_ir) / (calls - small)
            print(f"instructions {kind:9s} {scen}: {row[f'{scen}_instructions_per_call']:,.0f} per call", flush=True)
        out[kind] = row
    return out


# ---- report -------------------------------------------------------------------------------------------


def table(summary: dict[str, dict[str, float]], ir: dict[str, dict[str, float]]) -> str:
    base_c1 = summary.get("none", {}).get("c1_cpu_us_per_call", 0.0)
    base_c64 = summary.get("none", {}).get("c64_cpu_us_per_call", 0.0)
    lines = ["| client | c=1 CPU µs/call | c=1 client-only µs | c=1 wall p50 µs | c=64 CPU µs/call "
             "| c=64 client-only µs | c=64 calls/s | c=64 sockets | instructions/call c=1 / c=64 |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in [k for k in CLIENTS if k in summary or k in ir]:
        row = summary.get(kind) or dict.fromkeys(
            ("c1_cpu_us_per_call", "c1_cpu_spread", "c64_cpu_us_per_call", "c64_cpu_spread", "c64_calls_per_s",
             "c64_sockets"), float("nan"))
        i = ir.get(kind, {})
        irs = (f"{i['c1_instructions_per_call'] / 1e3:,.0f} k / {i['c64_instructions_per_call'] / 1e3:,.0f} k"
               if i else "—")
        lines.append(
            f"| {kind} | {row['c1_cpu_us_per_call']:.1f} (±{row['c1_cpu_spread'] / 2:.1f}) "
            f"| {row['c1_cpu_us_per_call'] - base_c1:.1f} | {row.get('c1_wall_p50_us', 0):.0f} "
            f"| {row['c64_cpu_us_per_call']:.1f} (±{row['c64_cpu_spread'] / 2:.1f}) "
            f"| {row['c64_cpu_us_per_call'] - base_c64:.1f} | {row['c64_calls_per_s']:,.0f} "
            f"| {row['c64_sockets']:.0f} | {irs} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--calls", type=int, default=3000, help="governed calls per measurement")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--clients", default=",".join(CLIENTS))
    p.add_argument("--seed", type=int, default=8)
    p.add_argument("--instructions", action="store_true", help="also count instructions with callgrind")
    p.add_argument("--instruction-calls", type=int, default=1000)
    p.add_argument("--json", type=Path, help="write the raw results here")
    p.add_argument("--worker", choices=CLIENTS, help=argparse.SUPPRESS)
    p.add_argument("--concurrency", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--timeout", type=float, default=TIMEOUT_S, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    kinds = []
    for kind in args.clients.split(","):
        why = available(kind)
        if why:
            print(f"skipping {kind}: {why}")
        else:
            kinds.append(kind)
    prefix = f"bench-rc-{os.getpid()}-{secrets.token_hex(4)}:"
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    load0 = os.getloadavg()
    try:
        runs = run_rounds(args, kinds, prefix)
    finally:
        print(f"deleted {uvloop.run(delete_prefix(args.url, prefix))} keys under {prefix}")
    summary = summarize(runs)
    ir = instructions([k for k in kinds], args.url, args.instruction_calls) if args.instructions else {}
    meta = {"date": started, "loadavg_start": load0, "loadavg_end": os.getloadavg(), "cpus": os.cpu_count(),
            "cpu_model": next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                               if ln.startswith("model name")), "?"),
            "versions": versions(), "redis_server": redis_server_version(args.url),
            "calls": args.calls, "rounds": args.rounds}
    print(json.dumps(meta))
    print(table(summary, ir))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "runs": runs, "summary": summary, "instructions": ir},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
