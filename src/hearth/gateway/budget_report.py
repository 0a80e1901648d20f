"""What ``GET /api/v1/budgets`` reports: for each budget that applies, this period's numbers.

``used`` is the live counter in the state backend (what admission checks); ``spent`` and
``reserved`` come from the ledger (settled charges and reservations still open — in flight; those
whose process died are closed as spent by the sweeper after the lease TTL). Settlements are written in
batches, so it may trail the live counter by a fraction of a second.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.gateway.budget import NO_SUBJECT, counter_key, period_key, utc_now
from hearth.gateway.budget_balances import Balance, balances
from hearth.registry.snapshot import MICRO, Budget, Registry
from hearth.state.base import StateBackend


def _amount(budget: Budget, value: int) -> float | int:
    return value / MICRO if budget.unit == "money" else value


async def budget_status(registry: Registry, state: StateBackend, engine: AsyncEngine, caller: str | None,
                        *, tenant: str | None, user: str | None) -> list[dict[str, Any]]:
    now = utc_now()
    rows: list[tuple[Budget, str, str, str]] = []
    callers = [caller] if caller else sorted(registry.callers_by_name)
    for b in registry.budgets:
        suffix, _ = period_key(b.period, now)
        for name in callers:
            if b.caller not in ("*", name):
                continue
            if b.scope == "caller":
                subjects = [name]
            else:
                wanted = tenant if b.scope == "tenant" else user
                if b.subject != "*":
                    subjects = [b.subject] if wanted in (None, b.subject) else []
                else:
                    subjects = [wanted or NO_SUBJECT]
            for subject in subjects:
                rows.append((b, name, subject, counter_key(b.name, name, subject, suffix)))
    keys = [r[3] for r in rows]
    live = await state.counters(tuple(keys))
    found = await balances(engine, keys)
    out = []
    for (b, name, subject, key), used in zip(rows, live, strict=True):
        bal = found.get(key, Balance(0, 0, 0))
        out.append({"budget": b.name, "caller": name, "scope": b.scope, "subject": subject, "period": b.period,
                    "period_key": key.rsplit("|", 1)[-1], "unit": b.unit, "limit": _amount(b, b.limit),
                    "used": _amount(b, used), "spent": _amount(b, bal.spent),
                    "reserved": _amount(b, bal.reserved), "remaining": _amount(b, max(0, b.limit - used))})
    return out
