"""The time source of the state backends and the breakers, injectable so tests need not wait.

Limits count in windows, leases and reservations expire, cooldowns and open breakers end: all of it
is decided by reading a clock. Production reads the host's wall clock (:data:`SYSTEM_CLOCK`); a test
passes :class:`hearth.testing.fake_clock.FakeClock` and moves time forward instead of sleeping.

The contract is wall-clock seconds since the epoch (like :func:`time.time`), because the same instants
are compared with deadlines and Retry-After dates that other hosts and the Redis server also read.
(The Redis backend takes its times from Redis's ``TIME`` inside the scripts, so it has no clock to inject.)
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (``time.time()`` semantics)."""
        ...


class SystemClock:
    """The host's wall clock."""

    __slots__ = ()

    def now(self) -> float:
        return time.time()


SYSTEM_CLOCK: Clock = SystemClock()
