"""The gRPC door's cost over the HTTP chat route at c=1 (issue 14), loopback only.

One Hearth process (``hearth serve`` with ``HEARTH_GRPC_PORT``, memory state, SQLite, request logging on)
pinned to the system-under-test core; the fake upstream (20 chunks, no latency) and this client on the
other core. The same Hearth serves both doors, so both routes are measured in one run, **interleaved**
request by request (the order alternates each iteration), which cancels most of the drift of a shared
machine:

* ``chat`` — ``POST /v1/chat/completions`` over a kept-alive ``http.client`` connection;
* ``grpc`` — ``hearth.v1.AiService/Chat`` over one ``grpc`` (sync) channel;

and the same for streams (``stream: true`` / ``StreamChat``, read to the end): time to the first content
delta (``stream_ttft``), to the answer complete (``[DONE]`` / the final ``done`` message: ``stream_done``)
and to the end of the call (the chunked body's end / the gRPC status: ``stream_end``).
Reported: the medians of each and the difference of medians (gRPC − chat); then Hearth's own CPU time per
call of each kind (blocks of 100 calls taking turns), which a loaded machine moves far less than latency.
Client-side costs are part of each latency (the HTTP client parses JSON; the gRPC client decodes protobuf).

``--instructions`` counts Hearth's instructions per call of each instead (callgrind, one process, the
kinds one after another between dumps): a comparison the machine's load cannot move.

Usage: ``python bench/grpc_bench.py [--requests 3000] [--warmup 300]``,
``python bench/grpc_bench.py --instructions --requests 200``
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gateway_bench as gb
import grpc

from hearth.v1 import ai_service_pb2 as pb
from hearth.v1.ai_service_pb2_grpc import AiServiceStub

AUTH = {"Authorization": f"Bearer {gb.CALLER_KEY}", "Content-Type": "application/json"}
METADATA = (("authorization", f"Bearer {gb.CALLER_KEY}"),)


def _http_chat(conn: http.client.HTTPConnection, body: bytes) -> None:
    conn.request("POST", "/v1/chat/completions", body, AUTH)
    r = conn.getresponse()
    data = r.read()
    assert r.status == 200, data[:200]
    json.loads(data)["choices"][0]["message"]["content"]  # what a caller does with it


def _http_stream(conn: http.client.HTTPConnection, body: bytes) -> tuple[float, float]:
    """Seconds to the first content delta and to ``[DONE]`` (the answer complete); the response is then read
    to its end, the time of which is the caller's ``_timed``."""
    started = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, AUTH)
    r = conn.getresponse()
    assert r.status == 200
    first = done = None
    while line := r.readline():
        if line.startswith(b"data: {") and first is None and b'"content":"' in line and b'"content":""' not in line:
            first = time.perf_counter() - started
        if line.startswith(b"data: [DONE]"):
            done = time.perf_counter() - started
            r.read()
            break
    assert first is not None and done is not None
    return first, done


def _grpc_stream(stub: AiServiceStub, request: pb.ChatRequest) -> tuple[float, float]:
    """Seconds to the first delta and to the final message (``done``); the call is then read to its status."""
    started = time.perf_counter()
    first = done = None
    for chunk in stub.StreamChat(request, metadata=METADATA):
        if first is None and chunk.delta:
            first = time.perf_counter() - started
        if chunk.HasField("done"):
            done = time.perf_counter() - started
    assert first is not None and done is not None
    return first, done


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def measure(http_port: int, grpc_port: int, n: int, warmup: int, hearth_pid: int) -> dict[str, Any]:
    conn = http.client.HTTPConnection(gb.HOST, http_port, timeout=30)
    channel = grpc.insecure_channel(f"{gb.HOST}:{grpc_port}")
    stub = AiServiceStub(channel)
    request = pb.ChatRequest(model=gb.PUBLIC_MODEL, messages=[pb.ChatMessage(role="user", content=gb.PROMPT)])
    plain = json.dumps({"model": gb.PUBLIC_MODEL, "messages": [{"role": "user", "content": gb.PROMPT}]}).encode()
    stream = json.dumps({"model": gb.PUBLIC_MODEL, "messages": [{"role": "user", "content": gb.PROMPT}],
                         "stream": True}).encode()
    out: dict[str, list[float]] = {f"{door}_{kind}": [] for door in ("chat", "grpc")
                                   for kind in ("plain", "stream_end", "stream_ttft", "stream_done")}
    ops: list[tuple[str, Callable[[], Any]]] = [
        ("chat_plain", lambda: _http_chat(conn, plain)), ("grpc_plain", lambda: stub.Chat(request, metadata=METADATA)),
        ("chat_stream", lambda: _http_stream(conn, stream)), ("grpc_stream", lambda: _grpc_stream(stub, request))]
    for i in range(warmup + n):
        pairs = [ops[0:2], ops[2:4]]
        for pair in pairs:
            for name, fn in (pair if i % 2 == 0 else list(reversed(pair))):
                seconds, value = _timed(fn)
                if i < warmup:
                    continue
                if name.endswith("_stream"):
                    out[f"{name}_end"].append(seconds)
                    out[f"{name}_ttft"].append(value[0])
                    out[f"{name}_done"].append(value[1])
                else:
                    out[name].append(seconds)
    cpu = _server_cpu(ops, hearth_pid, n)
    channel.close()
    conn.close()
    p50 = {k: statistics.median(v) * 1000 for k, v in out.items()}
    return {"n": n, "p50_ms": {k: round(v, 3) for k, v in p50.items()},
            "p90_ms": {k: round(sorted(v)[int(len(v) * 0.9)] * 1000, 3) for k, v in out.items()},
            "grpc_minus_chat_p50_ms": {kind: round(p50[f"grpc_{kind}"] - p50[f"chat_{kind}"], 3)
                                       for kind in ("plain", "stream_ttft", "stream_done", "stream_end")},
            "hearth_cpu_us_per_call": cpu}


def _server_cpu(ops: list[tuple[str, Callable[[], Any]]], pid: int, n: int, block: int = 100) -> dict[str, float]:
    """Hearth's CPU time (all its threads) per call of each op: blocks of ``block`` calls, the ops taking
    turns, ``n`` calls of each in all. Unlike latency, this hardly moves with the machine's load."""
    spent = {name: 0.0 for name, _ in ops}
    for _ in range(max(1, n // block)):
        for name, fn in ops:
            before = gb.proc_cpu_s(pid)
            for _ in range(block):
                fn()
            spent[name] += gb.proc_cpu_s(pid) - before
    calls = max(1, n // block) * block
    return {name: round(seconds / calls * 1e6, 1) for name, seconds in spent.items()}


def instructions(requests: int) -> dict[str, Any]:
    """Hearth's instructions per call of each door and kind, counted by callgrind in one ``hearth serve``
    (valgrind; see ``gateway_instructions.py``): the load of each kind between two dumps, all warmed up
    first. A count two runs of the same tree agree on within ~0.5 %, which no load on the machine moves."""
    import subprocess

    import gateway_instructions as gi

    tmp = Path(tempfile.mkdtemp(prefix="hearth-grpc-instr-"))
    fake_port, port, grpc_port = gb.free_port(), gb.free_port(), gb.free_port()
    fake = subprocess.Popen([*gb.hearth_argv(), "fake-upstream", "--host", gb.HOST, "--port", str(fake_port),
                             "--latency-ms", "0", "--chunks", str(gb.CHUNKS)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = tmp / "hearth.yaml"
    config.write_text(gb.hearth_yaml(fake_port))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update(gi.QUIET, HEARTH_CONFIG=str(config), HEARTH_HOST=gb.HOST, HEARTH_PORT=str(port),
               HEARTH_GRPC_PORT=str(grpc_port), HEARTH_DATABASE_URL=f"sqlite+aiosqlite:///{tmp}/hearth.db",
               HEARTH_STATE_BACKEND="memory", HEARTH_MASTER_KEY=secrets.token_hex(32), HEARTH_LOG_LEVEL="info")
    out = tmp / "callgrind.out"
    hearth: subprocess.Popen[bytes] | None = None
    counts: dict[str, int] = {}
    try:
        subprocess.run([str(gi.PY), "-m", "hearth", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
        with open(tmp / "hearth.log", "wb") as log_file:
            hearth = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                       f"--callgrind-out-file={out}", str(gi.PY), "-m", "hearth", "serve"],
                                      env=env, stdout=log_file, stderr=subprocess.STDOUT)
        gi._wait_ready(port, hearth, timeout=600)
        conn = http.client.HTTPConnection(gb.HOST, port, timeout=120)
        channel = grpc.insecure_channel(f"{gb.HOST}:{grpc_port}")
        stub = AiServiceStub(channel)
        request = pb.ChatRequest(model=gb.PUBLIC_MODEL, messages=[pb.ChatMessage(role="user", content=gb.PROMPT)])
        message = {"model": gb.PUBLIC_MODEL, "messages": [{"role": "user", "content": gb.PROMPT}]}
        plain, stream = json.dumps(message).encode(), json.dumps({**message, "stream": True}).encode()
        ops: list[tuple[str, Callable[[], Any]]] = [
            ("chat_plain", lambda: _http_chat(conn, plain)),
            ("grpc_plain", lambda: stub.Chat(request, metadata=METADATA, timeout=120)),
            ("chat_stream", lambda: _http_stream(conn, stream)),
            ("grpc_stream", lambda: _grpc_stream(stub, request))]
        for _, fn in ops:  # warm-up, not counted
            for _ in range(20):
                fn()
        pid = str(hearth.pid)
        subprocess.run(["callgrind_control", "-i", "on", pid], check=True, stdout=subprocess.DEVNULL)
        subprocess.run(["callgrind_control", "-z", pid], check=True, stdout=subprocess.DEVNULL)
        for name, fn in ops:
            conn.close()  # reconnects: the server closed a connection idle for longer than its keep-alive
            for _ in range(requests):
                fn()
            before = set(tmp.glob("callgrind.out*"))
            subprocess.run(["callgrind_control", f"--dump={name}", pid], check=True, stdout=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            while not (dumped := set(tmp.glob("callgrind.out*")) - before) and time.monotonic() < deadline:
                time.sleep(0.2)  # the dump is written by the traced process, at its next instrumented point
            time.sleep(1)
            counts[name] = sum(int(line.split()[1]) for f in dumped
                               for line in f.read_text(errors="replace").splitlines() if line.startswith("totals:"))
        subprocess.run(["callgrind_control", "-i", "off", pid], check=True, stdout=subprocess.DEVNULL)
        channel.close()
        conn.close()
    finally:
        if hearth is not None:
            hearth.terminate()
            hearth.wait(120)
        fake.terminate()
        fake.wait(10)
    per_call = {name: total // requests for name, total in counts.items()}
    return {"requests": requests, "instructions_per_call": per_call,
            "grpc_over_chat": {kind: f"{per_call[f'grpc_{kind}'] / per_call[f'chat_{kind}'] - 1:+.1%}"
                               for kind in ("plain", "stream")}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=3000, help="measured requests per route and kind")
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--instructions", action="store_true", help="count Hearth's instructions per call with "
                        "callgrind instead (valgrind; --requests per kind, e.g. 200)")
    args = parser.parse_args()
    if args.instructions:
        print(json.dumps(instructions(args.requests), indent=2))
        return
    cpus = os.cpu_count() or 1
    sut, other = ("0", "1") if cpus >= 2 else (None, None)
    with tempfile.TemporaryDirectory(prefix="hearth-grpc-bench-") as tmp_dir:
        tmp = Path(tmp_dir)
        ns = argparse.Namespace(state="memory", hearth_log_level="warning", hearth_env=[], gc_probe=False)
        env = gb.Env(ns, tmp, gb.ProcGroup(), sut, other, other, "python")  # type: ignore[arg-type]
        try:
            if other is not None:
                os.sched_setaffinity(0, {int(other)})
            upstream_port, http_port, grpc_port = gb.free_port(), gb.free_port(), gb.free_port()
            gb.start_fake(env, upstream_port)
            config = tmp / "hearth.yaml"
            config.write_text(gb.hearth_yaml(upstream_port))
            henv = gb.hearth_env(env, http_port, config, tmp / "hearth.db", None)
            henv["HEARTH_GRPC_PORT"] = str(grpc_port)
            henv["HEARTH_EMBEDDED_WORKER"] = "false"
            hearth, _ = gb.start_hearth(env, http_port, henv, "grpc")
            gb.log(f"measuring {args.requests} requests per route and kind, interleaved")
            result = measure(http_port, grpc_port, args.requests, args.warmup, hearth.pid)
        finally:
            env.procs.stop_all()
    result.update(date=datetime.now(UTC).isoformat(timespec="seconds"), machine=gb.machine_info(),
                  load=os.getloadavg(), command=" ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
