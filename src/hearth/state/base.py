"""The state backend interface: shared, atomic counters for admission.

Two implementations answer the same contract: :mod:`hearth.state.memory` (one process) and
:mod:`hearth.state.redis` (many processes, atomic Lua). Admission asks for *all* of a call's
scopes at once (endpoint and its quota group): either every scope has room and all are taken,
or nothing is taken and the refusal names the scope and the limit.

Concurrency leases carry an expiry so a crashed process's leases free themselves. RPM and TPM
are counted in fixed one-minute windows; TPM is reserved on the estimate and corrected on release.
"""

from __future__ import annotations

from dataclasses import dataclass, field
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
    budget_values: tuple[int, ...] = ()  # each budget counter right after this lease's charge

    def split(self, n: int) -> tuple[Lease, Lease]:
        """Two leases from one acquisition: the first ``n`` scopes (with the budgets) and the rest.

        Both keep the lease id — scope keys are disjoint, so each releases only its own slots."""
        return (Lease(self.lease_id, self.scopes[:n], self.tokens, self.window, budgets=self.budgets,
                      budget_values=self.budget_values),
                Lease(self.lease_id, self.scopes[n:], self.tokens, self.window))


@dataclass(slots=True, frozen=True)
class Refusal:
    scope: str
    limit: str  # concurrency | rpm | tpm | cooldown | budget | once
    retry_after_s: float = 0.0


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
    extra: dict[str, float] = field(default_factory=dict)


class StateBackend(Protocol):
    name: str

    async def acquire(self, lease_id: str, scopes: tuple[Scope, ...], tokens: int, ttl_s: float,
                      cooldown_keys: tuple[str, ...] = (), budgets: tuple[BudgetCharge, ...] = (),
                      once: tuple[tuple[str, float], ...] = ()) -> AcquireResult:
        """All scopes, budget charges and one-time claims (``once``: key, TTL — as :meth:`claim_once`)
        are taken together, or nothing is; an already claimed key refuses with limit ``once``.

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
        ``lease.budgets[i]``, in one round trip. True if this call settled the reservation (its
        reservation key was still there); False if it was settled before or had expired."""
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

    async def seed_counter(self, key: str, value: int, ttl_s: float) -> bool:
        """Set a budget counter only if it does not exist (rebuilding from the ledger); True if set."""
        ...

    async def claim_once(self, key: str, ttl_s: float) -> bool:
        """True the first time ``key`` is claimed within ``ttl_s`` (request nonces)."""
        ...

    async def wait_for_release(self, timeout_s: float) -> None:
        """Sleep until some lease may have been released (or the timeout passes)."""
        ...

    async def set_cooldown(self, key: str, seconds: float) -> None: ...

    async def clear_cooldown(self, key: str) -> None: ...

    async def usage(self, scope_key: str) -> ScopeUsage: ...

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


def reservation_key(call_id: str) -> str:
    """The one-time key that stands for a call's open budget reservation (see ``acquire``)."""
    return f"res:{call_id}"


def minute_window(now_s: float) -> int:
    return int(now_s // 60)
