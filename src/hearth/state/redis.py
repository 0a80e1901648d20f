"""Redis state backend: the same contract as :class:`~hearth.state.memory.MemoryState`, shared by
any number of processes. Every admission decision is one Lua script, so check-and-take is atomic.

Any Redis error becomes :class:`StateUnavailable`; the gateway turns that into 503 + Retry-After.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

from hearth.state.base import (
    AcquireResult,
    BudgetCharge,
    Lease,
    Refusal,
    Scope,
    ScopeUsage,
    StateUnavailable,
    minute_window,
    reservation_key,
)
from hearth.state.resp import RespClient, RespError, RespUnavailable, Script

_FAULTS = (RespError, RespUnavailable)  # any of them: fail closed

_LUA = Path(__file__).parent / "lua"


class RedisState:
    name = "redis"

    def __init__(self, url: str, prefix: str = "hearth:") -> None:
        self._redis = RespClient(url, connect_timeout_s=1.0, command_timeout_s=2.0)
        self._p = prefix
        self._acquire = Script.of((_LUA / "acquire.lua").read_text())
        self._finish = Script.of((_LUA / "finish.lua").read_text())
        self._renew = Script.of((_LUA / "renew.lua").read_text())

    def _k(self, kind: str, key: str, window: int | None = None) -> str:
        return f"{self._p}{kind}:{key}" if window is None else f"{self._p}{kind}:{key}:{window}"

    async def acquire(self, lease_id: str, scopes: tuple[Scope, ...], tokens: int, ttl_s: float,
                      cooldown_keys: tuple[str, ...] = (), budgets: tuple[BudgetCharge, ...] = (),
                      once: tuple[tuple[str, float], ...] = ()) -> AcquireResult:
        if budgets:
            once = (*once, (reservation_key(lease_id), ttl_s))
        keys: list[str] = []
        args: list[str | int] = [lease_id, int(ttl_s * 1000), tokens, len(scopes), len(budgets), len(once)]
        for s in scopes:
            keys += [self._k("c", s.key), self._k("r", s.key), self._k("t", s.key)]
            args += [s.max_concurrency, s.rpm, s.tpm]
        for b in budgets:
            keys.append(self._k("b", b.key))
            args += [b.limit, b.amount, int(b.ttl_s * 1000)]
        for key, ttl in once:
            keys.append(self._k("once", key))
            args.append(max(1, int(ttl * 1000)))
        keys += [self._k("cd", k) for k in cooldown_keys]
        try:
            res = await self._redis.run(self._acquire, keys, args)
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        if int(res[0]) == 1:
            return AcquireResult(lease=Lease(lease_id, scopes, tokens, int(res[1]), budgets=budgets,
                                             budget_values=tuple(int(v) for v in res[2:])))
        idx, limit, wait_ms = int(res[1]), res[2], float(res[3])
        limit = limit.decode() if isinstance(limit, bytes) else str(limit)
        if limit == "cooldown":
            scope = cooldown_keys[idx - 3 * len(scopes) - len(budgets) - len(once) - 1]
        elif limit == "once":
            scope = once[idx - 3 * len(scopes) - len(budgets) - 1][0]
        elif limit == "budget":
            scope = budgets[idx - 3 * len(scopes) - 1].key
        else:
            scope = scopes[idx - 1].key
        return AcquireResult(refusal=Refusal(scope, limit, wait_ms / 1000))

    async def release_and_settle(self, lease: Lease, actual_tokens: int | None, refunds: tuple[int, ...],
                                 also_release: tuple[tuple[Lease, int | None], ...] = ()) -> bool:
        keys, args = self._finish_call(lease.lease_id, True, (*also_release, (lease, actual_tokens)))
        keys += [self._k("b", c.key) for c in lease.budgets]
        args += list(refunds)
        try:
            settled = await self._redis.run(self._finish, keys, args)
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return bool(int(settled))

    async def release_all(self, leases: tuple[tuple[Lease, int | None], ...]) -> None:
        leases = tuple(pair for pair in leases if not pair[0].released)
        if not leases:
            return
        keys, args = self._finish_call(leases[0][0].lease_id, False, leases)
        try:
            await self._redis.run(self._finish, keys, args)
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    def _finish_call(self, call_id: str, settle: bool,
                     leases: tuple[tuple[Lease, int | None], ...]) -> tuple[list[str], list[str | int]]:
        """KEYS and ARGV of ``finish.lua`` for releasing ``leases`` (each lease once), settling or not."""
        keys: list[str] = [self._k("once", reservation_key(call_id))]
        args: list[str | int] = [1 if settle else 0, 0]
        for held, tokens in leases:
            if held.released:
                continue
            held.released = True
            args[1] = int(args[1]) + 1
            args += [held.lease_id, 0 if tokens is None else tokens - held.tokens, len(held.scopes)]
            for s in held.scopes:
                keys += [self._k("c", s.key), self._k("t", s.key, held.window)]
                args += ["1" if s.max_concurrency else "0", "1" if s.tpm else "0"]
        return keys, args

    async def release(self, lease: Lease, actual_tokens: int | None = None) -> None:
        await self.release_all(((lease, actual_tokens),))  # the lease expires by its TTL if this fails

    async def renew(self, leases: tuple[Lease, ...], ttl_s: float) -> None:
        live = [lease for lease in leases if not lease.released]
        zsets = [(self._k("c", s.key), lease.lease_id) for lease in live for s in lease.scopes if s.max_concurrency]
        keys = [k for k, _ in zsets] + [self._k("once", reservation_key(lease.lease_id))
                                       for lease in live if lease.budgets][:1]
        if not keys:
            return
        try:
            await self._redis.run(self._renew, keys, [max(1, int(ttl_s * 1000)), len(zsets), *(i for _, i in zsets)])
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    async def counters(self, keys: tuple[str, ...]) -> tuple[int, ...]:
        if not keys:
            return ()
        try:
            values = await self._redis.execute("MGET", *(self._k("b", k) for k in keys))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return tuple(int(v or 0) for v in values)

    async def seed_counter(self, key: str, value: int, ttl_s: float) -> bool:
        try:
            expiry = ("PX", int(ttl_s * 1000)) if ttl_s else ()
            done = await self._redis.execute("SET", self._k("b", key), value, "NX", *expiry)
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return bool(done)

    async def claim_once(self, key: str, ttl_s: float) -> bool:
        try:
            done = await self._redis.execute("SET", self._k("once", key), "1", "NX", "PX", max(1, int(ttl_s * 1000)))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return bool(done)

    async def wait_for_release(self, timeout_s: float) -> None:
        await asyncio.sleep(min(timeout_s, 0.005 + random.random() * 0.015))

    async def set_cooldown(self, key: str, seconds: float) -> None:
        try:
            await self._redis.execute("SET", self._k("cd", key), "1", "PX", max(1, int(seconds * 1000)))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    async def clear_cooldown(self, key: str) -> None:
        try:
            await self._redis.execute("DEL", self._k("cd", key))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    async def usage(self, scope_key: str) -> ScopeUsage:
        try:
            seconds, micros = await self._redis.execute("TIME")
            now = int(seconds) + int(micros) / 1e6
            window = minute_window(now)
            zc, rpm, tpm, cd = await self._redis.execute_many(
                ("ZCOUNT", self._k("c", scope_key), now * 1000, "+inf"),
                ("GET", self._k("r", scope_key, window)),
                ("GET", self._k("t", scope_key, window)),
                ("PTTL", self._k("cd", scope_key)))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return ScopeUsage(in_flight=int(zc), rpm_used=int(rpm or 0), tpm_used=int(tpm or 0),
                          cooldown_s=max(0, int(cd)) / 1000)

    async def ping(self) -> None:
        try:
            await self._redis.execute("PING")
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    async def close(self) -> None:
        await self._redis.close()
