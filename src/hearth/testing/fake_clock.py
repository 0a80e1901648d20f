"""A clock that moves only when a test says so (see :mod:`hearth.clock`)."""

from __future__ import annotations

import threading


class FakeClock:
    """Wall-clock seconds that start at ``start`` and change only by :meth:`advance` or :meth:`set`.

    The default start is the beginning of a minute (far from a window edge) in 2026, so per-minute
    windows and day boundaries are where a test expects them. Safe to advance from a test's thread
    while a server thread reads it."""

    def __init__(self, start: float = 1_780_000_020.0) -> None:
        self._now = start
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
