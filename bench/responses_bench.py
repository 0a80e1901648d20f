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

With ``--instructions N`` it counts instead, as ``gateway_instructions.py`` does, the instructions Hearth
executes per request of each door (valgrind callgrind, one Hearth under valgrind, N requests per door
from one client, each door's count dumped on its own, the doors interleaved over ``--rounds``): a figure
the machine's noise cannot move, for the work a door adds (not its waiting).

With ``--ttft`` it also measures each door's time to first token of a stream at c=1 (a sequential client
reading until the first event that carries text: a chat delta, ``response.output_text.delta``, a
completion chunk's text), interleaved the same way.

With ``--translation N`` it times (``timeit``, best of 5 runs of N) what each door does on top of the chat
route in the process: parsing and translating the request, and rendering the chat answer in the door's
format (the chat route's own rendering, the model rename, subtracted) — the door's whole added CPU work
but the stored variant's write.

Usage: ``python bench/responses_bench.py [--rounds 5] [--seconds 4] [--instructions 200] [--translation 20000]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gateway_bench as gb
import gateway_instructions as gi

PROMPT = gb.PROMPT


@dataclass
class DoorTarget(gb.Target):
    """A target whose non-stream body is given (the door's own format)."""

    payload: dict[str, Any] = field(default_factory=dict)

    def body(self, stream: bool) -> dict[str, Any]:
        return {**self.payload, **({"stream": True} if stream else {})}


def _targets(port: int, proc: gb.Proc | None) -> dict[str, DoorTarget]:
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
    ap.add_argument("--ttft", action="store_true", help="also time to first token of streams at c=1")
    ap.add_argument("--translation", type=int, default=0, metavar="N",
                    help="time each door's own translation work in-process (timeit, N per run) instead")
    ap.add_argument("--instructions", type=int, default=0, metavar="N",
                    help="count instructions per request (callgrind, N requests per door) instead of timing")
    a = ap.parse_args(argv)
    if a.translation:
        print(translation_report(time_translation(a.translation)))
        return 0
    if a.instructions:
        print(instructions_report(count_instructions(a.instructions, a.rounds)))
        return 0
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
        ttft: dict[str, list[float]] = {name: [] for name in targets}
        for r in range(a.rounds):
            order = list(targets) if r % 2 == 0 else list(targets)[::-1]
            for name in order:
                p50[name].append(gb.latency_run(env, targets[name])["latency_ms"]["p50"])
                if a.ttft:
                    ttft[name].append(_ttft_p50(port, targets[name], a.seconds))
            gb.log(f"round {r}: " + ", ".join(f"{n}={v[-1]:.3f} ms" for n, v in p50.items()))
            if a.ttft:
                gb.log(f"round {r} TTFT: " + ", ".join(f"{n}={v[-1]:.3f} ms" for n, v in ttft.items()))
        print(report(p50))
        if a.ttft:
            print("\nTime to first token of a stream at c=1:\n")
            print(report(ttft))
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


# a chat delta with content, a Responses text delta, a completion chunk with text (empty ones do not count)
_FIRST_TEXT = re.compile(rb'"content":"[^"]|"type":"response\.output_text\.delta"|"text":"[^"]')


def _ttft_p50(port: int, target: DoorTarget, seconds: float) -> float:
    """p50 of the time to the first event with text of ``target``'s stream, sequential, for ``seconds``."""
    conn = http.client.HTTPConnection(gb.HOST, port, timeout=60)
    payload = json.dumps(target.body(True)).encode()
    headers = {"Authorization": f"Bearer {gb.CALLER_KEY}", "Content-Type": "application/json",
               "Accept": "text/event-stream"}
    firsts: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        conn.request("POST", target.path, payload, headers)
        resp = conn.getresponse()
        first = None
        seen = b""
        while chunk := resp.read1(65536):
            seen += chunk
            if first is None and _FIRST_TEXT.search(seen):
                first = (time.perf_counter() - t0) * 1000
        if resp.status != 200 or first is None:
            raise SystemExit(f"{target.name}: stream {resp.status} without text")
        firsts.append(first)
    conn.close()
    return statistics.median(firsts)


def _send(port: int, target: DoorTarget, total: int) -> None:
    conn = http.client.HTTPConnection(gb.HOST, port, timeout=120)
    payload = json.dumps(target.body(False)).encode()
    headers = {"Authorization": f"Bearer {gb.CALLER_KEY}", "Content-Type": "application/json"}
    for _ in range(total):
        conn.request("POST", target.path, payload, headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200:
            raise SystemExit(f"{target.name}: {resp.status} {body[:300]!r}")
    conn.close()


def _dump_total(pid: int, out_dir: Path) -> int:
    """Dump callgrind's counters (zeroing them) and return the total of the newest dump."""
    before = set(out_dir.glob("callgrind.out*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)
    for _ in range(600):
        new = set(out_dir.glob("callgrind.out*")) - before
        if new:
            text = max(new, key=lambda f: f.stat().st_mtime).read_text(errors="replace")
            if "totals:" in text:
                return sum(int(line.split()[1]) for line in text.splitlines() if line.startswith("totals:"))
        time.sleep(0.1)
    raise SystemExit("callgrind wrote no dump")


def count_instructions(requests: int, rounds: int) -> dict[str, list[int]]:
    """Instructions per request of each door, in one Hearth under callgrind (background loops quiet)."""
    tmp = Path(tempfile.mkdtemp(prefix="hearth-responses-instr-"))
    fake_port, port = gb.free_port(), gb.free_port()
    fake = subprocess.Popen([*gb.hearth_argv(), "fake-upstream", "--host", gb.HOST, "--port", str(fake_port),
                             "--latency-ms", "0", "--chunks", str(gb.CHUNKS)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = tmp / "hearth.yaml"
    config.write_text(gb.hearth_yaml(fake_port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update(gi.QUIET, HEARTH_CONFIG=str(config), HEARTH_HOST=gb.HOST, HEARTH_PORT=str(port),
               HEARTH_DATABASE_URL=f"sqlite+aiosqlite:///{tmp}/hearth.db", HEARTH_STATE_BACKEND="memory",
               HEARTH_MASTER_KEY=secrets.token_hex(32), HEARTH_LOG_LEVEL="info")
    hearth: subprocess.Popen[bytes] | None = None
    per: dict[str, list[int]] = {}
    try:
        subprocess.run([str(gi.PY), "-m", "hearth", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
        with open(tmp / "hearth.log", "wb") as log:
            hearth = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                       f"--callgrind-out-file={tmp}/callgrind.out", str(gi.PY), "-m", "hearth",
                                       "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        gi._wait_ready(port, hearth, timeout=600)
        targets = _targets(port, None)
        for t in targets.values():
            _send(port, t, 20)  # warm-up, not counted
        subprocess.run(["callgrind_control", "-i", "on", str(hearth.pid)], check=True, stdout=subprocess.DEVNULL)
        _dump_total(hearth.pid, tmp)  # zero the counters
        for r in range(rounds):  # interleaved: background work (log flushes, GC) lands on every door alike
            order = list(targets) if r % 2 == 0 else list(targets)[::-1]
            for name in order:
                _send(port, targets[name], requests)
                per.setdefault(name, []).append(_dump_total(hearth.pid, tmp) // requests)
                gb.log(f"round {r} {name}: {per[name][-1]:,} instructions per request")
        subprocess.run(["callgrind_control", "-i", "off", str(hearth.pid)], check=True, stdout=subprocess.DEVNULL)
    finally:
        if hearth is not None:
            hearth.terminate()
            hearth.wait(120)
        fake.terminate()
        fake.wait(10)
    return per


def instructions_report(per: dict[str, list[int]]) -> str:
    chat = statistics.median(per["chat"])
    lines = ["| route | instructions / request (each round) | median | − chat's | ratio |", "|---|---|---:|---:|---:|"]
    for name, counts in per.items():
        n = statistics.median(counts)
        lines.append(f"| {name} | {', '.join(f'{c:,}' for c in counts)} | {n:,.0f} | {n - chat:+,.0f} "
                     f"| {n / chat:.3f} |")
    return "\n".join(lines)


def time_translation(n: int) -> dict[str, float]:
    """µs per request of each door's own work: the request translated and checked, the answer rendered."""
    import timeit

    import orjson

    from hearth.api.chat_validation import validate_chat
    from hearth.responses.completions import completion_chat_body, text_completion
    from hearth.responses.objects import from_chat_completion, new_response_id
    from hearth.responses.requests import parse_responses_request
    from hearth.testing.fake_upstream import reply_text

    answer = orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": gb.PUBLIC_MODEL,
                           "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                        "message": {"role": "assistant", "content": reply_text(20)}}],
                           "usage": {"prompt_tokens": 15, "completion_tokens": 20, "total_tokens": 35}})
    bodies = {name: orjson.dumps(t.body(False)) for name, t in _targets(0, None).items()}

    def chat() -> None:
        validate_chat(orjson.loads(bodies["chat"]))

    def responses() -> None:
        parsed = parse_responses_request(orjson.loads(bodies["responses"]))
        validate_chat(parsed.chat_body([]))
        orjson.dumps(from_chat_completion(orjson.loads(answer), response_id=new_response_id(stored=False),
                                          model=gb.PUBLIC_MODEL, echo=parsed.echo))

    def completions() -> None:
        validate_chat(completion_chat_body(orjson.loads(bodies["completions"])))
        orjson.dumps(text_completion(orjson.loads(answer)))

    out = {}
    for name, fn in (("chat", chat), ("responses", responses), ("completions", completions)):
        out[name] = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    return out


def translation_report(us: dict[str, float]) -> str:
    lines = ["| route | parse + check + render, µs per request | − chat's, µs |", "|---|---:|---:|"]
    lines += [f"| {name} | {v:.2f} | {v - us['chat']:+.2f} |" for name, v in us.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
