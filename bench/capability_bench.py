"""The capability API's cost over the gateway, and the response cache's gain (issue 9), loopback only.

One Hearth (memory state, SQLite), one fake upstream, three targets on the same Hearth:

* ``chat`` — ``POST /v1/chat/completions`` with exactly the messages the built-in summary prompt renders
  for the text (so the upstream sees the same request);
* ``summarize`` — ``POST /api/v1/ai/summarize`` with that text (prompt resolved, rendered, answer checked,
  envelope, a capability request-log row on top of the call's own);
* ``cached`` — the same summarize in a scene with ``cache_ttl_s``: after the first request every answer
  comes from the cache.

c=64 throughput with ``wrk`` (rounds interleaved) and c=1 latency with the sequential client, as in
``gateway_bench.py`` (Hearth pinned to one core, the fake and the generators on the other). Reported:
summarize ÷ chat req/s at c=64 (target ≥ 60 %), summarize − chat p50 at c=1 (target ≤ 1 ms), and
cached ÷ summarize req/s at c=64 (target ≥ 3×).

Usage: ``python bench/capability_bench.py [--quick]``
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gateway_bench as gb

TEXT = ("Hearth is a self-hosted AI capability service. Business systems call it instead of model providers. "
        "It governs every call with limits and budgets, and it keeps a log of each one.")
SUMMARY_PROMPT = ("Summarize the following text in {n} sentences or fewer, in the text's own language. Keep facts, "
                  "numbers and names exact; add nothing.\n\n{text}")


@dataclass
class CapabilityTarget(gb.Target):
    payload: dict[str, Any] | None = None

    def body(self, stream: bool) -> dict[str, Any]:
        assert self.payload is not None
        return self.payload


def registry(upstream_port: int) -> str:
    return json.dumps({
        "providers": [{"name": "fake", "kind": "openai", "base_url": f"http://{gb.HOST}:{upstream_port}/v1"}],
        "endpoints": [{"name": "fake-1", "provider": "fake", "upstream_model": gb.UPSTREAM_MODEL,
                       "api_key": gb.UPSTREAM_KEY, "max_concurrency": 10_000}],
        "models": [{"name": gb.PUBLIC_MODEL, "endpoints": ["fake-1"]}],
        "prices": [{"model": gb.UPSTREAM_MODEL, "input_per_1m": 1.0, "output_per_1m": 2.0}],
        "scenes": [{"name": "cached", "default_model": gb.PUBLIC_MODEL, "cache_ttl_s": 3600}],
        "callers": [{"name": "bench", "key": gb.CALLER_KEY}],
    })


def targets(port: int, proc: gb.Proc) -> list[CapabilityTarget]:
    messages = [{"role": "user", "content": SUMMARY_PROMPT.format(n=3, text=TEXT)}]
    common = {"port": port, "model": gb.PUBLIC_MODEL, "key": gb.CALLER_KEY, "proc": proc}
    return [
        CapabilityTarget("chat", **common, payload={"model": gb.PUBLIC_MODEL, "messages": messages}),
        CapabilityTarget("summarize", **common, path="/api/v1/ai/summarize",
                         payload={"text": TEXT, "model": gb.PUBLIC_MODEL}),
        CapabilityTarget("cached", **common, path="/api/v1/ai/summarize", payload={"text": TEXT, "scene": "cached"}),
    ]


def check(target: CapabilityTarget) -> dict[str, Any]:
    status, raw = gb.http_post(target.port, target.path, target.body(False),
                               {"Authorization": f"Bearer {target.key}"})
    if status != 200:
        raise RuntimeError(f"{target.name}: HTTP {status}: {raw[:300]!r}")
    body = json.loads(raw)
    if target.name == "chat":
        return {"status": status}
    return {"status": status, "cache_hit": body["data"]["cache_hit"], "prompt": body["data"]["prompt_code"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 s runs, 1 round")
    a = ap.parse_args(argv)
    args = gb.parse_args(["--quick", "--no-profile"] if a.quick else ["--no-profile"])
    args.hearth_env = []
    tmp = Path(tempfile.mkdtemp(prefix="hearth-capability-bench-"))
    env = gb.Env(args=args, tmp=tmp, procs=gb.ProcGroup(), sut_cpus=args.sut_cpus, upstream_cpus=args.upstream_cpus,
                 gen_cpus=args.gen_cpus, generator="wrk")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    started = datetime.now(UTC)
    try:
        fake_port, port = gb.free_port(), gb.free_port()
        env.fake = gb.start_fake(env, fake_port)
        config = tmp / "hearth.yaml"
        config.write_text(registry(fake_port))  # JSON is YAML
        henv = gb.hearth_env(env, port, config, tmp / "hearth.db", None)
        henv["HEARTH_MASTER_KEY"] = secrets.token_hex(32)
        proc, _ = gb.start_hearth(env, port, henv, "capability")
        env.all_servers = {"hearth": proc, "fake": env.fake}
        ts = targets(port, proc)
        checks = {t.name: check(t) for t in ts}
        gb.log(f"checks: {checks}")
        for r in range(args.rounds):
            for t in ts if r % 2 == 0 else ts[::-1]:
                thr = gb.throughput_run(env, t, stream=False, concurrency=64)
                lat = gb.latency_run(env, t)
                results.setdefault(t.name, {}).setdefault("c64", []).append(thr)
                results[t.name].setdefault("c1", []).append(lat)
                gb.log(f"{t.name:10s} r{r} c64 {thr['rps']:,.0f}/s errors={thr['errors']} | c1 p50 "
                       f"{lat['latency_ms']['p50']:.3f} ms | hearth cpu {thr['cpu_pct_of_one_core']['hearth']}%")
    finally:
        env.procs.stop_all()

    def rps(name: str) -> float:
        return statistics.median(x["rps"] for x in results[name]["c64"])

    def p50(name: str) -> float:
        return statistics.median(x["latency_ms"]["p50"] for x in results[name]["c1"])

    summary = {
        "run": f"cap-{started:%Y%m%d-%H%M%S}", "machine": gb.machine_info(), "rounds": args.rounds,
        "duration_s": args.duration, "checks": checks,
        "c64_rps": {n: round(rps(n)) for n in results}, "c1_p50_ms": {n: round(p50(n), 3) for n in results},
        "summarize_over_chat_c64": round(rps("summarize") / rps("chat"), 3),
        "summarize_added_p50_c1_ms": round(p50("summarize") - p50("chat"), 3),
        "cached_over_summarize_c64": round(rps("cached") / rps("summarize"), 2),
        "by_round": {n: [round(x["rps"]) for x in results[n]["c64"]] for n in results},
    }
    verdicts = {"summarize ÷ chat at c=64 ≥ 60 %": summary["summarize_over_chat_c64"] >= 0.6,
                "summarize added p50 at c=1 ≤ 1 ms": summary["summarize_added_p50_c1_ms"] <= 1.0,
                "cache hit ≥ 3× the uncached rate": summary["cached_over_summarize_c64"] >= 3.0}
    summary["targets"] = {k: "met" if v else "MISSED" for k, v in verdicts.items()}
    gb.RESULTS.mkdir(exist_ok=True)
    out = gb.RESULTS / f"{summary['run']}.json"
    out.write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps({k: v for k, v in summary.items() if k != "machine"}, indent=1, default=str))
    gb.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
