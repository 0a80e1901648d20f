"""The polled alert conditions, checked as a scheduler pass every ``check_interval_s``:

* ``breaker_open`` — an endpoint whose circuit has not closed for ``breaker_open_s`` (this process's breakers:
  they are per process by design, see :mod:`hearth.gateway.health`);
* ``budget_threshold`` — a budget's live counter (one state-backend round trip for every counter whose key the
  registry names: per-caller budgets and fixed subjects) at or past a threshold share of its limit; the
  highest threshold crossed is the alert's subject, so 80 % and 100 % are separate alerts;
* ``queue_backlog`` — a configured queue whose oldest due task has waited longer than its threshold;
* ``review_expiring`` / ``review_expired`` — per review queue, open items expiring within the lead time, and
  items that expired undecided since the previous pass.

Each finding is raised through :func:`hearth.observability.alerts.record`, whose window keeps a condition that
persists from alerting more than once per window. Every query is a range over an index; a failed check (the
state backend away) is logged and skipped, the others still run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.alerting.config import AlertConfig
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.gateway.budget import counter_key, period_key
from hearth.gateway.health import HealthBook
from hearth.observability import alerts
from hearth.observability.alerts import Alert
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import MICRO, Budget, Registry
from hearth.state.base import StateBackend
from hearth.store.db import write_transaction
from hearth.tasks.queue import oldest_due
from hearth.workflows.reviews import ReviewService

log = get_logger("hearth.alerting.checks")


class AlertChecks:
    """One process's polled alert checks; :meth:`run_pass` is a :class:`hearth.workflows.scheduler.Scheduler`
    pass (it returns at once until ``check_interval_s`` has passed since the last check)."""

    def __init__(self, engine: AsyncEngine, config: AlertConfig, *, registry: Callable[[], Registry],
                 health: HealthBook, state: StateBackend, reviews: ReviewService,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self._engine = engine
        self._config = config
        self._registry = registry
        self._health = health
        self._state = state
        self._reviews = reviews
        self._clock = clock
        self._last: float | None = None

    async def run_pass(self) -> int:
        """Check every condition if it is time; how many alerts were raised (not counting suppressed repeats)."""
        now = self._clock.now()
        if self._last is not None and now - self._last < self._config.check_interval_s:
            return 0
        since = self._last if self._last is not None else now - self._config.check_interval_s
        self._last = now
        found = self._breakers(now)
        for check in (self._budgets(now), self._queues(now), self._review_items(now, since)):
            found += await _guarded(check)
        raised = 0
        if found:
            async with write_transaction(self._engine) as conn:  # in key order: processes lock keys alike
                for alert in sorted(found, key=lambda a: alerts.dedup_key(a.kind, a.subject)):
                    if await alerts.record(conn, alert, now=now, window_s=self._config.window_s) is not None:
                        raised += 1
        return raised

    def _breakers(self, now: float) -> list[Alert]:
        return [Alert("breaker_open", name, "P2", {"endpoint": name, "opened_at": opened_at,
                                                   "open_s": round(now - opened_at, 3)})
                for name, opened_at in self._health.open_since(now, self._config.breaker_open_s)]

    async def _budgets(self, now: float) -> list[Alert]:
        rows = _budget_counters(self._registry(), datetime.fromtimestamp(now, UTC))
        if not rows or not self._config.budget_thresholds:
            return []
        used = await self._state.counters(tuple(key for _, _, key in rows))
        found = []
        for (budget, caller, key), value in zip(rows, used, strict=True):
            crossed = [t for t in self._config.budget_thresholds if value >= t * budget.limit]
            if not crossed:
                continue
            top = crossed[-1]
            found.append(Alert("budget_threshold", f"{key}@{top:g}", "P1" if top >= 1.0 else "P2", {
                "budget": budget.name, "caller": caller, "scope": budget.scope, "period": budget.period,
                "period_key": key.rsplit("|", 1)[-1], "unit": budget.unit, "threshold": top,
                "limit": _amount(budget, budget.limit), "used": _amount(budget, value)}))
        return found

    async def _queues(self, now: float) -> list[Alert]:
        limits = self._config.queue_age_s
        if not limits:
            return []
        oldest = await oldest_due(self._engine, sorted(limits), now=now)
        return [Alert("queue_backlog", queue, "P2", {"queue": queue, "oldest_age_s": round(now - since, 3),
                                                      "threshold_s": limits[queue]})
                for queue, since in oldest.items() if now - since > limits[queue]]

    async def _review_items(self, now: float, since: float) -> list[Alert]:
        expiring, expired = await self._reviews.expiry_by_queue(now=now, lead_s=self._config.review_lead_s,
                                                                expired_since=since)
        found = [Alert("review_expiring", queue, "P3", {"queue": queue, "items": count, "first_expires_at": first,
                                                        "lead_s": self._config.review_lead_s})
                 for queue, (count, first) in sorted(expiring.items())]
        found += [Alert("review_expired", queue, "P2", {"queue": queue, "items": count, "since": since})
                  for queue, count in sorted(expired.items())]
        return found


async def _guarded(check: Awaitable[list[Alert]]) -> list[Alert]:
    try:
        return await check
    except Exception as exc:  # one check's failure (the state backend away) does not hide the others
        log.warning("alert_check_failed", error=type(exc).__name__)
        return []


def _budget_counters(registry: Registry, now: datetime) -> list[tuple[Budget, str, str]]:
    """(budget, caller, counter key) of every counter the registry names — per-caller budgets and budgets of a
    fixed tenant or user. Budgets "for each" tenant or user (``subject: *``) have a counter per subject seen,
    an unbounded set, and are not checked here."""
    out = []
    for b in registry.budgets:
        if b.scope != "caller" and b.subject == "*":
            continue
        suffix, _ = period_key(b.period, now)
        for name in sorted(registry.callers_by_name) if b.caller == "*" else [b.caller]:
            out.append((b, name, counter_key(b.name, name, name if b.scope == "caller" else b.subject, suffix)))
    return out


def _amount(budget: Budget, value: int) -> float | int:
    return value / MICRO if budget.unit == "money" else value
