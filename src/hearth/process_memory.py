"""The cyclic garbage collector of a process Hearth owns (``hearth serve``, ``hearth worker``) around start-up.

Start-up — imports, migrations, parsing the registry — allocates objects that live as long as the process. The
collector's passes over them while they are being built find nothing to free, yet on a slow host they cost a
tenth of start-up (``import hearth.app``: ~360 young and 2 full collections, 0.2-0.35 s of 1.7-2.1 s). So the
command pauses the collector before its imports, and once the runtime has started, hands every start-up object to
the permanent generation and turns the collector back on.

Only the program that owns its process may call these: a runtime started inside another program (a server in a
thread, a runtime in a test) shares the process with objects that are not start-up's to freeze — they would never
be collected — and must not leave that program's collector off.
"""

from __future__ import annotations

import ctypes
import gc


def pause_collector_for_startup() -> None:
    """Turn the cyclic collector off until :func:`release_startup_garbage` (reference counting still frees)."""
    gc.disable()


def release_startup_garbage() -> None:
    """Start-up leaves freed heap that glibc keeps; give it back, freeze what lives on, resume collecting.

    ``gc.freeze()`` moves every start-up object out of the collector's reach: full collections no longer rescan
    them, which the benchmark measured as the largest single cost under load (about a quarter of wall time at
    concurrency 64, pauses of ~80 ms → ~7 ms). A full collection and heap trim cost ~2 % of the test suite's CPU
    once per start, one more reason this is not :func:`hearth.runtime.start_runtime`'s to call.
    """
    gc.collect()
    gc.freeze()
    gc.enable()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (e.g. musl, macOS): nothing to do
        pass
