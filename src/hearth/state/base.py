"""The state backend interface: shared, atomic counters for admission.

Two implementations answer the same contract: :mod:`hearth.state.memory` (one process) and
:mod:`hearth.state.redis` (many processes, atomic Lua). Admission asks for *all* of a call's
scopes at once (endpoint and its quota group): either every scope has room and all are taken,
or nothing is taken and the refusal names the scope and the limit.

Concurrency leases carry an expiry so a crashed process's leases free themselves. RPM and TPM
are counted in fixed one-minute windows; TPM is reserved on the estimate and corrected on release.
Daily tokens are counted the same way in the quota day (:mod:`hearth.state.quota_day`): midnight
to midnight in the configured time zone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol


class StateUnavailable(Exception):
    """The backend cannot be reached; callers must fail closed (503), never admit unlimited."""


@dataclass(slots=True, frozen=True)
class Scope:
    """One limited thing, e.g. ``ep:gpt4-a`` or ``qg:openai-main``; 0 means unlimited."""

    key: str
    max_concurrency: int = 0
    rpm: int = 0
    tpm: int = 0
    daily_tokens: int = 0  # tokens per quota day (a provider account's daily quota)


@dataclass(slots=True, frozen=True)
class BudgetCharge:
    """Reserve ``amount`` on the counter ``key`` if it stays within ``limit`` (tokens or micro-money).

    ``ttl_s`` lets a period's counter expire some time after the period ends (0 = never).
    """

    key: str
    limit: int
    amount: int
    ttl_s: float = 0.0


@dataclass(slots=True)
class Lease:
    lease_id: str
    scopes: tuple[Scope, ...]
    tokens: int
    window: int  # the minute window in which TPM/RPM were counted
    released: bool = False
    budgets: tuple[BudgetCharge, ...] = ()
    budget_values: tuple[int, ...] = ()  # each budget counter right after this lease's charge (or settlement)
    settled_epoch: str = ""  # the epoch the settlement was applied under
    day: int = 0  # the end (unix seconds) of the quota day its daily tokens were counted in; 0 = none

    def split(self, n: int) -> tuple[Lease, Lease]:
        """Two leases from one acquisition: the first ``n`` scopes (with the budgets) and the rest.

        Both keep the lease id — scope keys are disjoint, so each releases only its own slots."""
        return (Lease(self.lease_id, self.scopes[:n], self.tokens, self.window, budgets=self.budgets,
                      budget_values=self.budget_values, day=self.day),
                Lease(self.lease_id, self.scopes[n:], self.tokens, self.window, day=self.day))


class Limit(StrEnum):
    """Why the backend refused an admission (the value is what the Lua scripts return)."""

    CONCURRENCY = "concurrency"
    RPM = "rpm"
    TPM = "tpm"
    DAILY_TOKENS = "daily_tokens"
    COOLDOWN = "cooldown"
    BUDGET = "budget"
    ONCE = "once"  # a one-time key (nonce) was already claimed
    EPOCH = "epoch"  # the backend's data is not the one this process knows: it was lost, or rebuilt
    LATE = "late"  # the script ran after the caller's deadline: the caller has given up, take nothing


@dataclass(slots=True, frozen=True)
class Refusal:
    scope: str
    limit: str  # a Limit value
    retry_after_s: float = 0.0


@dataclass(slots=True, frozen=True)
class Epoch:
    """Which generation of the backend's data this is (seed 004: the store can lose it).

    Written when budget counters are rebuilt from the ledger. ``lost_at`` is when the data before
    it was found lost (unix seconds): one-time keys (nonces) claimed before then are gone, so
    signed requests older than that are refused. ``mark`` is the highest ledger row id the rebuild
    read: reservations committed later, but admitted before the loss, were not counted.
    """

    id: str
    lost_at: float
    mark: int

    def encode(self) -> str:
        return f"{self.id}|{self.lost_at:.3f}|{self.mark}"

    @classmethod
    def decode(cls, raw: str | bytes | None) -> Epoch | None:
        if raw is None:
            return None
        text = raw.decode() if isinstance(raw, bytes) else raw
        try:
            ident, lost_at, mark = text.split("|")
            return cls(ident, float(lost_at), int(mark))
        except ValueError:
            return None


@dataclass(slots=True)
class AcquireResult:
    lease: Lease | None = None
    refusal: Refusal | None = None


@dataclass(slots=True)
class ScopeUsage:
    in_flight: int = 0
    rpm_used: int = 0
    tpm_used: int = 0
    cooldown_s: float = 0.0
    daily_tokens_used: int = 0  # in the current quota day
    extra: dict[str, float] = field(default_factory=dict)


class StateBackend(Protocol):
    name: str
    shared: bool  # other processes share this backend's data (and may lose or rebuild it)
    epoch: Epoch | None  # this process's view; None until known

    @property
    def lost_at(self) -> float | None:
        """When the data before :attr:`epoch` was lost: signed requests older than this are refused."""
        ...

    async def acquire(self, lease_id: str, scopes: tuple[Scope, ...], tokens: int, ttl_s: float,
                      *, cooldown_keys: tuple[str, ...] = (), budgets: tuple[BudgetCharge, ...] = (),
                      once: tuple[tuple[str, float], ...] = (), deadline: float = 0.0,
                      check_epoch: bool = False) -> AcquireResult:
        """All scopes, budget charges and one-time claims (``once``: key, TTL — as :meth:`claim_once`)
        are taken together, or nothing is; an already claimed key refuses with limit ``once``.

        ``deadline`` (unix seconds, this host's clock; 0 = none) is checked against the backend's
        own clock when the operation runs: one that runs after its caller gave up refuses with
        ``late``. With ``check_epoch`` the backend refuses with ``epoch`` unless its data is the
        generation :attr:`epoch` names (budgets and nonces must never be judged on lost data).
        If the outcome is unknown (the backend did not answer), whatever the operation may have
        taken is given back by the backend object itself once the backend answers again.

        With budgets, the reservation itself is recorded as the one-time key
        ``reservation_key(lease_id)`` for ``ttl_s``: :meth:`release_and_settle` refunds only while
        that key lives, and removes it, so a call is settled at most once and a reservation whose
        call died (or outlived ``ttl_s``) stays spent. Nothing per call outlives the call."""
        ...

    async def release(self, lease: Lease, actual_tokens: int | None = None) -> None:
        """Free the concurrency slots and correct TPM; budget reservations are *not* touched here."""
        ...

    async def release_and_settle(self, lease: Lease, actual_tokens: int | None, refunds: tuple[int, ...],
                                 also_release: tuple[tuple[Lease, int | None], ...] = ()) -> bool:
        """:meth:`release` ``lease`` (plus ``also_release``) and give back ``refunds[i]`` on
        ``lease.budgets[i]``, in one round trip. A negative refund charges more than was reserved
        (an overrun is charged in full, never dropped). True if this call settled the reservation
        (its reservation key was still there), and then ``lease.budget_values`` holds the counters
        after the settlement; False if it was settled before or had expired (it stays spent)."""
        ...

    async def release_all(self, leases: tuple[tuple[Lease, int | None], ...]) -> None:
        """:meth:`release` for several leases (each with its actual tokens) in one round trip."""
        ...

    async def renew(self, leases: tuple[Lease, ...], ttl_s: float) -> None:
        """Push the expiry of ``leases``' concurrency slots, and of the open budget reservation of
        each lease that carries budgets, to ``ttl_s`` from now — for calls that outlive the TTL they
        were admitted with (long streams). Expired or released leases are not brought back."""
        ...

    async def counters(self, keys: tuple[str, ...]) -> tuple[int, ...]:
        """Current values of budget counters (0 if absent)."""
        ...

    async def adjust_counters(self, deltas: dict[str, int]) -> None:
        """Add ``deltas`` to budget counters (never below 0): settlements re-applied after a rebuild."""
        ...

    async def read_epoch(self) -> Epoch | None:
        """The backend's current epoch (None: its data was lost, or it never had any)."""
        ...

    async def install_epoch(self, epoch: Epoch, counters: dict[str, tuple[int, float]],
                            open_reservations: tuple[str, ...], reservation_ttl_s: float) -> Epoch:
        """Atomically, if the backend has no epoch: set every budget counter (key → value, TTL),
        re-open the reservation keys of calls still in flight, and write ``epoch``. Returns the
        epoch now in force — ``epoch``, or the one another process installed first — and adopts it."""
        ...

    async def claim_once(self, key: str, ttl_s: float) -> bool:
        """True the first time ``key`` is claimed within ``ttl_s`` (request nonces)."""
        ...

    async def wait_for_release(self, timeout_s: float) -> None:
        """Sleep until some lease may have been released (or the timeout passes)."""
        ...

    async def cache_get(self, key: str) -> bytes | None:
        """A cached value (the capability API's response cache), None if absent or expired."""
        ...

    async def cache_set(self, key: str, value: bytes, ttl_s: float) -> None:
        """Store ``value`` under ``key`` for ``ttl_s`` seconds (memory: entries beyond a bound are evicted)."""
        ...

    async def set_cooldown(self, key: str, seconds: float) -> None: ...

    async def clear_cooldown(self, key: str) -> None: ...

    async def usage(self, scope_key: str) -> ScopeUsage: ...

    async def sync_clock(self) -> None:
        """Measure the backend's clock against this host's (deadlines are checked on the backend's)."""
        ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


def reservation_key(call_id: str) -> str:
    """The one-time key that stands for a call's open budget reservation (see ``acquire``)."""
    return f"res:{call_id}"


def minute_window(now_s: float) -> int:
    return int(now_s // 60)
