"""What caller admission needs to know about a call's subject, worked out once and reused.

A governed call's limits (scopes per caller, tenant, user and IP), its applicable budgets (with the
period's counter keys) and the highest price it could be charged depend only on the registry
snapshot, the caller, tenant, user, client IP, stream flag, the models it may use and the current
minute — not on the request body. Business traffic repeats these few combinations constantly, so
they are memoised: deriving them per call was a measurable share of a governed call's CPU.

The memo is dropped when the registry snapshot changes, and when it grows past ``max_entries``
(many distinct users or IPs), so it never holds stale rules or grows without bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from hearth.gateway.budget import Applicable, applicable_budgets, highest_price
from hearth.gateway.caller_admission import caller_scopes
from hearth.registry.snapshot import Caller, Price, Registry
from hearth.state.base import Scope


@dataclass(slots=True, frozen=True)
class AdmissionPlan:
    scopes: tuple[Scope, ...]
    budgets: tuple[Applicable, ...]
    price: Price | None  # the highest rates among the endpoints the call may use


class AdmissionPlans:
    def __init__(self, max_entries: int = 4096) -> None:
        self._max = max_entries
        self._registry: Registry | None = None
        self._plans: dict[tuple[object, ...], AdmissionPlan] = {}

    def get(self, registry: Registry, caller: Caller, tenant: str | None, user: str | None, *, ip: str | None,
            stream: bool, models: tuple[str, ...]) -> AdmissionPlan:
        if registry is not self._registry or len(self._plans) >= self._max:
            self._plans.clear()
            self._registry = registry
        minute = int(time.time() // 60)  # budget periods roll over on minute boundaries at the latest
        key = (caller.name, tenant, user, ip, stream, models, minute)
        plan = self._plans.get(key)
        if plan is None:
            now = datetime.fromtimestamp(minute * 60, UTC)
            plan = AdmissionPlan(caller_scopes(caller, tenant, user, ip, stream=stream),
                                 tuple(applicable_budgets(registry, caller, tenant, user, now=now)),
                                 highest_price(registry, models))
            self._plans[key] = plan
        return plan
