"""Per-process endpoint health: circuit breakers, local cooldown cache, latency and error memory.

Breakers are per process on purpose (like Envoy's outlier detection): each process judges the
endpoints by what it sees, and a successful call needs no shared write. What *must* be shared —
a 429 cooldown and a 401 disable — goes through the state backend and the registry instead.

Breaker: ``closed`` → (``failure_threshold`` consecutive 5xx/network failures) → ``open`` for
``open_s`` → ``half_open``: exactly one probe call is let through; success closes, failure reopens.

Every transition is a function of the time it is given (``now``, unix seconds) or, where the book
stamps a time itself, of its ``clock``: tests drive a breaker through open → half-open → closed with a
:class:`~hearth.testing.fake_clock.FakeClock` instead of waiting ``open_s``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hearth.clock import SYSTEM_CLOCK, Clock

FAILURE_THRESHOLD = 3
OPEN_SECONDS = 30.0
_EWMA = 0.2
_ERROR_DECAY_S = 30.0


@dataclass(slots=True)
class EndpointHealth:
    consecutive_failures: int = 0
    open_until: float = 0.0
    probe_in_flight: bool = False
    cooldown_until: float = 0.0
    in_flight: int = 0
    latency_ms: float = 0.0
    recent_errors: float = 0.0
    errors_at: float = 0.0
    opened_at: float = 0.0  # when the circuit last opened from closed (meaningful while open_until != 0)
    last_error: tuple[float, int, str] | None = None  # (clock time, status, code) of its last failed attempt

    def state(self, now: float) -> str:
        if self.open_until == 0.0:
            return "closed"
        return "open" if now < self.open_until else "half_open"

    def decayed_errors(self, now: float) -> float:
        if self.recent_errors == 0.0:
            return 0.0
        age = now - self.errors_at
        return self.recent_errors * max(0.0, 1.0 - age / _ERROR_DECAY_S)


class HealthBook:
    def __init__(self, failure_threshold: int = FAILURE_THRESHOLD, open_s: float = OPEN_SECONDS, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._book: dict[str, EndpointHealth] = {}
        self.failure_threshold = failure_threshold
        self.open_s = open_s
        self.clock = clock

    def get(self, name: str) -> EndpointHealth:
        h = self._book.get(name)
        if h is None:
            h = self._book[name] = EndpointHealth()
        return h

    def forget(self, name: str) -> None:
        """Drop everything known about an endpoint (an operator re-enabled it)."""
        self._book.pop(name, None)

    def can_try(self, name: str, now: float) -> bool:
        """Whether routing may choose this endpoint now (cooldown and breaker permitting)."""
        h = self._book.get(name)
        if h is None:
            return True
        if h.cooldown_until > now:
            return False
        state = h.state(now)
        return state == "closed" or (state == "half_open" and not h.probe_in_flight)

    def closed(self, name: str, now: float) -> bool:
        """Routine traffic: no cooldown, breaker closed (no half-open probe to coordinate)."""
        h = self._book.get(name)
        return h is None or (h.cooldown_until <= now and h.state(now) == "closed")

    def started(self, name: str, now: float) -> bool:
        """Record an attempt; returns True if it is the half-open probe."""
        h = self.get(name)
        h.in_flight += 1
        if h.state(now) == "half_open":
            h.probe_in_flight = True
            return True
        return False

    def finished(self, name: str) -> None:
        h = self.get(name)
        h.in_flight = max(0, h.in_flight - 1)

    def succeeded(self, name: str, latency_ms: float) -> None:
        h = self.get(name)
        h.consecutive_failures = 0
        h.open_until = 0.0
        h.probe_in_flight = False
        h.latency_ms = latency_ms if h.latency_ms == 0.0 else h.latency_ms + _EWMA * (latency_ms - h.latency_ms)

    def note_error(self, name: str, status: int, code: str) -> None:
        """An attempt on ``name`` failed because of the endpoint (``upstream_*``): kept, in this process, for
        the console's "last error" (a client that left or a caller's bad request says nothing of the endpoint)."""
        self.get(name).last_error = (self.clock.now(), status, code)

    def failed(self, name: str, now: float) -> bool:
        """Record a 5xx/network failure; returns True if this opened the circuit."""
        h = self.get(name)
        h.recent_errors = h.decayed_errors(now) + 1.0
        h.errors_at = now
        was_probe = h.probe_in_flight
        h.probe_in_flight = False
        h.consecutive_failures += 1
        if was_probe or (h.open_until == 0.0 and h.consecutive_failures >= self.failure_threshold):
            if h.open_until == 0.0:
                h.opened_at = now
            h.open_until = now + self.open_s
            return True
        return False

    def ready_in(self, name: str, now: float) -> float | None:
        """Seconds until routing may choose this endpoint again: 0.0 if it may now, else the longer
        of its cooldown and its open breaker's remaining time (when the half-open probe is due);
        None while a half-open probe is in flight (it is ready when the probe ends, at no known time)."""
        h = self._book.get(name)
        if h is None:
            return 0.0
        wait = max(0.0, h.cooldown_until - now)
        state = h.state(now)
        if state == "open":
            wait = max(wait, h.open_until - now)
        elif state == "half_open" and h.probe_in_flight and wait == 0.0:
            return None
        return wait

    def open_since(self, now: float, longer_than_s: float) -> list[tuple[str, float]]:
        """Endpoints whose circuit has not closed (open, or half-open with failing probes) for at least
        ``longer_than_s``, with when it opened: what the ``breaker_open`` alert reports."""
        return [(name, h.opened_at) for name, h in self._book.items()
                if h.open_until != 0.0 and now - h.opened_at >= longer_than_s]

    def released_probe(self, name: str) -> None:
        """A probe that ended without a verdict (e.g. a 400) frees the half-open slot."""
        self.get(name).probe_in_flight = False

    def cool_down(self, name: str, until: float) -> None:
        h = self.get(name)
        h.cooldown_until = max(h.cooldown_until, until)
        now = self.clock.now()
        h.recent_errors = h.decayed_errors(now) + 1.0
        h.errors_at = now

    def snapshot(self, name: str, now: float) -> dict[str, object]:
        h = self.get(name)
        return {"circuit": h.state(now), "consecutive_failures": h.consecutive_failures,
                "cooldown_s": round(max(0.0, h.cooldown_until - now), 3), "in_flight_local": h.in_flight,
                "latency_ms_ewma": round(h.latency_ms, 2), "recent_errors": round(h.decayed_errors(now), 3),
                "last_error": None if h.last_error is None else
                dict(zip(("at", "status", "code"), h.last_error, strict=True))}
