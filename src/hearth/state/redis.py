"""Redis state backend: the same contract as :class:`~hearth.state.memory.MemoryState`, shared by
any number of processes. Every admission decision is one Lua script, so check-and-take is atomic;
the scripts' key and argument layouts live in :mod:`hearth.state.redis_scripts`.

Any Redis error becomes :class:`StateUnavailable`; the gateway turns that into 503 + Retry-After.
When an admission's outcome is unknown (no answer in time, connection lost), the lease id and
what it may have taken are remembered and given back as soon as Redis answers again: a script
that ran after all cannot keep slots or money for a call that never happened.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.observability.logging import get_logger
from hearth.state.base import (
    AcquireResult,
    BudgetCharge,
    Epoch,
    Lease,
    Scope,
    ScopeUsage,
    StateUnavailable,
    minute_window,
    reservation_key,
)
from hearth.state.quota_day import QuotaDay
from hearth.state.redis_scripts import (
    AcquireRequest,
    FinishRequest,
    InstallEpochRequest,
    Keys,
    RenewRequest,
    decode_acquire,
    decode_finish,
)
from hearth.state.resp import RespClient, RespError, RespUnavailable, Script

_FAULTS = (RespError, RespUnavailable)  # any of them: fail closed
_LUA = Path(__file__).parent / "lua"
log = get_logger("hearth.state")


class RedisState:
    name = "redis"
    shared = True

    def __init__(self, url: str, prefix: str = "hearth:", *, command_timeout_s: float = 2.0,
                 quota_day: QuotaDay | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        # ``clock`` only names the windows a script counts in (the minute, the quota day); the scripts
        # judge expiry and Retry-After by Redis's own TIME. Tests pass a fake one to cross a boundary.
        self.clock = clock
        self._quota_day = quota_day or QuotaDay()
        self._redis = RespClient(url, connect_timeout_s=1.0, command_timeout_s=command_timeout_s)
        self.command_timeout_s = command_timeout_s
        self._k = Keys(prefix)
        self._acquire = Script.of((_LUA / "acquire.lua").read_text())
        self._finish = Script.of((_LUA / "finish.lua").read_text())
        self._renew = Script.of((_LUA / "renew.lua").read_text())
        self._install = Script.of((_LUA / "install_epoch.lua").read_text())
        self.epoch: Epoch | None = None
        self.clock_offset_s = 0.0  # Redis's clock minus ours, measured by sync_clock()
        self._orphans: list[FinishRequest] = []  # admissions with an unknown outcome, to give back
        self._orphan_task: asyncio.Task[None] | None = None

    # ---- admission ---------------------------------------------------------------------------------
    @property
    def lost_at(self) -> float | None:
        """When the data before the current epoch was lost (signed requests older than this are refused)."""
        return self.epoch.lost_at if self.epoch is not None else None

    async def acquire(self, lease_id: str, scopes: tuple[Scope, ...], tokens: int, ttl_s: float,
                      *, cooldown_keys: tuple[str, ...] = (), budgets: tuple[BudgetCharge, ...] = (),
                      once: tuple[tuple[str, float], ...] = (), deadline: float = 0.0,
                      check_epoch: bool = False) -> AcquireResult:
        if budgets:
            once = (*once, (reservation_key(lease_id), ttl_s))
        now = self.clock.now() + self.clock_offset_s
        day = self._quota_day.end(now) if any(s.daily_tokens for s in scopes) else 0
        expected = ""
        if check_epoch:
            expected = self.epoch.encode() if self.epoch is not None else "-"  # "-" never matches
        req = AcquireRequest(lease_id, scopes, tokens, int(ttl_s * 1000), minute_window(now), cooldown_keys,
                             budgets, once, int((deadline + self.clock_offset_s) * 1000) if deadline else 0,
                             expected, day)
        keys, args = req.encode(self._k)
        try:
            res = await self._redis.run(self._acquire, keys, args)
        except _FAULTS as exc:
            self._orphan(req)
            raise StateUnavailable(str(exc)) from exc
        except asyncio.CancelledError:  # the script was sent: it may still run
            self._orphan(req)
            raise
        reply = decode_acquire(req, res)
        if reply.refusal is not None and reply.refusal.limit == "epoch" and reply.current_epoch is not None:
            self.epoch = reply.current_epoch  # another process rebuilt: adopt its epoch and retry
        return AcquireResult(lease=reply.lease, refusal=reply.refusal)

    def _orphan(self, req: AcquireRequest) -> None:
        """Give back whatever an admission with an unknown outcome may have taken, once Redis answers.

        Slots are removed by lease id (a no-op if never taken); budgets are refunded only if the
        reservation key exists, i.e. only if the script really ran. TPM is left as counted."""
        lease = Lease(req.lease_id, req.scopes, req.tokens, req.minute, budgets=req.budgets, day=req.day_end)
        self._orphans.append(FinishRequest(self._k.once(reservation_key(req.lease_id)), bool(req.budgets),
                                           ((lease, req.tokens),), req.budgets,
                                           tuple(b.amount for b in req.budgets)))
        if self._orphan_task is None or self._orphan_task.done():
            self._orphan_task = asyncio.get_running_loop().create_task(self._release_orphans(),
                                                                        name="redis-orphan-release")

    async def _release_orphans(self) -> None:
        delay = 0.2
        while self._orphans:
            req = self._orphans[0]
            keys, args = req.encode(self._k)
            try:
                await self._redis.run(self._finish, keys, args)
            except _FAULTS:
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                continue
            self._orphans.pop(0)
            delay = 0.2
        log.info("orphaned_admissions_released")

    @property
    def orphans(self) -> int:
        """Admissions whose outcome is unknown and that are not given back yet."""
        return len(self._orphans)

    # ---- finishing -----------------------------------------------------------------------------------
    async def release_and_settle(self, lease: Lease, actual_tokens: int | None, refunds: tuple[int, ...],
                                 also_release: tuple[tuple[Lease, int | None], ...] = ()) -> bool:
        leases = self._unreleased((*also_release, (lease, actual_tokens)))
        req = FinishRequest(self._k.once(reservation_key(lease.lease_id)), True, leases, lease.budgets, refunds)
        keys, args = req.encode(self._k)
        try:
            res = await self._redis.run(self._finish, keys, args)
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        settled, epoch, values = decode_finish(res)
        if settled:
            lease.budget_values = values
            lease.settled_epoch = epoch
        return settled

    async def release_all(self, leases: tuple[tuple[Lease, int | None], ...]) -> None:
        pending = self._unreleased(leases)
        if not pending:
            return
        req = FinishRequest(self._k.once(reservation_key(pending[0][0].lease_id)), False, pending)
        keys, args = req.encode(self._k)
        try:
            await self._redis.run(self._finish, keys, args)
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    @staticmethod
    def _unreleased(leases: tuple[tuple[Lease, int | None], ...]) -> tuple[tuple[Lease, int | None], ...]:
        out = tuple(pair for pair in leases if not pair[0].released)
        for held, _ in out:
            held.released = True
        return out

    async def release(self, lease: Lease, actual_tokens: int | None = None) -> None:
        await self.release_all(((lease, actual_tokens),))  # the lease expires by its TTL if this fails

    async def renew(self, leases: tuple[Lease, ...], ttl_s: float) -> None:
        live = [lease for lease in leases if not lease.released]
        slots = tuple((s.key, lease.lease_id) for lease in live for s in lease.scopes if s.max_concurrency)
        reserved = next((reservation_key(lease.lease_id) for lease in live if lease.budgets), None)
        if not slots and reserved is None:
            return
        keys, args = RenewRequest(max(1, int(ttl_s * 1000)), slots, reserved).encode(self._k)
        try:
            await self._redis.run(self._renew, keys, args)
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    # ---- budgets and epochs --------------------------------------------------------------------------
    async def counters(self, keys: tuple[str, ...]) -> tuple[int, ...]:
        if not keys:
            return ()
        try:
            values = await self._redis.execute("MGET", *(self._k.budget(k) for k in keys))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return tuple(int(v or 0) for v in values)

    async def adjust_counters(self, deltas: dict[str, int]) -> None:
        if not deltas:
            return
        try:
            await self._redis.execute_many(*(("INCRBY", self._k.budget(key), delta) for key, delta in deltas.items()))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    async def read_epoch(self) -> Epoch | None:
        try:
            raw = await self._redis.execute("GET", self._k.epoch)
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return Epoch.decode(raw)

    async def install_epoch(self, epoch: Epoch, counters: dict[str, tuple[int, float]],
                            open_reservations: tuple[str, ...], reservation_ttl_s: float) -> Epoch:
        req = InstallEpochRequest(epoch, tuple((k, v, ttl) for k, (v, ttl) in counters.items()),
                                  open_reservations, max(1, int(reservation_ttl_s * 1000)))
        keys, args = req.encode(self._k)
        try:
            raw = await self._redis.run(self._install, keys, args)
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        installed = Epoch.decode(raw)
        assert installed is not None
        self.epoch = installed
        return installed

    async def sync_clock(self) -> None:
        """Measure Redis's clock against ours, so deadlines checked in scripts mean what we meant."""
        try:
            before = time.time()
            seconds, micros = await self._redis.execute("TIME")
            after = time.time()
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        self.clock_offset_s = int(seconds) + int(micros) / 1e6 - (before + after) / 2

    # ---- one-time keys, cooldowns, waits -------------------------------------------------------------
    async def claim_once(self, key: str, ttl_s: float) -> bool:
        try:
            done = await self._redis.execute("SET", self._k.once(key), "1", "NX", "PX", max(1, int(ttl_s * 1000)))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return bool(done)

    async def wait_for_release(self, timeout_s: float) -> None:
        await asyncio.sleep(min(timeout_s, 0.005 + random.random() * 0.015))

    async def cache_get(self, key: str) -> bytes | None:
        try:
            value = await self._redis.execute("GET", self._k.cache(key))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return value if isinstance(value, bytes) else None

    async def cache_set(self, key: str, value: bytes, ttl_s: float) -> None:
        try:
            await self._redis.execute("SET", self._k.cache(key), value, "PX", max(1, int(ttl_s * 1000)))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    async def set_cooldown(self, key: str, seconds: float) -> None:
        try:
            await self._redis.execute("SET", self._k.cooldown(key), "1", "PX", max(1, int(seconds * 1000)))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    async def clear_cooldown(self, key: str) -> None:
        try:
            await self._redis.execute("DEL", self._k.cooldown(key))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    async def usage(self, scope_key: str) -> ScopeUsage:
        try:
            seconds, micros = await self._redis.execute("TIME")
            now = int(seconds) + int(micros) / 1e6  # leases expire by Redis's clock
            named = self.clock.now() + self.clock_offset_s  # windows are named as acquire names them
            window = minute_window(named)
            day = self._quota_day.end(named)
            zc, rpm, tpm, cd, daily = await self._redis.execute_many(
                ("ZCOUNT", self._k.concurrency(scope_key), now * 1000, "+inf"),
                ("GET", self._k.rpm(scope_key, window)),
                ("GET", self._k.tpm(scope_key, window)),
                ("PTTL", self._k.cooldown(scope_key)),
                ("GET", self._k.day(scope_key, day)))
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc
        return ScopeUsage(in_flight=int(zc), rpm_used=int(rpm or 0), tpm_used=int(tpm or 0),
                          cooldown_s=max(0, int(cd)) / 1000, daily_tokens_used=int(daily or 0))

    async def ping(self) -> None:
        try:
            await self._redis.execute("PING")
        except _FAULTS as exc:
            raise StateUnavailable(str(exc)) from exc

    async def close(self) -> None:
        if self._orphan_task is not None:
            self._orphan_task.cancel()
        await self._redis.close()
