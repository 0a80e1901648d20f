"""The Python side of the Lua scripts' contracts: one encoder and one decoder per script.

Each script's KEYS and ARGV layout is written here once, next to the comment block at the top of
the ``.lua`` file it mirrors. Every Redis key a script touches is passed in ``KEYS`` (none is built
inside Lua), so the scripts stay valid where Redis checks declared keys (Cluster, ACLs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hearth.state.base import BudgetCharge, Epoch, Lease, Limit, Refusal, Scope


@dataclass(slots=True, frozen=True)
class Keys:
    """Every key name the backend uses, under one prefix."""

    prefix: str

    def concurrency(self, scope: str) -> str:
        return f"{self.prefix}c:{scope}"

    def rpm(self, scope: str, minute: int) -> str:
        return f"{self.prefix}r:{scope}:{minute}"

    def tpm(self, scope: str, minute: int) -> str:
        return f"{self.prefix}t:{scope}:{minute}"

    def day(self, scope: str, day_end: int) -> str:
        """The scope's daily-token counter for the quota day ending at ``day_end``."""
        return f"{self.prefix}d:{scope}:{day_end}"

    def budget(self, key: str) -> str:
        return f"{self.prefix}b:{key}"

    def once(self, key: str) -> str:
        return f"{self.prefix}once:{key}"

    def cooldown(self, key: str) -> str:
        return f"{self.prefix}cd:{key}"

    def cache(self, key: str) -> str:
        return f"{self.prefix}cache:{key}"

    @property
    def epoch(self) -> str:
        return f"{self.prefix}epoch"


@dataclass(slots=True, frozen=True)
class AcquireRequest:
    lease_id: str
    scopes: tuple[Scope, ...]
    tokens: int
    ttl_ms: int
    minute: int
    cooldown_keys: tuple[str, ...] = ()
    budgets: tuple[BudgetCharge, ...] = ()
    once: tuple[tuple[str, float], ...] = ()
    deadline_ms: int = 0
    expected_epoch: str = ""
    day_end: int = 0  # the end of the quota day (unix seconds) daily tokens count in; 0 = no daily limit

    @property
    def day_scopes(self) -> tuple[Scope, ...]:
        """The scopes with a daily-token limit, in order (a ``daily_tokens`` refusal indexes them)."""
        return tuple(s for s in self.scopes if s.daily_tokens) if self.day_end else ()

    def encode(self, k: Keys) -> tuple[list[str], list[str | int]]:
        days = self.day_scopes
        keys: list[str] = [k.epoch]
        args: list[str | int] = [self.lease_id, self.ttl_ms, self.tokens, len(self.scopes), len(self.budgets),
                                 len(self.once), self.deadline_ms, self.expected_epoch, self.minute,
                                 len(days), self.day_end * 1000]
        for s in self.scopes:
            keys += [k.concurrency(s.key), k.rpm(s.key, self.minute), k.tpm(s.key, self.minute)]
            args += [s.max_concurrency, s.rpm, s.tpm]
        for b in self.budgets:
            keys.append(k.budget(b.key))
            args += [b.limit, b.amount, int(b.ttl_s * 1000)]
        for key, ttl in self.once:
            keys.append(k.once(key))
            args.append(max(1, int(ttl * 1000)))
        for s in days:
            keys.append(k.day(s.key, self.day_end))
            args.append(s.daily_tokens)
        keys += [k.cooldown(c) for c in self.cooldown_keys]
        return keys, args


@dataclass(slots=True, frozen=True)
class AcquireReply:
    lease: Lease | None
    refusal: Refusal | None
    current_epoch: Epoch | None = None  # with an ``epoch`` refusal: what the backend holds


def decode_acquire(req: AcquireRequest, res: Sequence[object]) -> AcquireReply:
    if int(res[0]) == 1:  # type: ignore[call-overload]
        values = tuple(int(v) for v in res[2:])  # type: ignore[call-overload]
        return AcquireReply(Lease(req.lease_id, req.scopes, req.tokens, int(res[1]),  # type: ignore[call-overload]
                                  budgets=req.budgets, budget_values=values, day=req.day_end), None)
    index = int(res[1])  # type: ignore[call-overload]
    raw_limit = res[2]
    limit = Limit(raw_limit.decode() if isinstance(raw_limit, bytes) else str(raw_limit))
    wait_s = float(res[3]) / 1000  # type: ignore[arg-type]
    if limit is Limit.EPOCH:
        raw = res[4] if len(res) > 4 else None
        return AcquireReply(None, Refusal("epoch", limit), Epoch.decode(raw or None))  # type: ignore[arg-type]
    if limit is Limit.LATE:
        return AcquireReply(None, Refusal("deadline", limit))
    scope = {
        Limit.ONCE: lambda: req.once[index - 1][0],
        Limit.COOLDOWN: lambda: req.cooldown_keys[index - 1],
        Limit.BUDGET: lambda: req.budgets[index - 1].key,
        Limit.DAILY_TOKENS: lambda: req.day_scopes[index - 1].key,
    }.get(limit, lambda: req.scopes[index - 1].key)()
    return AcquireReply(None, Refusal(scope, limit, wait_s))


@dataclass(slots=True, frozen=True)
class FinishRequest:
    """Release leases (slots, TPM correction) and, with ``settle``, settle the call's budgets once."""

    call_id_key: str  # the reservation key (already prefixed)
    settle: bool
    leases: tuple[tuple[Lease, int | None], ...]
    budgets: tuple[BudgetCharge, ...] = ()
    refunds: tuple[int, ...] = ()

    def encode(self, k: Keys) -> tuple[list[str], list[str | int]]:
        keys: list[str] = [self.call_id_key, k.epoch]
        args: list[str | int] = [1 if self.settle else 0, len(self.leases)]
        for held, tokens in self.leases:
            args += [held.lease_id, 0 if tokens is None else tokens - held.tokens, len(held.scopes)]
            for s in held.scopes:
                keys += [k.concurrency(s.key), k.tpm(s.key, held.window)]
                daily = bool(s.daily_tokens and held.day)
                if daily:  # the day's counter follows only for scopes that count one
                    keys.append(k.day(s.key, held.day))
                args += ["1" if s.max_concurrency else "0", "1" if s.tpm else "0", "1" if daily else "0"]
        keys += [k.budget(c.key) for c in self.budgets]
        args += list(self.refunds)
        return keys, args


def decode_finish(res: object) -> tuple[bool, str, tuple[int, ...]]:
    """(settled by this call, the epoch it was applied under, budget counters after the settlement)."""
    assert isinstance(res, list)
    if int(res[0]) != 1 or len(res) < 2:
        return int(res[0]) == 1, "", ()
    epoch = res[1].decode() if isinstance(res[1], bytes) else str(res[1])
    return True, epoch, tuple(int(v) for v in res[2:])


@dataclass(slots=True, frozen=True)
class RenewRequest:
    ttl_ms: int
    slots: tuple[tuple[str, str], ...]  # (scope key, lease id) of each concurrency slot
    reservation_key: str | None  # unprefixed, or None

    def encode(self, k: Keys) -> tuple[list[str], list[str | int]]:
        keys = [k.concurrency(scope) for scope, _ in self.slots]
        if self.reservation_key is not None:
            keys.append(k.once(self.reservation_key))
        return keys, [self.ttl_ms, len(self.slots), *(lease for _, lease in self.slots)]


@dataclass(slots=True, frozen=True)
class InstallEpochRequest:
    epoch: Epoch
    counters: tuple[tuple[str, int, float], ...]  # (budget key, value, ttl_s)
    reservations: tuple[str, ...]  # unprefixed reservation keys of calls in flight
    reservation_ttl_ms: int

    def encode(self, k: Keys) -> tuple[list[str], list[str | int]]:
        keys = [k.epoch, *(k.budget(key) for key, _, _ in self.counters), *(k.once(r) for r in self.reservations)]
        args: list[str | int] = [self.epoch.encode(), len(self.counters), len(self.reservations),
                                 self.reservation_ttl_ms]
        for _, value, ttl in self.counters:
            args += [value, int(ttl * 1000)]
        return keys, args
