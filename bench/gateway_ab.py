"""This tree's gateway against another tree's, paired: the four figures of gateway_bench.py, interleaved.

``gateway_bench.py`` measures one tree in 10 s rounds; on this shared machine the direct-to-fake
figure alone moved by 40 % between two runs minutes apart, so comparing a run with a figure recorded
another day (or an hour earlier) cannot show a 5 % change. This script starts one fake upstream and
two Hearths at once — this tree and ``--other-src`` (another checkout's ``src``, e.g. from
``git worktree add /tmp/old <commit>``), both pinned to the same core — and alternates short runs
between them, ``--rounds`` times, for each figure:

* non-stream c=64 (wrk): req/s, and Hearth CPU per request (``/proc``, all threads);
* stream c=64 (wrk, 20 chunks): streams/s and CPU per stream;
* non-stream c=1 (sequential client): p50 latency;
* stream c=1: time to first token p50.

It prints each round and, per figure, the median of the per-round ratios other ÷ this (for req/s and
streams/s) or this − other (for latencies). Direct-to-fake is measured too, once per round, so the
ratios of gateway_bench.py can be formed.

``--other-python`` runs the other Hearth with another interpreter (a venv's ``bin/python`` with Hearth's
dependencies installed), on ``--other-src`` or this tree's ``src``: the same code on two Pythons.

Usage: ``python bench/gateway_ab.py --other-src /tmp/old/src [--rounds 5] [--seconds 4]``
or ``python bench/gateway_ab.py --other-python /tmp/py311/bin/python``
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

import gateway_bench as gb


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other-src", type=Path, help="the other tree's src directory (default: this tree's)")
    ap.add_argument("--other-python", type=Path, help="the interpreter of the other Hearth (default: this .venv's)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=4)
    a = ap.parse_args(argv)
    if a.other_src is None and a.other_python is None:
        ap.error("give --other-src, --other-python or both")
    other_src = (a.other_src or Path(__file__).resolve().parents[1] / "src").resolve()
    if not (other_src / "hearth" / "__init__.py").exists():
        ap.error(f"{other_src} has no hearth package")
    other_argv = [str(a.other_python), "-m", "hearth"] if a.other_python is not None else None
    args = gb.parse_args(["--quick", "--no-profile", "--skip-litellm"])
    args.duration, args.warmup = a.seconds, 1
    tmp = Path(tempfile.mkdtemp(prefix="hearth-gw-ab-"))
    env = gb.Env(args=args, tmp=tmp, procs=gb.ProcGroup(), sut_cpus=args.sut_cpus, upstream_cpus=args.upstream_cpus,
                 gen_cpus=args.gen_cpus, generator="wrk")
    try:
        fake_port = gb.free_port()
        env.fake = gb.start_fake(env, fake_port)
        config = tmp / "hearth.yaml"
        config.write_text(gb.hearth_yaml(fake_port))
        targets: dict[str, gb.Target] = {}
        for label, src in (("this", None), ("other", other_src)):
            port = gb.free_port()
            henv = gb.hearth_env(env, port, config, tmp / f"{label}.db", None)
            if src is not None:
                henv["PYTHONPATH"] = os.pathsep.join(p for p in (str(src), henv.get("PYTHONPATH")) if p)
            proc, _ready = gb.start_hearth(env, port, henv, label, other_argv if src is not None else None)
            env.all_servers[label] = proc
            targets[label] = gb.Target(name="hearth", port=port, model=gb.PUBLIC_MODEL, key=gb.CALLER_KEY, proc=proc)
        direct = gb.Target(name="direct", port=fake_port, model=gb.UPSTREAM_MODEL, key="not-checked-by-the-fake",
                           proc=None)
        results: dict[str, dict[str, list[float]]] = {n: {} for n in (*targets, "direct")}

        def note(name: str, figure: str, value: float) -> None:
            results[name].setdefault(figure, []).append(value)

        for t in targets.values():  # warm-up
            gb.run_wrk(env, t, stream=False, concurrency=64, duration=2, gen_cpus=env.gen_cpus)
        for r in range(a.rounds):
            order = list(targets) if r % 2 == 0 else list(targets)[::-1]
            for name in order:
                t = targets[name]
                assert t.proc is not None
                for stream, figure in ((False, "c64"), (True, "streams")):
                    before = gb.proc_cpu_s(t.proc.pid)
                    res = gb.run_wrk(env, t, stream=stream, concurrency=64, duration=a.seconds, gen_cpus=env.gen_cpus)
                    cpu_s = gb.proc_cpu_s(t.proc.pid) - before
                    note(name, figure, res["rps"])
                    note(name, figure + "_cpu_us", cpu_s / max(1, res["requests"]) * 1e6)
                note(name, "c1_p50_ms", gb.latency_run(env, t)["latency_ms"]["p50"])
                note(name, "ttft_p50_ms", gb.ttft_run(env, t)["ttft_ms"]["p50"])
            for stream, figure in ((False, "c64"), (True, "streams")):
                res = gb.run_wrk(env, direct, stream=stream, concurrency=64, duration=a.seconds, gen_cpus=env.sut_cpus)
                note("direct", figure, res["rps"])
            note("direct", "c1_p50_ms", gb.latency_run(env, direct)["latency_ms"]["p50"])
            note("direct", "ttft_p50_ms", gb.ttft_run(env, direct)["ttft_ms"]["p50"])
            gb.log(f"round {r}: " + "; ".join(f"{n} " + ", ".join(f"{k}={v[-1]:.3f}" for k, v in results[n].items())
                                              for n in results))
        print(report(results))
    finally:
        env.procs.stop_all()
    return 0


def report(results: dict[str, dict[str, list[float]]]) -> str:
    this, other, direct = results["this"], results["other"], results["direct"]
    lines = ["| figure | other (median) | this (median) | per-round comparison | median |", "|---|---:|---:|---|---:|"]

    def row(figure: str, label: str, ratio: bool) -> None:
        if ratio:
            per = [t / o for t, o in zip(this[figure], other[figure], strict=True)]
            how = "this ÷ other"
        else:
            per = [t - o for t, o in zip(this[figure], other[figure], strict=True)]
            how = "this − other"
        lines.append(f"| {label} | {statistics.median(other[figure]):.3f} | {statistics.median(this[figure]):.3f} "
                     f"| {how}: {', '.join(f'{x:.3f}' for x in per)} | {statistics.median(per):.3f} |")

    row("c64", "non-stream c=64 req/s", True)
    row("c64_cpu_us", "CPU µs per request at c=64", True)
    row("streams", "stream c=64 streams/s", True)
    row("streams_cpu_us", "CPU µs per stream at c=64", True)
    added = {n: [h - d for h, d in zip(results[n]["c1_p50_ms"], direct["c1_p50_ms"], strict=True)]
             for n in ("this", "other")}
    ttft = {n: [h - d for h, d in zip(results[n]["ttft_p50_ms"], direct["ttft_p50_ms"], strict=True)]
            for n in ("this", "other")}
    results["this"]["added_ms"], results["other"]["added_ms"] = added["this"], added["other"]
    results["this"]["ttft_over_ms"], results["other"]["ttft_over_ms"] = ttft["this"], ttft["other"]
    row("added_ms", "added p50 at c=1 over direct, ms", False)
    row("ttft_over_ms", "TTFT overhead p50 over direct, ms", False)
    lines.append(f"\ndirect to fake (medians): c=64 {statistics.median(direct['c64']):,.0f} req/s, "
                 f"{statistics.median(direct['streams']):,.0f} streams/s, c=1 p50 "
                 f"{statistics.median(direct['c1_p50_ms']):.3f} ms, "
                 f"TTFT {statistics.median(direct['ttft_p50_ms']):.3f} ms")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
