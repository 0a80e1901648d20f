"""The Responses API and legacy completions against the chat route: the p50 each door adds at c=1.

One fake upstream, one Hearth (this tree, pinned to one core like gateway_bench.py), and four targets
measured with the same sequential client (``loadgen.py latency``: one keep-alive connection,
non-stream, raw samples), interleaved within each round so that the shared machine's drift hits all
of them alike:

* ``chat``: ``POST /v1/chat/completions`` (the reference);
* ``responses``: ``POST /v1/responses`` with ``store: false`` (translation only: the door's own cost);
* ``responses_stored``: ``POST /v1/responses`` as SDKs send it by default (``store`` true: one INSERT
  into the ``responses`` table per call, before the answer);
* ``completions``: legacy ``POST /v1/completions``.

It prints each round and, per door, the median of the per-round differences door − chat of the
p50s (the figure of issue 14's acceptance: ≤ 0.5 ms for the Responses route).

Usage: ``python bench/responses_bench.py [--rounds 5] [--seconds 4]``
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gateway_bench as gb

PROMPT = gb.PROMPT


@dataclass
class DoorTarget(gb.Target):
    """A target whose non-stream body is given (the door's own format)."""

    payload: dict[str, Any] = field(default_factory=dict)

    def body(self, stream: bool) -> dict[str, Any]:
        return {**self.payload, **({"stream": True} if stream else {})}


def _targets(port: int, proc: gb.Proc) -> dict[str, DoorTarget]:
    model = gb.PUBLIC_MODEL

    def door(name: str, path: str, payload: dict[str, Any]) -> DoorTarget:
        return DoorTarget(name=name, port=port, model=model, key=gb.CALLER_KEY, proc=proc, path=path,
                          payload={"model": model, **payload})

    return {
        "chat": door("chat", "/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
        "responses": door("responses", "/v1/responses", {"input": PROMPT, "store": False}),
        "responses_stored": door("responses_stored", "/v1/responses", {"input": PROMPT}),
        "completions": door("completions", "/v1/completions", {"prompt": PROMPT}),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=4)
    a = ap.parse_args(argv)
    args = gb.parse_args(["--quick", "--no-profile", "--skip-litellm"])
    args.duration, args.warmup = a.seconds, 1
    tmp = Path(tempfile.mkdtemp(prefix="hearth-responses-bench-"))
    env = gb.Env(args=args, tmp=tmp, procs=gb.ProcGroup(), sut_cpus=args.sut_cpus, upstream_cpus=args.upstream_cpus,
                 gen_cpus=args.gen_cpus, generator="python")
    try:
        fake_port = gb.free_port()
        env.fake = gb.start_fake(env, fake_port)
        config = tmp / "hearth.yaml"
        config.write_text(gb.hearth_yaml(fake_port))
        port = gb.free_port()
        proc, _ready = gb.start_hearth(env, port, gb.hearth_env(env, port, config, tmp / "hearth.db", None), "this")
        env.all_servers["this"] = proc
        targets = _targets(port, proc)
        for t in targets.values():  # each door answers 200 before it is timed
            status, raw = gb.http_post(port, t.path, t.body(False), {"Authorization": f"Bearer {gb.CALLER_KEY}"})
            if status != 200:
                raise SystemExit(f"{t.name}: {status} {raw[:300]!r}")
        p50: dict[str, list[float]] = {name: [] for name in targets}
        for r in range(a.rounds):
            order = list(targets) if r % 2 == 0 else list(targets)[::-1]
            for name in order:
                p50[name].append(gb.latency_run(env, targets[name])["latency_ms"]["p50"])
            gb.log(f"round {r}: " + ", ".join(f"{n}={v[-1]:.3f} ms" for n, v in p50.items()))
        print(report(p50))
    finally:
        env.procs.stop_all()
    return 0


def report(p50: dict[str, list[float]]) -> str:
    chat = p50["chat"]
    lines = ["| route | p50 at c=1 (median of rounds), ms | per-round p50 − chat's, ms | median, ms |",
             "|---|---:|---|---:|"]
    for name, values in p50.items():
        per = [v - c for v, c in zip(values, chat, strict=True)]
        lines.append(f"| {name} | {statistics.median(values):.3f} | {', '.join(f'{x:+.3f}' for x in per)} "
                     f"| {statistics.median(per):+.3f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
