"""The images door's cost at c=1 (issue 14), loopback only: ``/v1/images/generations`` against the chat route.

One Hearth (memory state, SQLite) pinned to CPU 0, the fake upstream and the sequential client on CPU 1;
five targets, rounds interleaved (order reversed every other round), each a c=1 latency run of non-stream
requests:

* ``chat`` — ``POST /v1/chat/completions`` through Hearth (the fake's 20-piece answer);
* ``images`` — ``POST /v1/images/generations`` through Hearth, one 64x64 image, ``b64_json``;
* ``images_url`` — the same with ``response_format: url``: the PNG also goes into the local blob store
  (written to a temporary file, fsynced, renamed) and a signed URL is made;
* ``direct_chat`` and ``direct_images`` — the same two requests straight to the fake upstream.

The fake does different work for a chat answer and an image, so the route's own cost is the overhead over
direct: (images − direct_images) against (chat − direct_chat), each the difference of the medians of the
rounds' p50s. The raw difference images − chat is reported too.

Usage: ``python bench/images_bench.py [--quick] [--rounds N] [--duration S]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gateway_bench as gb

IMAGE_MODEL = "bench-image"
IMAGE_BODY = {"model": IMAGE_MODEL, "prompt": "A poster for the benchmark", "size": "64x64"}


@dataclass
class BodyTarget(gb.Target):
    payload: dict[str, Any] | None = None

    def body(self, stream: bool) -> dict[str, Any]:
        assert self.payload is not None
        return self.payload


def registry(upstream_port: int) -> str:
    return json.dumps({
        "providers": [{"name": "fake", "kind": "openai", "base_url": f"http://{gb.HOST}:{upstream_port}/v1"}],
        "endpoints": [{"name": "fake-1", "provider": "fake", "upstream_model": gb.UPSTREAM_MODEL,
                       "api_key": gb.UPSTREAM_KEY, "max_concurrency": 10_000},
                      {"name": "fake-image", "provider": "fake", "upstream_model": "fake-image",
                       "api_key": gb.UPSTREAM_KEY, "capabilities": ["images"], "image_sizes": ["64x64"]}],
        "models": [{"name": gb.PUBLIC_MODEL, "endpoints": ["fake-1"]},
                   {"name": IMAGE_MODEL, "kind": "image", "endpoints": ["fake-image"]}],
        "prices": [{"model": gb.UPSTREAM_MODEL, "input_per_1m": 1.0, "output_per_1m": 2.0},
                   {"model": "fake-image", "input_per_1m": 0, "output_per_1m": 0, "per_image": 0.04}],
        "callers": [{"name": "bench", "key": gb.CALLER_KEY}],
    })


def targets(port: int, fake_port: int, proc: gb.Proc) -> list[BodyTarget]:
    chat = {"model": gb.PUBLIC_MODEL, "messages": [{"role": "user", "content": gb.PROMPT}]}
    b64 = {**IMAGE_BODY, "response_format": "b64_json"}
    hearth = {"port": port, "model": gb.PUBLIC_MODEL, "key": gb.CALLER_KEY, "proc": proc}
    direct = {"port": fake_port, "model": gb.UPSTREAM_MODEL, "key": gb.UPSTREAM_KEY, "proc": None}
    images = "/v1/images/generations"
    return [
        BodyTarget("chat", **hearth, payload=chat),
        BodyTarget("images", **hearth, path=images, payload=b64),
        BodyTarget("images_url", **hearth, path=images, payload={**IMAGE_BODY, "response_format": "url"}),
        BodyTarget("direct_chat", **direct, payload={**chat, "model": gb.UPSTREAM_MODEL}),
        BodyTarget("direct_images", **direct, path=images, payload={**b64, "model": "fake-image"}),
    ]


def check(target: BodyTarget) -> dict[str, Any]:
    status, raw = gb.http_post(target.port, target.path, target.body(False),
                               {"Authorization": f"Bearer {target.key}"})
    if status != 200:
        raise RuntimeError(f"{target.name}: HTTP {status}: {raw[:300]!r}")
    body = json.loads(raw)
    if "data" in body:
        return {"status": status, "images": len(body["data"]), "fields": sorted(body["data"][0])}
    return {"status": status}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="3 s runs, 1 round")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--duration", type=int, default=None)
    a = ap.parse_args(argv)
    passed = ["--quick", "--no-profile"] if a.quick else ["--no-profile"]
    if a.rounds is not None:
        passed += ["--rounds", str(a.rounds)]
    if a.duration is not None:
        passed += ["--duration", str(a.duration)]
    args = gb.parse_args(passed)
    tmp = Path(tempfile.mkdtemp(prefix="hearth-images-bench-"))
    env = gb.Env(args=args, tmp=tmp, procs=gb.ProcGroup(), sut_cpus=args.sut_cpus, upstream_cpus=args.upstream_cpus,
                 gen_cpus=args.gen_cpus, generator="python")
    results: dict[str, list[dict[str, Any]]] = {}
    started = datetime.now(UTC)
    try:
        fake_port, port = gb.free_port(), gb.free_port()
        env.fake = gb.start_fake(env, fake_port)
        config = tmp / "hearth.yaml"
        config.write_text(registry(fake_port))  # JSON is YAML
        henv = gb.hearth_env(env, port, config, tmp / "hearth.db", None)
        henv["HEARTH_DOCUMENT_DIR"] = str(tmp / "blobs")
        proc, _ = gb.start_hearth(env, port, henv, "images")
        env.all_servers = {"hearth": proc, "fake": env.fake}
        ts = targets(port, fake_port, proc)
        checks = {t.name: check(t) for t in ts}
        gb.log(f"checks: {checks}")
        for r in range(args.rounds):
            for t in ts if r % 2 == 0 else ts[::-1]:
                lat = gb.latency_run(env, t)
                results.setdefault(t.name, []).append(lat)
                gb.log(f"{t.name:14s} r{r} c1 p50 {lat['latency_ms']['p50']:.3f} ms p99 "
                       f"{lat['latency_ms']['p99']:.3f} ms ({lat['requests']} requests, {lat['errors']} errors)")
    finally:
        env.procs.stop_all()

    def p50(name: str) -> float:
        return statistics.median(x["latency_ms"]["p50"] for x in results[name])

    chat_added = p50("chat") - p50("direct_chat")
    images_added = p50("images") - p50("direct_images")
    summary = {
        "run": f"images-{started:%Y%m%d-%H%M%S}", "machine": gb.machine_info(), "rounds": args.rounds,
        "duration_s": args.duration, "checks": checks,
        "c1_p50_ms": {n: round(p50(n), 3) for n in results},
        "c1_p50_by_round_ms": {n: [round(x["latency_ms"]["p50"], 3) for x in results[n]] for n in results},
        "errors": {n: sum(x["errors"] for x in results[n]) for n in results},
        "hearth_added_p50_ms": {"chat": round(chat_added, 3), "images": round(images_added, 3),
                                "images_url": round(p50("images_url") - p50("direct_images"), 3)},
        "images_route_over_chat_route_p50_ms": round(images_added - chat_added, 3),
        "images_minus_chat_raw_p50_ms": round(p50("images") - p50("chat"), 3),
    }
    gb.RESULTS.mkdir(exist_ok=True)
    out = gb.RESULTS / f"{summary['run']}.json"
    out.write_text(json.dumps(summary, indent=1, default=str))
    print(json.dumps({k: v for k, v in summary.items() if k != "machine"}, indent=1, default=str))
    gb.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
