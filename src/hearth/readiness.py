"""What ``/readyz`` reports: whether this process can admit calls, and each dependency's state.

An orchestrator takes an unready replica out of rotation, so "unready" must mean *this process
cannot serve*, not "something somewhere is degraded": a database outage delays request logs and
refuses strict-budget callers (their reservations cannot be made durable), but calls without
budgets still work — that is ``degraded`` (HTTP 200), and taking every replica out at once would
turn it into a full outage. A state backend that does not answer (admission fails closed) or no
enabled endpoint is ``not_ready`` (HTTP 503). A process whose shutdown has begun is ``shutting_down``
(HTTP 503) at once, without asking its dependencies: a load balancer stops sending before the
listener closes (:mod:`hearth.shutdown`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text

from hearth.runtime import Runtime


@dataclass(slots=True, frozen=True)
class Readiness:
    status: str  # ready | degraded | not_ready | shutting_down
    checks: dict[str, str]
    budgeted_calls: str  # admitted | refused

    @property
    def http_status(self) -> int:
        return 503 if self.status in ("not_ready", "shutting_down") else 200

    def as_dict(self) -> dict[str, Any]:
        return {"status": self.status, "checks": self.checks, "budgeted_calls": self.budgeted_calls}


async def readiness(rt: Runtime) -> Readiness:
    if rt.shutdown.begun:
        return Readiness("shutting_down", {"shutdown": "begun"}, "refused")
    checks: dict[str, str] = {}
    try:
        async with rt.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {type(exc).__name__}"
    try:
        await rt.state.ping()
        checks["state_backend"] = "ok"
    except Exception as exc:
        checks["state_backend"] = f"error: {type(exc).__name__}"
    if rt.recovery.rebuilding or rt.state.epoch is None:
        checks["budget_counters"] = "rebuilding"
    else:
        checks["budget_counters"] = "ok"
    ledger_ok = rt.ledger.database_ok or checks["database"] == "ok"  # the next commit will tell
    checks["budget_ledger"] = "ok" if ledger_ok else "error: reservations cannot be committed"
    log_stats = rt.log_writer.stats()
    checks["request_log"] = "ok" if checks["database"] == "ok" else f"delayed: {log_stats.get('pending', 0)} pending"
    n = rt.gateway.registry.healthy_endpoint_count()
    checks["endpoints"] = "ok" if n > 0 else "error: no enabled endpoint"

    has_budgets = bool(rt.gateway.registry.budgets)
    budgets_ok = (checks["database"] == "ok" and checks["budget_ledger"] == "ok"
                  and checks["budget_counters"] == "ok" and checks["state_backend"] == "ok")
    if checks["state_backend"] != "ok" or checks["endpoints"] != "ok":
        status = "not_ready"
    elif checks["database"] != "ok" or (has_budgets and not budgets_ok):
        status = "degraded"
    else:
        status = "ready"
    return Readiness(status, checks, "admitted" if budgets_ok or not has_budgets else "refused")
