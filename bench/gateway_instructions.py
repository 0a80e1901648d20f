"""Hearth's instructions per request (valgrind callgrind): a gateway comparison the machine's noise cannot move.

On this shared machine ``gateway_bench.py``'s figures drift by 10–40 % between runs minutes apart, so a
5 % regression between two trees can be neither shown nor ruled out from seconds. An instruction count
can: callgrind counts every instruction Hearth's process executes (all threads), and two runs of the
same tree agree within 0.1 %.

For each tree (this one, and each ``--other-src``) the script starts a fake upstream (natively) and
``hearth serve`` under ``valgrind --tool=callgrind --instr-atstart=no`` (start-up uninstrumented), sends
a warm-up, switches instrumentation on, sends ``--requests`` requests from ``--concurrency`` blocking
clients (non-stream, or streams of 20 chunks), switches it off and reads the total. Background loops
that tick by wall-clock time (prompt and registry refresh, the embedded task worker, the scheduler) are
turned off, because under valgrind a request takes ~30× longer and they would be counted ~30× over;
their idle cost is a separate figure (CPU of an idle ``hearth serve``).

Instructions are not seconds (cache misses, system calls and waiting are not in them), so this tells
whether a change adds work on the request path, not how fast the gateway is; ``gateway_bench.py`` says
that.

Usage: ``python bench/gateway_instructions.py [--other-src /tmp/old/src ...] [--requests 300]``
(``git worktree add --detach /tmp/old <commit>`` gives another tree).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import secrets
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import gateway_bench as gb

ROOT = Path(__file__).resolve().parent.parent
PY = ROOT / ".venv" / "bin" / "python"
QUIET = {"HEARTH_PROMPT_REFRESH_S": "100000", "HEARTH_REGISTRY_REFRESH_S": "100000",
         "HEARTH_EMBEDDED_WORKER": "false", "HEARTH_SCHEDULER_ENABLED": "false"}


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"hearth exited with {proc.returncode} before it was ready")
        try:
            conn = http.client.HTTPConnection(gb.HOST, port, timeout=5)
            conn.request("GET", "/readyz")
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("hearth did not become ready under valgrind")



def quiet_env(config: Path, tmp: Path, port: int) -> dict[str, str]:
    """The environment of a measured Hearth: ``config``, SQLite in ``tmp``, memory state, :data:`QUIET`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env.update(QUIET, HEARTH_CONFIG=str(config), HEARTH_HOST=gb.HOST, HEARTH_PORT=str(port),
               HEARTH_DATABASE_URL=f"sqlite+aiosqlite:///{tmp}/hearth.db", HEARTH_STATE_BACKEND="memory",
               HEARTH_MASTER_KEY=secrets.token_hex(32), HEARTH_LOG_LEVEL="info")
    return env


@contextlib.contextmanager
def fake_upstream(port: int) -> Iterator[subprocess.Popen[bytes]]:
    """The fake upstream, natively (never under valgrind), on ``port`` until the block ends."""
    fake = subprocess.Popen([*gb.hearth_argv(), "fake-upstream", "--host", gb.HOST, "--port", str(port),
                             "--latency-ms", "0", "--chunks", str(gb.CHUNKS)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield fake
    finally:
        fake.terminate()
        fake.wait(10)


@contextlib.contextmanager
def hearth_under_callgrind(env: dict[str, str], tmp: Path, port: int) -> Iterator[subprocess.Popen[bytes]]:
    """``hearth migrate``, then ``hearth serve`` under callgrind with instrumentation off until :func:`instrument`
    turns it on, ready on ``port``; stopped when the block ends. Its counts are in ``tmp/callgrind.out*``
    (:func:`callgrind_totals`), its output in ``tmp/hearth.log``."""
    subprocess.run([str(PY), "-m", "hearth", "migrate"], env=env, check=True, stdout=subprocess.DEVNULL)
    hearth: subprocess.Popen[bytes] | None = None
    try:
        with open(tmp / "hearth.log", "wb") as log:
            hearth = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                       f"--callgrind-out-file={tmp / 'callgrind.out'}", str(PY), "-m", "hearth",
                                       "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
        _wait_ready(port, hearth, timeout=600)
        yield hearth
    finally:
        if hearth is not None:
            hearth.terminate()
            hearth.wait(120)


def instrument(pid: int, on: bool) -> None:
    """Switch callgrind's counting in process ``pid`` on or off."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)], check=True, stdout=subprocess.DEVNULL)


def callgrind_totals(path: Path) -> int:
    """The instruction total of one callgrind output file."""
    return sum(int(line.split()[1]) for line in path.read_text(errors="replace").splitlines()
               if line.startswith("totals:"))

def _load(port: int, *, stream: bool, total: int, concurrency: int) -> int:
    """Send ``total`` requests from ``concurrency`` keep-alive clients; the number that failed."""
    body: dict[str, object] = {"model": gb.PUBLIC_MODEL, "messages": [{"role": "user", "content": gb.PROMPT}]}
    if stream:
        body["stream"] = True
    payload = json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {gb.CALLER_KEY}", "Content-Type": "application/json"}
    failed: list[int] = []

    def client(count: int) -> None:
        conn = http.client.HTTPConnection(gb.HOST, port, timeout=120)
        for _ in range(count):
            conn.request("POST", "/v1/chat/completions", payload, headers)
            resp = conn.getresponse()
            data = resp.read()
            if resp.status != 200 or (stream and b"[DONE]" not in data):
                failed.append(resp.status)

    threads = [threading.Thread(target=client, args=(total // concurrency,)) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(failed)


def measure(src: Path | None, *, stream: bool, requests: int, concurrency: int) -> dict[str, object]:
    """Instructions per request of the tree whose ``src`` is given (None: this tree)."""
    tmp = Path(tempfile.mkdtemp(prefix="hearth-instr-"))
    fake_port, port = gb.free_port(), gb.free_port()
    config = tmp / "hearth.yaml"
    config.write_text(gb.hearth_yaml(fake_port))
    env = quiet_env(config, tmp, port)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    with fake_upstream(fake_port), hearth_under_callgrind(env, tmp, port) as hearth:
        _load(port, stream=stream, total=40, concurrency=concurrency)  # warm-up, not counted
        instrument(hearth.pid, True)
        failed = _load(port, stream=stream, total=requests, concurrency=concurrency)
        instrument(hearth.pid, False)
    total = sum(callgrind_totals(f) for f in tmp.glob("callgrind.out*"))
    sent = requests // concurrency * concurrency
    return {"tree": str(src or ROOT / "src"), "stream": stream, "requests": sent, "failed": failed,
            "instructions": total, "per_request": total // sent}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other-src", type=Path, action="append", default=[], help="another tree's src (repeatable)")
    ap.add_argument("--requests", type=int, default=300, help="per measurement (streams; non-stream: twice this)")
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args(argv)
    trees: list[Path | None] = [None, *(p.resolve() for p in a.other_src)]
    rows = []
    for stream in (False, True):
        for tree in trees:
            r = measure(tree, stream=stream, requests=a.requests * (1 if stream else 2), concurrency=a.concurrency)
            rows.append(r)
            print(json.dumps(r), flush=True)
    print("\n| tree | non-stream instructions / request | stream (20 chunks) instructions / stream |")
    print("|---|---:|---:|")
    for tree in trees:
        name = str(tree or ROOT / "src")
        plain = next(r for r in rows if r["tree"] == name and not r["stream"])
        streams = next(r for r in rows if r["tree"] == name and r["stream"])
        print(f"| {name} | {plain['per_request']:,} | {streams['per_request']:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
