"""What governance costs per request, in instructions (valgrind callgrind): governed vs plain Hearth.

``governance_bench.py`` compares a governed Hearth with a plain one in requests per second, but on this
shared machine paired runs of the two vary by ±15 % from round to round, so a change to the governed
call's cost smaller than that can be neither shown nor ruled out from seconds. An instruction count is far
steadier: callgrind counts every instruction Hearth's process executes (all threads), whatever else the
machine is doing (but see below for what still moves it).

The two configurations are governance_bench.py's ``plain-memory`` and ``gov-memory`` (memory state, no
Redis): one registry (``governance_bench.governance_registry``: gateway_bench's registry plus the governed
caller with ``require_signature``, limits on caller, tenant, user and IP, a scene with ``max_tokens_cap``
and two budgets reserved and settled on every call), the same Hearth environment (SQLite, request logging
on, log level info). ``plain-memory`` requests carry only the plain caller's key; ``gov-memory`` requests
carry the governed caller's key, ``X-Hearth-Scene``, one of four users in ``X-Hearth-User``, one of two
tenants in ``X-Hearth-Tenant`` and the signature headers, signed with a fresh nonce by the client right
before each request is sent (the client is another process, so signing is not counted; verifying is).

For each configuration (and, with ``--other-src``, the governed one of each other tree) the script starts
the fake upstream (natively) and ``hearth serve`` under ``valgrind --tool=callgrind --instr-atstart=no``
with the wall-clock background loops off (``gateway_instructions.QUIET``) and a fixed ``PYTHONHASHSEED``,
sends ``--warmup`` requests, switches instrumentation on, sends ``--requests`` non-stream requests from
``--concurrency`` keep-alive blocking clients, switches it off and reads the total. Every request must be
answered 200 (and a governed one carry ``x-hearth-budget``); a run with any other answer is reported and
the script exits non-zero.

Not as steady as the plain gateway's count. The warm-up is 400 requests, not gateway_instructions.py's 40:
after 40, whether the SQLite writers first open their thread and connection (a thread start and a schema
parse, ~11 M instructions, with the slower write path around it) falls inside the window or not decides
the governed figure by ~5 % (1.94–1.99 M vs 2.05–2.10 M per request at c=4); ``thread_started`` in
each line says whether a thread started while measured. And the writers that flush on a timer (request
logs every 0.5 s, ledger settlements every 0.2 s) pay a cost per batch, so their share follows the window's
wall-clock length (a loaded machine: more, smaller batches; under valgrind far more batches per request
than natively). Runs of the same configuration agreed within ~0.5–1.5 % here, once 3.4 % (plain, 1,200
requests): compare trees with a few runs each, not one.

Instructions are not seconds (cache misses, system calls and waiting are not in them): the difference
gov − plain is the work a governed call adds on Hearth's side, not its latency.

Usage: ``python bench/governance_instructions.py [--requests 400] [--concurrency 4] [--warmup 400]
[--hash-seed 0|random] [--other-src /tmp/old/src ...]``
(``git worktree add --detach /tmp/old <commit>`` gives another tree).
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import re
import secrets
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import gateway_bench as gb
import gateway_instructions as gi
import governance_bench as g

from hearth.auth.signing import signed_headers

CONFIGS = ("plain-memory", "gov-memory")
WARMUP = 400
# a function callgrind names only if it ran while measured: a thread was started (a SQLite writer's, a pool's)
THREAD_STARTED = re.compile(r"^c?fn=\(\d+\) start_thread$", re.M)


def _load(port: int, *, governed: bool, signing_key: str, total: int, concurrency: int) -> list[str]:
    """Send ``total`` requests from ``concurrency`` keep-alive clients; a description of each failure."""
    payload = g.body_bytes()
    counter = itertools.count()
    failures: list[str] = []
    lock = threading.Lock()

    def headers() -> dict[str, str]:
        if not governed:
            return {"Authorization": f"Bearer {gb.CALLER_KEY}", "Content-Type": "application/json"}
        i = next(counter)
        return {"Authorization": f"Bearer {g.GOV_KEY}", "Content-Type": "application/json",
                "X-Hearth-Scene": g.SCENE, "X-Hearth-User": g.USERS[i % len(g.USERS)],
                "X-Hearth-Tenant": g.TENANTS[i % len(g.TENANTS)],
                **signed_headers(signing_key, "POST", g.PATH, payload)}  # fresh timestamp and nonce

    def client(count: int) -> None:
        conn = http.client.HTTPConnection(gb.HOST, port, timeout=120)
        for _ in range(count):
            try:
                conn.request("POST", g.PATH, payload, headers())
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                with lock:
                    failures.append(f"{type(exc).__name__}: {exc}")
                conn.close()
                conn = http.client.HTTPConnection(gb.HOST, port, timeout=120)
                continue
            if resp.status != 200:
                with lock:
                    failures.append(f"{resp.status}: {data[:300]!r}")
            elif governed and resp.getheader("x-hearth-budget") is None:
                with lock:
                    failures.append("200 without x-hearth-budget: no budget was reserved")
        conn.close()

    threads = [threading.Thread(target=client, args=(total // concurrency,)) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failures


def measure(config: str, src: Path | None, *, requests: int, concurrency: int, warmup: int = WARMUP,
            hash_seed: str | None = "0") -> dict[str, Any]:
    """Instructions per request of ``config`` in the tree whose ``src`` is given (None: this tree)."""
    governed = config.startswith("gov-")
    tmp = Path(tempfile.mkdtemp(prefix="hearth-gov-instr-"))
    signing_key = secrets.token_hex(32)
    fake_port, port = gb.free_port(), gb.free_port()
    registry = tmp / "hearth.yaml"
    registry.write_text(g.governance_registry(fake_port, signing_key))
    env = gi.quiet_env(registry, tmp, port)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    if hash_seed is None:
        env.pop("PYTHONHASHSEED", None)
    else:
        env["PYTHONHASHSEED"] = hash_seed
    started = time.monotonic()
    with gi.fake_upstream(fake_port), gi.hearth_under_callgrind(env, tmp, port) as hearth:
        warm_failures = _load(port, governed=governed, signing_key=signing_key, total=warmup,
                              concurrency=concurrency)  # not counted
        gi.instrument(hearth.pid, True)
        window = time.monotonic()
        failures = _load(port, governed=governed, signing_key=signing_key, total=requests, concurrency=concurrency)
        window = time.monotonic() - window
        gi.instrument(hearth.pid, False)
    outputs = list(tmp.glob("callgrind.out*"))
    total = sum(gi.callgrind_totals(f) for f in outputs)
    thread_started = any(THREAD_STARTED.search(f.read_text(errors="replace")) for f in outputs)
    sent = requests // concurrency * concurrency
    return {"config": config, "tree": str(src or gi.ROOT / "src"), "requests": sent,
            "failed": len(failures), "failed_warmup": len(warm_failures),
            "failures": (warm_failures + failures)[:10], "instructions": total, "per_request": total // sent,
            "thread_started": thread_started, "hash_seed": hash_seed, "warmup": warmup,
            "measured_s": round(window, 1), "wall_s": round(time.monotonic() - started, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--other-src", type=Path, action="append", default=[],
                    help="another tree's src whose governed configuration is measured too (repeatable)")
    ap.add_argument("--requests", type=int, default=400, help="measured requests per configuration")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=WARMUP, help="uncounted requests before each measurement")
    ap.add_argument("--hash-seed", default="0", help="PYTHONHASHSEED of the Hearth processes ('random': unset)")
    a = ap.parse_args(argv)
    if a.requests < a.concurrency or a.concurrency < 1:
        ap.error("--requests must be at least --concurrency, and --concurrency at least 1")
    runs: list[tuple[str, Path | None]] = [(c, None) for c in CONFIGS]
    runs += [("gov-memory", p.resolve()) for p in a.other_src]
    rows = []
    for config, tree in runs:
        r = measure(config, tree, requests=a.requests, concurrency=a.concurrency, warmup=a.warmup,
                    hash_seed=None if a.hash_seed == "random" else a.hash_seed)
        rows.append(r)
        print(json.dumps(r), flush=True)
    bad = [r for r in rows if r["failed"] or r["failed_warmup"]]
    for r in bad:
        print(f"FAILED: {r['config']} ({r['tree']}): {r['failed']} measured and {r['failed_warmup']} warm-up "
              f"requests not answered 200, e.g. {r['failures']}", file=sys.stderr)
    plain = rows[0]["per_request"]
    print("\n| configuration | tree | instructions / request | gov − plain (per governed call) | gov ÷ plain |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        extra = ("| — | — |" if r["config"] == "plain-memory"
                 else f"| {r['per_request'] - plain:+,} | {r['per_request'] / plain:.3f} |")
        print(f"| {r['config']} | {r['tree']} | {r['per_request']:,} {extra}")
    if a.other_src:
        print("\n(gov − plain for another tree is taken against this tree's plain-memory.)")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
