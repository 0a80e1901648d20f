"""Strict budgets (seed 004 §3): which budgets a call is charged against, and how much.

A call reserves ``bound(prompt) + n × max_tokens`` (:func:`hearth.wire.tokens.output_reservation`) — in
tokens, or priced at the highest rate of any endpoint it may use — on *every* applicable budget, atomically
with its rate limits (see :mod:`hearth.gateway.caller_admission`). Settlement charges the real usage in full;
what the reservation did not cover is recorded as ``overrun`` and alerted (with the default ``bound``
estimate only a provider billing beyond the request's own text can cause one). A reservation that is never
settled (its process died) stays spent.

Money is counted in integer millionths of the currency unit (``MICRO``); since prices are per
1M tokens, ``tokens × price_per_1M`` is exactly the cost in micro-units.
"""

from __future__ import annotations

import calendar
import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from hearth.registry.snapshot import MICRO, Budget, Caller, Endpoint, Price, Registry
from hearth.state.base import BudgetCharge

_GRACE_S = 2 * 86400  # keep a period's counter a while after it ends, for late settlements and queries
NO_SUBJECT = "_none"  # the bucket for calls that name no tenant/user: they cannot escape a budget


def period_key(period: str, now: datetime) -> tuple[str, float]:
    """The counter suffix for ``now`` and how long that counter should live (0 = forever)."""
    minute = int(now.timestamp() // 60)
    cached = _PERIOD_CACHE.get((period, minute))
    if cached is None:
        cached = _period_key(period, now)
        if len(_PERIOD_CACHE) > 64:
            _PERIOD_CACHE.clear()
        _PERIOD_CACHE[(period, minute)] = cached
    return cached


_PERIOD_CACHE: dict[tuple[str, int], tuple[str, float]] = {}


def _period_key(period: str, now: datetime) -> tuple[str, float]:
    ts = now.timestamp()
    if period == "day":
        end = datetime(now.year, now.month, now.day, tzinfo=UTC).timestamp() + 86400
        return now.strftime("d%Y%m%d"), end - ts + _GRACE_S
    if period == "month":
        days = calendar.monthrange(now.year, now.month)[1]
        end = datetime(now.year, now.month, 1, tzinfo=UTC).timestamp() + days * 86400
        return now.strftime("m%Y%m"), end - ts + _GRACE_S
    return "total", 0.0


@dataclass(slots=True, frozen=True)
class Applicable:
    budget: Budget
    subject: str
    key: str
    ttl_s: float


def applicable_budgets(registry: Registry, caller: Caller, tenant: str | None, user: str | None,
                       *, now: datetime) -> list[Applicable]:
    out: list[Applicable] = []
    for b in registry.budgets:
        if b.caller not in ("*", caller.name):
            continue
        if b.scope == "caller":
            subject = caller.name
        else:
            value = (tenant if b.scope == "tenant" else user) or NO_SUBJECT
            if b.subject != "*" and b.subject != value:
                continue
            subject = value
        suffix, ttl = period_key(b.period, now)
        out.append(Applicable(b, subject, counter_key(b.name, caller.name, subject, suffix), ttl))
    return out


def counter_key(budget: str, caller: str, subject: str, suffix: str) -> str:
    """The counter's name, bounded in length whatever the tenant or user id (those are callers' input)."""
    if len(subject) > 64 or "|" in subject:
        subject = "sha256:" + hashlib.sha256(subject.encode()).hexdigest()[:40]
    return f"{budget}|{caller}|{subject}|{suffix}"


def highest_price(registry: Registry, models: tuple[str, ...]) -> Price | None:
    """The highest input and output rates among every endpoint the call might use (a safe reservation)."""
    found = [p for name in models for ep in (registry.models[name].endpoints if name in registry.models else ())
             if (p := registry.price_for(ep, name)) is not None]
    if not found:
        return None
    return Price("reservation", max(p.input_per_1m for p in found), max(p.output_per_1m for p in found),
                 per_image=max(p.per_image for p in found))


def micro_cost(price: Price | None, prompt_tokens: int, completion_tokens: int, images: int = 0) -> int:
    """Micro-units; ``images`` generated images at the price's ``per_image`` (a price per image, not per 1M)."""
    if price is None:
        return 0
    return math.ceil(prompt_tokens * price.input_per_1m + completion_tokens * price.output_per_1m
                     + images * round(price.per_image * MICRO))


def reservation_charges(budgets: Sequence[Applicable], tokens: int, money: int,
                        approx: tuple[int, int] | None = None) -> tuple[BudgetCharge, ...]:
    """What each budget reserves: ``tokens``/``money`` from the prompt's upper bound, or for a budget
    with ``estimate: approx`` the cheaper ``approx`` (tokens, money) pair when given."""
    out = []
    for a in budgets:
        t, m = approx if approx is not None and a.budget.estimate == "approx" else (tokens, money)
        out.append(BudgetCharge(a.key, a.budget.limit, t if a.budget.unit == "tokens" else m, a.ttl_s))
    return tuple(out)


def actual_amounts(budgets: Sequence[Applicable], registry: Registry, endpoint: Endpoint | None, model: str | None,
                   *, prompt_tokens: int, completion_tokens: int, images: int = 0) -> tuple[int, ...]:
    price = registry.price_for(endpoint, model or "") if endpoint is not None else None
    money = micro_cost(price, prompt_tokens, completion_tokens, images)
    return tuple(prompt_tokens + completion_tokens if a.budget.unit == "tokens" else money for a in budgets)


def utc_now() -> datetime:
    return datetime.now(UTC)
