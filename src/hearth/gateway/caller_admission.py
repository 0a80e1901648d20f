"""Caller-level admission: rate limits per caller, tenant, end user and client IP, plus budgets.

Everything a call needs at this level — concurrency slots, RPM and TPM for each subject, the
default one-streaming-generation-per-user rule, and a reservation on every applicable budget —
is taken by *one* atomic state-backend operation. So a request refused by one limit consumes no
other (no RPM spent by a call that then failed its budget), and parallel requests can never
overshoot a limit between a check and a deduction. Concurrency refusals wait briefly
(``limit_wait_s``, default 3 s) for a slot; RPM, TPM and budget refusals answer 429 at once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from hearth.errors import HearthError
from hearth.gateway.admission import Admitted, cooldown_key, scopes_for
from hearth.gateway.budget import Applicable
from hearth.gateway.budget_ledger import BudgetLedger
from hearth.ids import new_id
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Caller, Endpoint, LimitSet, Model
from hearth.state.base import BudgetCharge, Lease, Scope, StateBackend, StateUnavailable

log = get_logger("hearth.caller_admission")


@dataclass(slots=True)
class CallerGrant:
    call_id: str
    lease: Lease | None
    budgets: Sequence[Applicable] = ()
    charges: tuple[BudgetCharge, ...] = ()
    remaining: list[tuple[Applicable, int]] = field(default_factory=list)
    finished: bool = False
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
                  stream: bool) -> tuple[Scope, ...]:
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
    if limit == "once":
        return HearthError("nonce_replayed", "This X-Nonce was already used.")
    if limit == "budget":
        names = [a.budget.name for a in budgets if a.key == scope_key]
        return HearthError("budget_exhausted", f"The budget `{names[0] if names else scope_key}` has no room for "
                           "this call at its max_tokens.", details={"budget": names[0] if names else None})
    kind, _, _ = scope_key.partition(":")
    subject = kind.replace("-stream", "")
    what = "stream_concurrency" if kind.endswith("-stream") else limit
    return HearthError(f"{subject}_{what}_exceeded", retry_after=max(1.0, retry_after))


async def admit_caller(state: StateBackend, ledger: BudgetLedger, scopes: tuple[Scope, ...],
                       budgets: Sequence[Applicable], charges: tuple[BudgetCharge, ...], tokens: int,
                       wait_s: float, lease_ttl_s: float, nonce: tuple[str, float] | None = None,
                       endpoint: Endpoint | None = None) -> CallerGrant:
    """Take every limit and budget reservation (and claim a signed request's nonce) in one step.

    With ``endpoint`` (see :func:`~hearth.gateway.admission.first_choice`) that endpoint's slots
    are tried in the same step; if only the endpoint side refuses, the caller's part is taken
    alone and the attempt loop admits an endpoint the ordinary way (waiting, failing over)."""
    call_id = new_id()
    once = (nonce,) if nonce is not None else ()
    if charges and ledger.backlog > ledger.max_backlog:
        raise HearthError("budget_ledger_backlog", retry_after=2)
    give_up = time.monotonic() + wait_s
    extra: tuple[Scope, ...] = scopes_for(endpoint) if endpoint is not None else ()
    cooldowns = (cooldown_key(endpoint),) if endpoint is not None else ()
    while True:
        try:
            result = await state.acquire(call_id, scopes + extra, tokens, lease_ttl_s, cooldowns, charges, once)
        except StateUnavailable as exc:
            raise HearthError("state_backend_unavailable", retry_after=2) from exc
        if result.lease is not None:
            break
        assert result.refusal is not None
        r = result.refusal
        if extra and (r.limit == "cooldown" or any(s.key == r.scope for s in extra)):
            extra, cooldowns = (), ()  # the endpoint is busy: the attempt loop deals with it
            continue
        remaining = give_up - time.monotonic()
        if r.limit != "concurrency" or remaining <= 0:
            raise _refusal_error(r.scope, r.limit, r.retry_after_s, budgets)
        await state.wait_for_release(min(remaining, 0.25))
    lease = result.lease
    grant = CallerGrant(call_id, lease, budgets, charges)
    if extra:
        assert endpoint is not None
        grant.lease, endpoint_lease = lease.split(len(scopes))
        grant.preadmitted = Admitted(endpoint, endpoint_lease)
    for a, c in zip(budgets, charges, strict=True):
        ledger.reserved(call_id, a.budget.name, a.key, c.amount)
    if charges:
        grant.remaining = [(a, a.budget.limit - v) for a, v in zip(budgets, lease.budget_values, strict=True)]
    return grant


async def finish_caller(state: StateBackend, ledger: BudgetLedger, grant: CallerGrant, actual_tokens: int | None,
                        actual_amounts: tuple[int, ...],
                        also_release: tuple[tuple[Lease, int | None], ...] = ()) -> None:
    """Release the caller's slots and settle its budgets once (with ``also_release`` — the endpoint's
    lease — in the same round trip). Never raises: it runs on every exit path."""
    if grant.finished:
        return
    grant.finished = True
    if grant.preadmitted is not None:  # never used (the call failed before its first attempt)
        also_release = (*also_release, (grant.preadmitted.lease, None))
        grant.preadmitted = None
    if grant.lease is None or not grant.charges:
        held = tuple((lease, tokens) for lease, tokens in (*also_release, (grant.lease, actual_tokens))
                     if lease is not None and lease.scopes)  # a signed call without limits only claimed its nonce
        try:
            await state.release_all(held)
        except StateUnavailable:
            log.warning("lease_release_failed", hint="the lease expires by its TTL")
        return
    charged = tuple(min(actual, c.amount) for actual, c in zip(actual_amounts, grant.charges, strict=True))
    refunds = tuple(c.amount - ch for c, ch in zip(grant.charges, charged, strict=True))
    try:
        first = await state.release_and_settle(grant.lease, actual_tokens, refunds, also_release)
    except StateUnavailable:
        # Unsettled reservations stay spent (the safe side); the ledger keeps the reservation.
        # Leases expire by their TTL.
        log.warning("budget_settle_failed", call_id=grant.call_id)
        return
    if not first:
        return
    for a, c, ch, refund, actual in zip(grant.budgets, grant.charges, charged, refunds, actual_amounts, strict=True):
        ledger.settled(grant.call_id, a.budget.name, c.key, ch, refund, max(0, actual - c.amount))


def budget_headers(grant: CallerGrant) -> dict[str, str]:
    """The tightest remaining budget (after this call's reservation), for response headers."""
    if not grant.remaining:
        return {}
    tightest = min(grant.remaining, key=lambda pair: pair[1] / max(1, pair[0].budget.limit))
    a, left = tightest
    amount = f"{max(0, left) / 1_000_000:.6f}" if a.budget.unit == "money" else str(max(0, left))
    return {"x-hearth-budget": a.budget.name, "x-hearth-budget-remaining": amount,
            "x-hearth-budget-unit": a.budget.unit}
