"""Garbage-collector pause probe, loaded into Hearth only by ``gateway_bench.py --gc-probe``.

Python imports ``sitecustomize`` at start when its folder is on ``PYTHONPATH``. If
``BENCH_GC_OUT`` is set, this registers a ``gc.callbacks`` hook that times every
collection and, once a second, appends the new ones to that file as lines
``<monotonic seconds> <generation> <pause ms>`` (CLOCK_MONOTONIC is shared by all processes, so
the benchmark can pick the collections that happened during a given run). It changes no GC
setting; its own cost is two Python calls per collection and one small write a second.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from typing import Any

_OUT = os.environ.get("BENCH_GC_OUT")


def _install(out: str) -> None:
    started: dict[int, float] = {}
    done: list[tuple[float, int, float]] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        gen = int(info["generation"])
        now = time.monotonic()
        if phase == "start":
            started[gen] = now
        elif gen in started:
            done.append((now, gen, (now - started.pop(gen)) * 1000))

    def flush() -> None:
        while True:
            time.sleep(1.0)
            if not done:
                continue
            batch = done[:]
            del done[:len(batch)]
            with open(out, "a", encoding="utf-8") as fh:
                fh.write("".join(f"{t:.6f} {g} {ms:.3f}\n" for t, g, ms in batch))

    gc.callbacks.append(on_gc)
    threading.Thread(target=flush, name="bench-gc-probe", daemon=True).start()


if _OUT:
    _install(_OUT)
