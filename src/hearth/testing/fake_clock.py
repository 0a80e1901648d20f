"""A clock that moves only when a test says so (see :mod:`hearth.clock`)."""

from __future__ import annotations

import threading
import time


class FakeClock:
    """Wall-clock seconds that start at ``start`` and change only by :meth:`advance` or :meth:`set`.

    The default start is the beginning of the current minute: a per-minute window then has a whole
    minute to go, and the fake time is never ahead of the real one (deadlines that code under test
    computes from ``time.time()`` stay in the future). Safe to advance from a test's thread while a
    server thread reads it."""

    def __init__(self, start: float | None = None) -> None:
        self._now = start if start is not None else float(int(time.time()) // 60 * 60)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move time forward by ``seconds`` (never backwards); returns the new time."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._now += seconds
            return self._now

    def set(self, when: float) -> None:
        with self._lock:
            if when < self._now:
                raise ValueError("a clock does not go backwards")
            self._now = when


class RunningClock:
    """Wall-clock seconds at real speed, from a chosen instant: time flows (leases expire, latencies
    are real) but a test decides where it stands in a window.

    :meth:`at_minute_start` puts it at the beginning of the current minute, never ahead of real time,
    so a test counting per-minute limits has the whole minute and need not wait for the next one."""

    def __init__(self, start: float) -> None:
        self._start = start
        self._t0 = time.monotonic()

    @classmethod
    def at_minute_start(cls) -> RunningClock:
        return cls(float(int(time.time()) // 60 * 60))

    def now(self) -> float:
        return self._start + (time.monotonic() - self._t0)
