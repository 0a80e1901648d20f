"""The images door's instructions per request against the chat route's (valgrind callgrind), in one Hearth.

``images_bench.py`` times the routes, but on this shared machine seconds drift by tens of percent between runs
minutes apart. Instructions do not: one ``hearth serve`` runs under callgrind (start-up uninstrumented, the
wall-clock background loops off, as in ``gateway_instructions.py``) with a chat model and an image model on
the same fake upstream; after a warm-up of each, instrumentation is switched on and the counters dumped
after each phase of ``--requests`` requests from ``--concurrency`` keep-alive clients, in this order:
``chat`` (``/v1/chat/completions``, the fake's 20-piece answer), ``images`` (``/v1/images/generations``,
one 64x64 image, ``b64_json``), ``images_url`` (the same with ``url``: blob store write and a signed URL),
then ``chat`` again (the two chat phases agreeing is the check that the count is steady).

Instructions are Hearth's own process only (all threads): the fake upstream's drawing is not in them, so the
difference images − chat is what the images route costs Hearth beyond the chat route.

Usage: ``python bench/images_instructions.py [--requests 400] [--concurrency 4]``
"""

from __future__ import annotations

import argparse
import http.client
import json
import subprocess
import tempfile
import threading
from pathlib import Path

import gateway_bench as gb
import gateway_instructions as gi
import images_bench as ib

PHASES: list[tuple[str, str, dict[str, object]]] = [
    ("chat", "/v1/chat/completions", {"model": gb.PUBLIC_MODEL, "messages": [{"role": "user", "content": gb.PROMPT}]}),
    ("images", "/v1/images/generations", {**ib.IMAGE_BODY, "response_format": "b64_json"}),
    ("images_url", "/v1/images/generations", {**ib.IMAGE_BODY, "response_format": "url"}),
    ("chat_again", "/v1/chat/completions", {"model": gb.PUBLIC_MODEL,
                                            "messages": [{"role": "user", "content": gb.PROMPT}]}),
]


def _load(port: int, path: str, body: dict[str, object], *, total: int, concurrency: int) -> int:
    payload = json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {gb.CALLER_KEY}", "Content-Type": "application/json"}
    failed: list[int] = []

    def client(count: int) -> None:
        conn = http.client.HTTPConnection(gb.HOST, port, timeout=120)
        for _ in range(count):
            conn.request("POST", path, payload, headers)
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                failed.append(resp.status)

    threads = [threading.Thread(target=client, args=(total // concurrency,)) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(failed)


def _dump(pid: int) -> None:
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--concurrency", type=int, default=4)
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="hearth-images-instr-"))
    fake_port, port = gb.free_port(), gb.free_port()
    config = tmp / "hearth.yaml"
    config.write_text(ib.registry(fake_port))
    env = {**gi.quiet_env(config, tmp, port), "HEARTH_DOCUMENT_DIR": str(tmp / "blobs")}
    failed: dict[str, int] = {}
    sent = a.requests // a.concurrency * a.concurrency
    with gi.fake_upstream(fake_port), gi.hearth_under_callgrind(env, tmp, port) as hearth:
        for _, path, body in PHASES[:3]:  # warm-up, not counted
            _load(port, path, body, total=40, concurrency=a.concurrency)
        gi.instrument(hearth.pid, True)
        _dump(hearth.pid)  # zero the counters: each later dump holds exactly one phase
        for name, path, body in PHASES:
            failed[name] = _load(port, path, body, total=a.requests, concurrency=a.concurrency)
            _dump(hearth.pid)
        gi.instrument(hearth.pid, False)
    dumps = sorted((f for f in tmp.glob("callgrind.out.*") if f.suffix[1:].isdigit()), key=lambda f: int(f.suffix[1:]))
    totals = [gi.callgrind_totals(f) for f in dumps]
    per = {name: totals[i + 1] // sent for i, (name, _, _) in enumerate(PHASES)}  # dump 0 zeroed the counters
    result = {"requests_per_phase": sent, "failed": failed, "instructions_per_request": per,
              "images_over_chat": per["images"] - (per["chat"] + per["chat_again"]) // 2,
              "images_url_over_chat": per["images_url"] - (per["chat"] + per["chat_again"]) // 2}
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
