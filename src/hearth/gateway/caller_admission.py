"""Caller-level admission: rate limits per caller, tenant, end user and client IP, plus budgets.

Everything a call needs at this level — concurrency slots, RPM and TPM for each subject, the
default one-streaming-generation-per-user rule, and a reservation on every applicable budget —
is taken by *one* atomic state-backend operation. So a request refused by one limit consumes no
other (no RPM spent by a call that then failed its budget), and parallel requests can never
overshoot a limit between a check and a deduction. Concurrency refusals wait briefly
(``limit_wait_s``, default 3 s) for a slot; RPM, TPM and budget refusals answer 429 at once.

A budget reservation is then committed to the ledger (group commit) before this returns, within the
reservation window counted from the moment the admission was sent: no call reaches an upstream with
a reservation the database does not hold, or one a rebuild of the state backend could have missed
(see :mod:`hearth.gateway.budget_ledger`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from hearth.errors import HearthError
from hearth.gateway.budget import Applicable
from hearth.gateway.budget_ledger import (
    BudgetLedger,
    Charge,
    Reservation,
    ReservationNotDurable,
    ReservationSuperseded,
)
from hearth.gateway.endpoint_admission import Admitted, cooldown_key, scopes_for
from hearth.gateway.state_recovery import StateRecovery
from hearth.ids import new_id
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Caller, Endpoint, LimitSet, Model
from hearth.state.base import BudgetCharge, Epoch, Lease, Limit, Scope, StateBackend, StateUnavailable

log = get_logger("hearth.caller_admission")


@dataclass(slots=True)
class CallerGrant:
    call_id: str
    lease: Lease | None
    budgets: Sequence[Applicable] = ()
    charges: tuple[BudgetCharge, ...] = ()
    remaining: list[tuple[Applicable, int]] = field(default_factory=list)
    finished: bool = False
    reservation: Reservation | None = None  # the call's share of a durable ledger reservation
    preadmitted: Admitted | None = None  # the first attempt's endpoint, leased in the same step

    def take_preadmitted(self, model: Model) -> Admitted | None:
        """The pre-admitted endpoint if it serves ``model`` (once; later attempts admit normally)."""
        pre = self.preadmitted
        if pre is None or not any(ep is pre.endpoint for ep in model.endpoints):
            return None
        self.preadmitted = None
        return pre


def _scope(key: str, limits: LimitSet, stream: bool) -> list[Scope]:
    out = []
    if limits.rpm or limits.tpm or limits.concurrency:
        out.append(Scope(key, limits.concurrency, limits.rpm, limits.tpm))
    if stream and limits.stream_concurrency:
        out.append(Scope(key.replace(":", "-stream:", 1), limits.stream_concurrency))
    return out


def caller_scopes(caller: Caller, tenant: str | None, user: str | None, ip: str | None,
                  *, stream: bool) -> tuple[Scope, ...]:
    lim = caller.limits
    scopes = _scope(f"caller:{caller.name}", lim.caller, stream)
    if tenant:
        scopes += _scope(f"tenant:{caller.name}:{tenant}", lim.tenant, stream)
    if user:
        scopes += _scope(f"user:{caller.name}:{user}", lim.user, stream)
    if ip:
        scopes += _scope(f"ip:{ip}", lim.ip, stream)
    return tuple(scopes)


def _refusal_error(scope_key: str, limit: str, retry_after: float, budgets: Sequence[Applicable]) -> HearthError:
    if limit == Limit.ONCE:
        return HearthError("nonce_replayed", "This X-Nonce was already used.")
    if limit == Limit.BUDGET:
        names = [a.budget.name for a in budgets if a.key == scope_key]
        return HearthError("budget_exhausted", f"The budget `{names[0] if names else scope_key}` has no room for "
                           "this call at its max_tokens.", details={"budget": names[0] if names else None})
    kind, _, _ = scope_key.partition(":")
    subject = kind.replace("-stream", "")
    what = "stream_concurrency" if kind.endswith("-stream") else limit
    return HearthError(f"{subject}_{what}_exceeded", retry_after=max(1.0, retry_after))


@dataclass(slots=True, frozen=True)
class CallerAdmission:
    """Everything :func:`admit_caller` takes for one call."""

    scopes: tuple[Scope, ...]
    budgets: Sequence[Applicable]
    charges: tuple[BudgetCharge, ...]
    tokens: int
    nonce: tuple[str, float] | None = None
    endpoint: Endpoint | None = None  # see hearth.gateway.endpoint_admission.first_choice


@dataclass(slots=True, frozen=True)
class AdmissionLimits:
    wait_s: float
    lease_ttl_s: float
    state_timeout_s: float  # a script that runs later than this after it was sent refuses
    reservation_window_s: float = 0.25  # a reservation committed later than this is checked against the epoch


async def admit_caller(state: StateBackend, ledger: BudgetLedger, recovery: StateRecovery, want: CallerAdmission,
                       *, limits: AdmissionLimits) -> CallerGrant:
    """Take every limit and budget reservation (and claim a signed request's nonce) in one step.

    With ``want.endpoint`` that endpoint's slots are tried in the same step; if only the endpoint
    side refuses, the caller's part is taken alone and the attempt loop admits an endpoint the
    ordinary way (waiting, failing over). Raises :class:`HearthError` having taken nothing."""
    call_id = new_id()
    once = (want.nonce,) if want.nonce is not None else ()
    charges = want.charges
    if charges and ledger.backlog > ledger.max_backlog:
        raise HearthError("budget_ledger_backlog", retry_after=2)
    give_up = time.monotonic() + limits.wait_s
    endpoint = want.endpoint
    extra: tuple[Scope, ...] = scopes_for(endpoint) if endpoint is not None else ()
    cooldowns = (cooldown_key(endpoint),) if endpoint is not None else ()
    check_epoch = bool(charges or once)
    epoch_retried = False
    while True:
        known = state.epoch
        sent = time.monotonic()
        try:
            result = await state.acquire(call_id, want.scopes + extra, want.tokens, limits.lease_ttl_s,
                                         cooldown_keys=cooldowns,
                                         budgets=charges, once=once, deadline=time.time() + limits.state_timeout_s,
                                         check_epoch=check_epoch)
        except StateUnavailable as exc:
            raise HearthError("state_backend_unavailable", retry_after=2) from exc
        if result.lease is not None:
            break
        assert result.refusal is not None
        r = result.refusal
        if r.limit == Limit.EPOCH:
            if state.epoch != known and state.epoch is not None and not epoch_retried and not once:
                epoch_retried = True  # another process rebuilt: this process adopted its epoch
                continue
            # A signed request is not retried here: its timestamp must first be checked against the
            # new epoch's loss time (by authentication, when the client retries), or a captured
            # request could be replayed onto the emptied nonce store.
            recovery.trigger()
            raise HearthError("state_backend_reset", retry_after=1)
        if r.limit == Limit.LATE:
            raise HearthError("state_backend_unavailable", retry_after=2)
        if extra and (r.limit == Limit.COOLDOWN or any(s.key == r.scope for s in extra)):
            extra, cooldowns = (), ()  # the endpoint is busy: the attempt loop deals with it
            continue
        remaining = give_up - time.monotonic()
        if r.limit != Limit.CONCURRENCY or remaining <= 0:
            raise _refusal_error(r.scope, r.limit, r.retry_after_s, want.budgets)
        await state.wait_for_release(min(remaining, 0.25))
    lease = result.lease
    grant = CallerGrant(call_id, lease, want.budgets, charges)
    if extra:
        assert endpoint is not None
        grant.lease, endpoint_lease = lease.split(len(want.scopes))
        grant.preadmitted = Admitted(endpoint, endpoint_lease)
    if charges:
        grant.remaining = _left(want.budgets, lease.budget_values)
        await _make_durable(state, ledger, grant, deadline=sent + limits.reservation_window_s, epoch=known)
    return grant


def _left(budgets: Sequence[Applicable], counters: tuple[int, ...]) -> list[tuple[Applicable, int]]:
    """What is left of each budget, given its counter (after a reservation or a settlement)."""
    return [(a, a.budget.limit - v) for a, v in zip(budgets, counters, strict=True)]


async def _make_durable(state: StateBackend, ledger: BudgetLedger, grant: CallerGrant, *, deadline: float,
                        epoch: Epoch | None) -> None:
    """Commit the reservation to the ledger by ``deadline``; if that fails, give back what the backend
    took and raise."""
    rows = tuple(Charge(a.budget.name, c.key, c.amount) for a, c in zip(grant.budgets, grant.charges, strict=True))
    try:
        grant.reservation = await ledger.reserve(grant.call_id, rows, deadline=deadline, epoch=epoch)
    except ReservationNotDurable as exc:
        log.warning("budget_reservation_not_durable", call_id=grant.call_id, reason=str(exc), uncertain=exc.uncertain)
        # Certainly not written: refund. Perhaps written (the commit itself failed or timed out): it
        # stays spent, as the sweeper will record it — the counters and the ledger then agree.
        await finish_caller(state, ledger, grant, None, actual_amounts=() if exc.uncertain else (0,) * len(rows),
                            settle=not exc.uncertain, record=False)
        raise HearthError("budget_ledger_unavailable", retry_after=2) from exc
    except ReservationSuperseded as exc:  # the rebuilt counters never held it (and the ledger refunded it)
        await finish_caller(state, ledger, grant, None, actual_amounts=(), settle=False)
        raise HearthError("state_backend_reset", retry_after=1) from exc
    except asyncio.CancelledError:  # the caller left; the commit may still land: leave it spent
        await asyncio.shield(finish_caller(state, ledger, grant, None, actual_amounts=(), settle=False))
        raise


async def finish_caller(state: StateBackend, ledger: BudgetLedger, grant: CallerGrant, actual_tokens: int | None,
                        *, actual_amounts: tuple[int, ...],
                        also_release: tuple[tuple[Lease, int | None], ...] = (), settle: bool = True,
                        record: bool = True) -> None:
    """Release the caller's slots and settle its budgets once (with ``also_release`` — the endpoint's
    lease — in the same round trip). ``actual_amounts`` is the real cost per budget, charged in full
    even beyond the reservation. ``record=False``: the ledger never held the reservation, so the
    settlement is not recorded either. Never raises: it runs on every exit path."""
    if grant.finished:
        return
    grant.finished = True
    if grant.preadmitted is not None:  # never used (the call failed before its first attempt)
        also_release = (*also_release, (grant.preadmitted.lease, None))
        grant.preadmitted = None
    if grant.lease is None or not grant.charges or not settle:
        if grant.reservation is not None:  # kept whole in the counters, so in the ledger too
            grant.reservation.spent()
        held = tuple((lease, tokens) for lease, tokens in (*also_release, (grant.lease, actual_tokens))
                     if lease is not None and lease.scopes)  # a signed call without limits only claimed its nonce
        try:
            await state.release_all(held)
        except StateUnavailable:
            log.warning("lease_release_failed", hint="the lease expires by its TTL")
        return
    refunds = tuple(c.amount - actual for actual, c in zip(actual_amounts, grant.charges, strict=True))
    lease = grant.lease
    share = grant.reservation if record else None
    try:
        first = await state.release_and_settle(lease, actual_tokens, refunds, also_release)
    except StateUnavailable:
        # Unsettled reservations stay spent (the safe side), in the ledger as in the counters.
        log.warning("budget_settle_failed", call_id=grant.call_id)
        if share is not None:
            share.spent()
        return
    if not first:  # settled before, or the reservation expired: it stays spent
        if share is not None:
            share.spent()
        return
    if lease.budget_values:
        grant.remaining = _left(grant.budgets, lease.budget_values)
    for a, c, actual in zip(grant.budgets, grant.charges, actual_amounts, strict=True):
        if actual > c.amount:
            log.error("budget_overrun", budget=a.budget.name, call_id=grant.call_id, reserved=c.amount,
                      actual=actual, alert=True)
    if share is not None:
        share.settle(actual_amounts, epoch=lease.settled_epoch)
