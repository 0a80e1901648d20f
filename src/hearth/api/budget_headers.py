"""``x-hearth-budget*`` response headers: the tightest budget a call was charged against."""

from __future__ import annotations

from hearth.gateway.budget import Applicable


def budget_headers(left: list[tuple[Applicable, int]]) -> dict[str, str]:
    """The tightest remaining budget — after the call's settlement on non-stream answers, after its
    reservation on streams (whose headers go out before the usage is known)."""
    if not left:
        return {}
    tightest = min(left, key=lambda pair: pair[1] / max(1, pair[0].budget.limit))
    a, remaining = tightest
    amount = f"{max(0, remaining) / 1_000_000:.6f}" if a.budget.unit == "money" else str(max(0, remaining))
    return {"x-hearth-budget": a.budget.name, "x-hearth-budget-remaining": amount,
            "x-hearth-budget-unit": a.budget.unit}
