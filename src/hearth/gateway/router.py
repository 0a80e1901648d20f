"""Endpoint choice: which endpoints of a model's pool to try, in which order.

Lower ``priority`` numbers are tried first. Within a priority tier the order is a weighted random
draw without replacement, where an endpoint's chance is its configured weight scaled down by how
loaded it is (in-flight versus max concurrency, seen by this process), by recent errors, and by
latency relative to the tier. At low load the draw follows the configured weights exactly.

The random draws come from ``rng``, owned by the :class:`~hearth.gateway.service.Gateway` (one per
process), so a test passes a seeded ``random.Random`` and gets the same order every run. Which
endpoints *can* serve a request (their capabilities) is decided before this, by narrowing the pool
(:mod:`hearth.gateway.endpoint_capabilities`); here only health, priority, weight and load count.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

from hearth.gateway.health import HealthBook
from hearth.registry.snapshot import Endpoint


def _score(ep: Endpoint, health: HealthBook, now: float, tier_latency: float) -> float:
    h = health.get(ep.name)
    load = h.in_flight / ep.max_concurrency if ep.max_concurrency else 0.0
    score = ep.weight * max(0.05, 1.0 - load) / (1.0 + h.decayed_errors(now))
    if tier_latency > 0 and h.latency_ms > 0:
        score *= min(2.0, max(0.5, tier_latency / h.latency_ms))
    return score


def order_candidates(pool: Iterable[Endpoint], health: HealthBook, now: float, exclude: set[str],
                     *, rng: random.Random) -> list[Endpoint]:
    """The endpoints of ``pool`` to try, best first: enabled, not in ``exclude``, routable by ``health``
    at ``now``; lower priority tiers first, a weighted draw without replacement within a tier."""
    draw = rng.random
    tiers: dict[int, list[Endpoint]] = {}
    for ep in pool:
        if ep.enabled and ep.name not in exclude and health.can_try(ep.name, now):
            tiers.setdefault(ep.priority, []).append(ep)
    ordered: list[Endpoint] = []
    for prio in sorted(tiers):
        tier = tiers[prio]
        if len(tier) == 1:
            ordered.append(tier[0])
            continue
        latencies = sorted(health.get(e.name).latency_ms for e in tier if health.get(e.name).latency_ms > 0)
        tier_latency = latencies[len(latencies) // 2] if latencies else 0.0
        weights = [_score(e, health, now, tier_latency) for e in tier]
        while tier:
            pick = draw() * sum(weights)
            idx = 0
            for idx, w in enumerate(weights):  # noqa: B007
                pick -= w
                if pick <= 0:
                    break
            ordered.append(tier.pop(idx))
            weights.pop(idx)
    return ordered
