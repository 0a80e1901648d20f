"""Messages door overhead: ``POST /v1/messages`` vs ``POST /v1/chat/completions`` at concurrency 1, one run.

Both routes reach the same model (an OpenAI-compatible endpoint on the fake upstream, 20 chunks, no
latency), so the difference is what the door adds: the Anthropic request translated into the core's
chat body, the answer (or each stream event) translated back, and the header checks. Started here,
on loopback: the fake upstream (``hearth fake-upstream``) and one Hearth (``hearth serve``, SQLite,
memory state), pinned as in ``gateway_bench.py`` (Hearth on ``--sut-cpus``, the fake on
``--upstream-cpus``; the client runs on the upstream core too).

The machine is shared, so the two routes are measured *interleaved*: request after request, one of
each in turn on two keep-alive connections, and the overhead is the difference of the two medians
over the same period. Reported: p50 (and p90) per route, non-stream and stream (a stream fully read),
and the difference. Target (issue 14): ≤ 0.5 ms p50 added on the non-stream call.

Also reported, in-process and so immune to the machine's noise: the CPU the door's own work takes per
call (``translation_us``): the request translated, the answer translated back, and for a stream the 20
chunk frames re-parsed and told as Anthropic events — the difference between the two routes apart from
the header checks.

With ``--instructions`` it counts instead, with valgrind's callgrind, the instructions Hearth executes
per request on each route (as ``gateway_instructions.py`` does for the chat route): a figure the
machine's noise cannot move. One ``hearth serve`` under callgrind; each route's requests are counted
between a zeroing and a dump of the counters, alternately, ``--rounds`` times.

Usage: ``python bench/messages_bench.py [--requests 3000] [--warmup 300] [--instructions]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gateway_bench as gb
import gateway_instructions as gi
import orjson

from hearth.api.anthropic_stream import relay_payloads
from hearth.testing.fake_upstream import CREATED, reply_pieces
from hearth.wire.anthropic_reply import ChunkEvents, chat_to_message
from hearth.wire.anthropic_request import messages_to_chat
from hearth.wire.sse import SSEParser

PROMPT = "Say hello to the benchmark in one short sentence, please."
TARGET_MS = 0.5


def registry(upstream_port: int) -> str:
    return json.dumps({
        "providers": [{"name": "fake", "kind": "openai", "base_url": f"http://{gb.HOST}:{upstream_port}/v1"}],
        "endpoints": [{"name": "fake-1", "provider": "fake", "upstream_model": gb.UPSTREAM_MODEL,
                       "api_key": gb.UPSTREAM_KEY, "max_concurrency": 1000}],
        "models": [{"name": gb.PUBLIC_MODEL, "endpoints": ["fake-1"]}],
        "prices": [{"model": gb.UPSTREAM_MODEL, "input_per_1m": 0.15, "output_per_1m": 0.60}],
        "callers": [{"name": "bench", "key": gb.CALLER_KEY}],
    })


ROUTES: dict[str, tuple[str, dict[str, str], dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"Authorization": f"Bearer {gb.CALLER_KEY}"},
             {"model": gb.PUBLIC_MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": PROMPT}]}),
    "messages": ("/v1/messages", {"x-api-key": gb.CALLER_KEY, "anthropic-version": "2023-06-01"},
                 {"model": gb.PUBLIC_MODEL, "max_tokens": 100, "messages": [{"role": "user", "content": PROMPT}]}),
}


class Route:
    """One route on its own keep-alive connection: each call's wall time, the whole answer read."""

    def __init__(self, port: int, name: str, stream: bool) -> None:
        path, headers, body = ROUTES[name]
        self.name = name
        self.path = path
        self.headers = {"Content-Type": "application/json", **headers}
        self.body = json.dumps({**body, "stream": True} if stream else body).encode()
        self.conn = http.client.HTTPConnection(gb.HOST, port, timeout=30)
        self.times_ms: list[float] = []

    def _exchange(self) -> tuple[http.client.HTTPResponse, bytes]:
        self.conn.request("POST", self.path, body=self.body, headers=self.headers)
        resp = self.conn.getresponse()
        return resp, resp.read()

    def call(self, record: bool) -> None:
        start = time.perf_counter()
        try:
            resp, data = self._exchange()
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # the server closed a connection left idle (under callgrind the other route's turn is slow)
            self.conn.close()
            start = time.perf_counter()
            resp, data = self._exchange()
        elapsed = (time.perf_counter() - start) * 1000
        if resp.status != 200 or not data:
            raise RuntimeError(f"{self.name}: HTTP {resp.status}: {data[:300]!r}")
        if record:
            self.times_ms.append(elapsed)

    def close(self) -> None:
        self.conn.close()


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q * 100) - 1]


def measure(port: int, *, stream: bool, requests: int, warmup: int) -> dict[str, Any]:
    routes = [Route(port, name, stream) for name in ROUTES]
    try:
        for i in range(warmup + requests):
            for route in routes if i % 2 == 0 else routes[::-1]:  # neither route always goes first
                route.call(record=i >= warmup)
    finally:
        for route in routes:
            route.close()
    out: dict[str, Any] = {r.name: {"p50_ms": round(statistics.median(r.times_ms), 4),
                                    "p90_ms": round(quantile(r.times_ms, 0.9), 4)} for r in routes}
    out["added_p50_ms"] = round(out["messages"]["p50_ms"] - out["chat"]["p50_ms"], 4)
    return out


def _best_us(fn: Any, repeat: int = 7, number: int = 2000) -> float:
    """The fastest of ``repeat`` timings of ``number`` calls, per call in µs (the least disturbed one)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, (time.perf_counter() - start) / number)
    return round(best * 1e6, 2)


def translation_cost() -> dict[str, float]:
    """CPU per call of what only the Messages door does, with the bench's request and the fake's answers."""
    request = {**ROUTES["messages"][2]}
    answer = orjson.dumps({"id": "chatcmpl-fake-1", "object": "chat.completion", "created": CREATED,
                           "model": gb.PUBLIC_MODEL, "choices": [{"index": 0, "finish_reason": "stop", "message": {
                               "role": "assistant", "content": "".join(reply_pieces(gb.CHUNKS))}}],
                           "usage": {"prompt_tokens": 15, "completion_tokens": 20, "total_tokens": 35}})
    chunks = [{"role": "assistant", "content": ""}, *({"content": p} for p in reply_pieces(gb.CHUNKS))]
    frames = b"".join(b"data: " + orjson.dumps({"id": "chatcmpl-fake-1", "object": "chat.completion.chunk",
                                                "created": CREATED, "model": gb.PUBLIC_MODEL,
                                                "choices": [{"index": 0, "delta": d, "finish_reason": None}]})
                      + b"\n\n" for d in chunks) + b"data: [DONE]\n\n"

    def nonstream() -> None:
        messages_to_chat(request)
        orjson.dumps(chat_to_message(orjson.loads(answer), message_id="msg_1", model=gb.PUBLIC_MODEL))

    def stream() -> None:
        messages_to_chat({**request, "stream": True})
        events = ChunkEvents("msg_1", gb.PUBLIC_MODEL, 15)
        for payload in relay_payloads(frames, SSEParser()):
            events.finish() if payload == b"[DONE]" else events.feed(payload)

    return {"nonstream": _best_us(nonstream), "stream_20_chunks": _best_us(stream, number=500)}


def _totals(path: Path) -> int:
    return sum(int(line.split()[1]) for line in path.read_text(errors="replace").splitlines()
               if line.startswith("totals:"))


def instructions(*, stream: bool, requests: int, rounds: int) -> dict[str, Any]:
    """Instructions per request of each route, counted in one ``hearth serve`` under callgrind."""
    tmp = Path(tempfile.mkdtemp(prefix="hearth-messages-instr-"))
    fake_port, port = gb.free_port(), gb.free_port()
    fake = subprocess.Popen([*gb.hearth_argv(), "fake-upstream", "--host", gb.HOST, "--port", str(fake_port),
                             "--latency-ms", "0", "--chunks", str(gb.CHUNKS)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = tmp / "hearth.yaml"
    config.write_text(registry(fake_port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update(gi.QUIET, HEARTH_CONFIG=str(config), HEARTH_HOST=gb.HOST, HEARTH_PORT=str(port),
               HEARTH_DATABASE_URL=f"sqlite+aiosqlite:///{tmp}/hearth.db", HEARTH_STATE_BACKEND="memory",
               HEARTH_MASTER_KEY=secrets.token_hex(32), HEARTH_LOG_LEVEL="info")
    out = tmp / "callgrind.out"
    counts: dict[str, list[int]] = {name: [] for name in ROUTES}
    hearth: subprocess.Popen[bytes] | None = None
    try:
        subprocess.run([str(gi.PY), "-m", "hearth", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
        with open(tmp / "hearth.log", "wb") as log_file:
            hearth = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                       f"--callgrind-out-file={out}", str(gi.PY), "-m", "hearth", "serve"],
                                      env=env, stdout=log_file, stderr=subprocess.STDOUT)
        gi._wait_ready(port, hearth, timeout=600)
        routes = {name: Route(port, name, stream) for name in ROUTES}
        for route in routes.values():
            for _ in range(40):  # warm-up, not counted
                route.call(record=False)
        control = ["callgrind_control"]
        for r in range(rounds):
            for name in (list(ROUTES) if r % 2 == 0 else list(ROUTES)[::-1]):
                subprocess.run([*control, "-z", str(hearth.pid)], check=True, stdout=subprocess.DEVNULL)
                subprocess.run([*control, "-i", "on", str(hearth.pid)], check=True, stdout=subprocess.DEVNULL)
                for _ in range(requests):
                    routes[name].call(record=False)
                subprocess.run([*control, "-i", "off", str(hearth.pid)], check=True, stdout=subprocess.DEVNULL)
                before = set(tmp.glob("callgrind.out*"))
                subprocess.run([*control, "-d", str(hearth.pid)], check=True, stdout=subprocess.DEVNULL)
                dumped = set(tmp.glob("callgrind.out*")) - before
                counts[name].append(sum(_totals(f) for f in dumped) // requests)
                gb.log(f"{'stream' if stream else 'non-stream'} {name} r{r}: {counts[name][-1]:,} instructions")
        for route in routes.values():
            route.close()
    finally:
        if hearth is not None:
            hearth.terminate()
            hearth.wait(120)
        fake.terminate()
        fake.wait(10)
    result: dict[str, Any] = {name: {"per_request": round(statistics.median(c)), "rounds": c}
                              for name, c in counts.items()}
    added = result["messages"]["per_request"] - result["chat"]["per_request"]
    result["added_per_request"] = added
    result["added_pct"] = round(100 * added / result["chat"]["per_request"], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000, help="measured calls per route and kind (default 3000)")
    ap.add_argument("--warmup", type=int, default=300, help="unmeasured calls per route first (default 300)")
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind instead")
    ap.add_argument("--rounds", type=int, default=2, help="--instructions: alternations of the two routes")
    a = ap.parse_args(argv)
    if a.instructions:
        counted = {kind: instructions(stream=kind == "stream", requests=min(a.requests, 200), rounds=a.rounds)
                   for kind in ("nonstream", "stream")}
        print(json.dumps({"machine": gb.machine_info(), **counted}, indent=1))
        return 0
    args = gb.parse_args(["--no-profile"])
    args.hearth_env = []
    tmp = Path(tempfile.mkdtemp(prefix="hearth-messages-bench-"))
    env = gb.Env(args=args, tmp=tmp, procs=gb.ProcGroup(), sut_cpus=args.sut_cpus, upstream_cpus=args.upstream_cpus,
                 gen_cpus=args.gen_cpus, generator="python")
    started = datetime.now(UTC)
    machine = gb.machine_info()
    try:
        fake_port, port = gb.free_port(), gb.free_port()
        env.fake = gb.start_fake(env, fake_port)
        config = tmp / "hearth.yaml"
        config.write_text(registry(fake_port))  # JSON is YAML
        gb.start_hearth(env, port, gb.hearth_env(env, port, config, tmp / "hearth.db", None), "messages")
        results = {kind: measure(port, stream=kind == "stream", requests=a.requests, warmup=a.warmup)
                   for kind in ("nonstream", "stream")}
    finally:
        env.procs.stop_all()
    summary = {"run": f"messages-{started:%Y%m%d-%H%M%S}", "machine": machine, "requests_per_route": a.requests,
               **results, "translation_us": translation_cost(), "target": f"non-stream added p50 <= {TARGET_MS} ms: "
                                    f"{'met' if results['nonstream']['added_p50_ms'] <= TARGET_MS else 'MISSED'}"}
    gb.RESULTS.mkdir(exist_ok=True)
    (gb.RESULTS / f"{summary['run']}.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
