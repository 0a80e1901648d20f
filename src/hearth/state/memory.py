"""In-process state backend: exact and atomic because a single event loop runs it.

Only valid for one process; :mod:`hearth.app` refuses to start several processes with it.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict

from hearth.state.base import AcquireResult, Lease, Refusal, Scope, ScopeUsage, minute_window


class MemoryState:
    name = "memory"

    def __init__(self) -> None:
        self._leases: dict[str, dict[str, float]] = defaultdict(dict)  # scope -> lease_id -> expiry
        self._rpm: dict[tuple[str, int], int] = defaultdict(int)
        self._tpm: dict[tuple[str, int], int] = defaultdict(int)
        self._cooldowns: dict[str, float] = {}
        self._released = asyncio.Event()

    def _expire(self, scope: str, now: float) -> dict[str, float]:
        held = self._leases[scope]
        if held:
            dead = [k for k, exp in held.items() if exp <= now]
            for k in dead:
                del held[k]
        return held

    async def acquire(self, lease_id: str, scopes: tuple[Scope, ...], tokens: int, ttl_s: float,
                      cooldown_keys: tuple[str, ...] = ()) -> AcquireResult:
        now = time.time()
        for key in cooldown_keys:
            until = self._cooldowns.get(key)
            if until is not None:
                if until > now:
                    return AcquireResult(refusal=Refusal(key, "cooldown", until - now))
                del self._cooldowns[key]
        window = minute_window(now)
        for s in scopes:
            if s.max_concurrency and len(self._expire(s.key, now)) >= s.max_concurrency:
                return AcquireResult(refusal=Refusal(s.key, "concurrency", 0.0))
            if s.rpm and self._rpm[(s.key, window)] + 1 > s.rpm:
                return AcquireResult(refusal=Refusal(s.key, "rpm", (window + 1) * 60 - now))
            if s.tpm:
                used = self._tpm[(s.key, window)]
                if used > 0 and used + tokens > s.tpm:
                    return AcquireResult(refusal=Refusal(s.key, "tpm", (window + 1) * 60 - now))
        expiry = now + ttl_s
        for s in scopes:
            if s.max_concurrency:
                self._leases[s.key][lease_id] = expiry
            if s.rpm:
                self._rpm[(s.key, window)] += 1
            if s.tpm:
                self._tpm[(s.key, window)] += tokens
        self._gc_windows(window)
        return AcquireResult(lease=Lease(lease_id, scopes, tokens, window))

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
        self._released.set()
        self._released = asyncio.Event()

    async def wait_for_release(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self._released.wait(), timeout_s)
        except TimeoutError:
            pass

    async def set_cooldown(self, key: str, seconds: float) -> None:
        self._cooldowns[key] = time.time() + seconds

    async def clear_cooldown(self, key: str) -> None:
        self._cooldowns.pop(key, None)

    async def usage(self, scope_key: str) -> ScopeUsage:
        now = time.time()
        window = minute_window(now)
        until = self._cooldowns.get(scope_key, 0.0)
        return ScopeUsage(in_flight=len(self._expire(scope_key, now)), rpm_used=self._rpm.get((scope_key, window), 0),
                          tpm_used=self._tpm.get((scope_key, window), 0), cooldown_s=max(0.0, until - now))

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None
