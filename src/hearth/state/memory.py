"""In-process state backend: exact and atomic because a single event loop runs it.

Only valid for one process; :mod:`hearth.state.factory` refuses to start several processes with it.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict, defaultdict

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.state.base import (
    AcquireResult,
    BudgetCharge,
    Epoch,
    Lease,
    Refusal,
    Scope,
    ScopeUsage,
    minute_window,
    reservation_key,
)
from hearth.state.quota_day import QuotaDay

#: The in-process response cache keeps at most this many entries (least recently used evicted first).
MEMORY_CACHE_ENTRIES = 10_000


class MemoryState:
    """``clock`` decides windows, lease and reservation expiry, cooldowns (tests pass a fake one, or
    swap :attr:`clock` in a running server)."""

    name = "memory"
    shared = False

    def __init__(self, clock: Clock = SYSTEM_CLOCK, quota_day: QuotaDay | None = None) -> None:
        self.clock = clock
        self._quota_day = quota_day or QuotaDay()
        self._daily: dict[tuple[str, int], int] = {}  # (scope, end of its quota day) -> tokens counted
        self._leases: dict[str, dict[str, float]] = defaultdict(dict)  # scope -> lease_id -> expiry
        self._rpm: dict[tuple[str, int], int] = defaultdict(int)
        self._tpm: dict[tuple[str, int], int] = defaultdict(int)
        self._cooldowns: dict[str, float] = {}
        self._cache: OrderedDict[str, tuple[float, bytes]] = OrderedDict()  # key → (expires at, value), LRU
        self._counters: dict[str, int] = {}  # budget counters
        self._expiring: dict[str, float] = {}  # budget counters with an expiry
        # One-time keys (nonces, open budget reservations) -> expiry, in insertion order: nearly
        # the order they expire in, so the sweep pops from the front and stops at the first live one.
        self._once: dict[str, float] = {}
        self._next_sweep = 0.0
        self._released = asyncio.Event()
        self._waiting = 0
        # This process's memory is the backend: it "loses" its data only by starting afresh, so its
        # one epoch begins now, and nonces older than the process are refused.
        self._epoch_installed: Epoch | None = None
        self.epoch: Epoch | None = None

    def _sweep(self, now: float) -> None:
        """At most once a second: drop expired one-time keys (from the front) and budget counters."""
        if now < self._next_sweep:
            return
        self._next_sweep = now + 1.0
        dead = []
        for key, until in self._once.items():
            if until > now:
                break
            dead.append(key)
        for key in dead:
            del self._once[key]
        if len(self._expiring) > 1024:
            for key in [k for k, until in self._expiring.items() if until <= now]:
                del self._expiring[key]
                self._counters.pop(key, None)

    def _claimed(self, key: str, now: float) -> bool:
        until = self._once.get(key)
        return until is not None and until > now

    def _claim(self, key: str, until: float) -> None:
        self._once.pop(key, None)  # re-inserted at the end, keeping the order of expiry
        self._once[key] = until

    def _expire(self, scope: str, now: float) -> dict[str, float]:
        held = self._leases[scope]
        if held:
            dead = [k for k, exp in held.items() if exp <= now]
            for k in dead:
                del held[k]
        return held

    def _live(self, key: str, now: float) -> bool:
        until = self._expiring.get(key)
        if until is not None and until <= now:
            del self._expiring[key]
            self._counters.pop(key, None)
            return False
        return key in self._counters

    @property
    def lost_at(self) -> float | None:
        """When the data before the current epoch was lost (signed requests older than this are refused)."""
        return self.epoch.lost_at if self.epoch is not None else None

    async def acquire(self, lease_id: str, scopes: tuple[Scope, ...], tokens: int, ttl_s: float,
                      *, cooldown_keys: tuple[str, ...] = (), budgets: tuple[BudgetCharge, ...] = (),
                      once: tuple[tuple[str, float], ...] = (), deadline: float = 0.0,
                      check_epoch: bool = False) -> AcquireResult:
        now = self.clock.now()
        if deadline and now > deadline:
            return AcquireResult(refusal=Refusal("deadline", "late"))
        if check_epoch and (self.epoch is None or self.epoch != self._epoch_installed):
            return AcquireResult(refusal=Refusal("epoch", "epoch"))
        self._sweep(now)
        for key, _ in once:
            if self._claimed(key, now):
                return AcquireResult(refusal=Refusal(key, "once", 0.0))
        for key in cooldown_keys:
            until = self._cooldowns.get(key)
            if until is not None:
                if until > now:
                    return AcquireResult(refusal=Refusal(key, "cooldown", until - now))
                del self._cooldowns[key]
        window = minute_window(now)
        for s in scopes:
            # Expired leases (a task that never released) are only looked for when the scope seems full.
            if (s.max_concurrency and len(self._leases[s.key]) >= s.max_concurrency
                    and len(self._expire(s.key, now)) >= s.max_concurrency):
                return AcquireResult(refusal=Refusal(s.key, "concurrency", 0.0))
            if s.rpm and self._rpm[(s.key, window)] + 1 > s.rpm:
                return AcquireResult(refusal=Refusal(s.key, "rpm", (window + 1) * 60 - now))
            if s.tpm:
                used = self._tpm[(s.key, window)]
                if used > 0 and used + tokens > s.tpm:
                    return AcquireResult(refusal=Refusal(s.key, "tpm", (window + 1) * 60 - now))
        day = 0
        for s in scopes:
            if s.daily_tokens:
                day = day or self._day(now)
                if self._daily.get((s.key, day), 0) + tokens > s.daily_tokens:
                    return AcquireResult(refusal=Refusal(s.key, "daily_tokens", max(0.0, day - now)))
        for b in budgets:
            used = self._counters[b.key] if self._live(b.key, now) else 0
            if used + b.amount > b.limit:
                return AcquireResult(refusal=Refusal(b.key, "budget", 0.0))
        expiry = now + ttl_s
        for s in scopes:
            if s.max_concurrency:
                self._leases[s.key][lease_id] = expiry
            if s.rpm:
                self._rpm[(s.key, window)] += 1
            if s.tpm:
                self._tpm[(s.key, window)] += tokens
            if s.daily_tokens:
                self._daily[(s.key, day)] = self._daily.get((s.key, day), 0) + tokens
        for key, ttl in once:
            self._claim(key, now + ttl)
        if budgets:
            self._claim(reservation_key(lease_id), expiry)
        values = []
        for b in budgets:
            if not self._live(b.key, now):
                self._counters[b.key] = 0
                if b.ttl_s:
                    self._expiring[b.key] = now + b.ttl_s
            self._counters[b.key] += b.amount
            values.append(self._counters[b.key])
        self._gc_windows(window)
        return AcquireResult(lease=Lease(lease_id, scopes, tokens, window, budgets=budgets,
                                         budget_values=tuple(values), day=day))

    def _day(self, now: float) -> int:
        """The end of the current quota day; a new day drops the counters of the days before."""
        day = self._quota_day.end(now)
        if any(d < day for _, d in self._daily):
            self._daily = {k: v for k, v in self._daily.items() if k[1] >= day}
        return day

    def _gc_windows(self, window: int) -> None:
        if len(self._rpm) + len(self._tpm) > 4096:
            for d in (self._rpm, self._tpm):
                for k in [k for k in d if k[1] < window - 1]:
                    del d[k]

    async def release(self, lease: Lease, actual_tokens: int | None = None) -> None:
        if lease.released:
            return
        lease.released = True
        for s in lease.scopes:
            if s.max_concurrency:
                self._leases[s.key].pop(lease.lease_id, None)
            if s.tpm and actual_tokens is not None:
                k = (s.key, lease.window)
                self._tpm[k] = max(0, self._tpm[k] + actual_tokens - lease.tokens)
            if s.daily_tokens and actual_tokens is not None and (s.key, lease.day) in self._daily:
                d = (s.key, lease.day)
                self._daily[d] = max(0, self._daily[d] + actual_tokens - lease.tokens)
        if self._waiting:
            self._released.set()
            self._released = asyncio.Event()

    async def release_and_settle(self, lease: Lease, actual_tokens: int | None, refunds: tuple[int, ...],
                                 also_release: tuple[tuple[Lease, int | None], ...] = ()) -> bool:
        for other, tokens in also_release:
            await self.release(other, tokens)
        await self.release(lease, actual_tokens)
        now = self.clock.now()
        until = self._once.pop(reservation_key(lease.lease_id), None)
        if until is None or until <= now:
            return False  # settled before, or the reservation outlived its TTL: it stays spent
        values = []
        for charge, refund in zip(lease.budgets, refunds, strict=True):
            live = self._live(charge.key, now)
            if refund != 0 and live:
                self._counters[charge.key] = max(0, self._counters[charge.key] - refund)
            values.append(self._counters[charge.key] if live else 0)
        lease.budget_values = tuple(values)
        lease.settled_epoch = self._epoch_installed.encode() if self._epoch_installed is not None else ""
        return True

    async def release_all(self, leases: tuple[tuple[Lease, int | None], ...]) -> None:
        for lease, tokens in leases:
            await self.release(lease, tokens)

    async def renew(self, leases: tuple[Lease, ...], ttl_s: float) -> None:
        now = self.clock.now()
        for lease in leases:
            if lease.released:
                continue
            for s in lease.scopes:
                held = self._leases.get(s.key)
                if s.max_concurrency and held is not None and held.get(lease.lease_id, 0.0) > now:
                    held[lease.lease_id] = now + ttl_s
            if lease.budgets and self._claimed(reservation_key(lease.lease_id), now):
                self._claim(reservation_key(lease.lease_id), now + ttl_s)

    async def counters(self, keys: tuple[str, ...]) -> tuple[int, ...]:
        now = self.clock.now()
        return tuple(self._counters[k] if self._live(k, now) else 0 for k in keys)

    async def adjust_counters(self, deltas: dict[str, int]) -> None:
        for key, delta in deltas.items():
            if key in self._counters:
                self._counters[key] = max(0, self._counters[key] + delta)

    async def read_epoch(self) -> Epoch | None:
        return self._epoch_installed

    async def install_epoch(self, epoch: Epoch, counters: dict[str, tuple[int, float]],
                            open_reservations: tuple[str, ...], reservation_ttl_s: float) -> Epoch:
        if self._epoch_installed is None:
            now = self.clock.now()
            for key, (value, ttl) in counters.items():
                self._counters[key] = value
                if ttl:
                    self._expiring[key] = now + ttl
            for key in open_reservations:
                self._claim(key, now + reservation_ttl_s)
            self._epoch_installed = epoch
        self.epoch = self._epoch_installed
        return self._epoch_installed

    async def claim_once(self, key: str, ttl_s: float) -> bool:
        now = self.clock.now()
        if self._claimed(key, now):
            return False
        self._claim(key, now + ttl_s)
        return True

    async def wait_for_release(self, timeout_s: float) -> None:
        self._waiting += 1
        try:
            await asyncio.wait_for(self._released.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            self._waiting -= 1

    async def cache_get(self, key: str) -> bytes | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        if entry[0] <= self.clock.now():
            del self._cache[key]
            return None
        self._cache.move_to_end(key)
        return entry[1]

    async def cache_set(self, key: str, value: bytes, ttl_s: float) -> None:
        self._cache[key] = (self.clock.now() + ttl_s, value)
        self._cache.move_to_end(key)
        while len(self._cache) > MEMORY_CACHE_ENTRIES:
            self._cache.popitem(last=False)

    async def set_cooldown(self, key: str, seconds: float) -> None:
        self._cooldowns[key] = self.clock.now() + seconds

    async def clear_cooldown(self, key: str) -> None:
        self._cooldowns.pop(key, None)

    async def usage(self, scope_key: str) -> ScopeUsage:
        now = self.clock.now()
        window = minute_window(now)
        until = self._cooldowns.get(scope_key, 0.0)
        return ScopeUsage(in_flight=len(self._expire(scope_key, now)), rpm_used=self._rpm.get((scope_key, window), 0),
                          tpm_used=self._tpm.get((scope_key, window), 0), cooldown_s=max(0.0, until - now),
                          daily_tokens_used=self._daily.get((scope_key, self._quota_day.end(now)), 0))

    async def sync_clock(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None
