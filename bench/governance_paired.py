"""Governed vs plain Hearth, paired: CPU per request and req/s at c=64 in interleaved short runs.

``governance_bench.py`` reports medians of three 10 s rounds per configuration; on a shared machine
the plain configuration alone moved by ±20 % between rounds. This script starts two configurations
of that bench once (same fake upstream, same CPU pinning, the governed one with signed requests),
then alternates 4 s ``wrk -c64`` runs between them ``--rounds`` times and reports, per round, each
one's Hearth CPU time per completed request (``/proc/<pid>/stat``: user + system of all its threads)
and req/s, and the ratio of each pair — a reading that survives the machine's drift.

Usage: ``python bench/governance_paired.py [--rounds 5] [--configs gov-memory,plain-memory] [--hearth-env K=V]``
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import tempfile
from pathlib import Path

import gateway_bench as gb
import governance_bench as g


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=4)
    ap.add_argument("--configs", default="gov-memory,plain-memory",
                    help="two of governance_bench's configurations (memory state only: no Redis is started)")
    ap.add_argument("--hearth-env", action="append", default=[], metavar="HEARTH_X=VALUE",
                    help="a setting for both Hearth processes (repeatable), e.g. HEARTH_REQUEST_LOG_BATCH=100")
    a = ap.parse_args(argv)
    names = a.configs.split(",")
    if len(names) != 2 or any(n.endswith("-redis") or n not in g.CONFIGS for n in names):
        ap.error("--configs takes two memory-state configurations of governance_bench.py")
    args = g.parse_args(["--quick", "--no-profile"])
    args.hearth_env = list(a.hearth_env)
    tmp = Path(tempfile.mkdtemp(prefix="hearth-gov-paired-"))
    env = g.GovEnv(args=args, tmp=tmp, procs=gb.ProcGroup(), sut_cpus=args.sut_cpus, upstream_cpus=args.upstream_cpus,
                   gen_cpus=args.gen_cpus, generator="wrk", signing_key=secrets.token_hex(32))
    with contextlib.suppress(OSError, ValueError):
        os.sched_setaffinity(0, {int(c) for c in args.gen_cpus.split(",")})
    try:
        fake_port = gb.free_port()
        env.fake = gb.start_fake(env, fake_port)
        config = tmp / "hearth.yaml"
        config.write_text(g.governance_registry(fake_port, env.signing_key))
        cfgs = {n: g.start_config(env, n, config, None) for n in names}

        def load(cfg: g.Config, seconds: int) -> dict[str, float]:
            if cfg.governed:
                return g.signed_wrk(env, cfg, seconds, False)
            return gb.run_wrk(env, cfg.target, stream=False, concurrency=64, duration=seconds, gen_cpus=env.gen_cpus)

        for cfg in cfgs.values():
            load(cfg, 2)  # warm-up
        cpu: dict[str, list[float]] = {n: [] for n in names}
        rps: dict[str, list[float]] = {n: [] for n in names}
        for r in range(a.rounds):
            for n in names if r % 2 == 0 else names[::-1]:
                cfg = cfgs[n]
                before = gb.proc_cpu_s(cfg.proc.pid)
                res = load(cfg, a.seconds)
                cpu_s = gb.proc_cpu_s(cfg.proc.pid) - before
                cpu[n].append(cpu_s / max(1, res["requests"]) * 1e6)
                rps[n].append(res["rps"])
        for n in names:
            print(f"{n:14s} CPU µs/request {[round(x) for x in cpu[n]]} median {statistics.median(cpu[n]):.0f}"
                  f" | req/s {[round(x) for x in rps[n]]} median {statistics.median(rps[n]):.0f}")
        first, second = names
        cpu_ratio = [b / a_ for a_, b in zip(cpu[first], cpu[second], strict=True)]
        rps_ratio = [a_ / b for a_, b in zip(rps[first], rps[second], strict=True)]
        print(f"CPU per request, {second} ÷ {first}: {[round(x, 3) for x in cpu_ratio]} "
              f"median {statistics.median(cpu_ratio):.3f}")
        print(f"req/s, {first} ÷ {second}: {[round(x, 3) for x in rps_ratio]} "
              f"median {statistics.median(rps_ratio):.3f}")
    finally:
        env.procs.stop_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
