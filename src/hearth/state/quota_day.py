"""The quota day: the window a quota group's ``daily_tokens`` are counted in.

Providers reset daily quotas at midnight in *their* time zone (often not UTC), so the day runs from
midnight to midnight in a configured zone (``HEARTH_QUOTA_TIME_ZONE``). The backend's Python side
works out where the current day ends and hands that instant to the admission script, which stays
free of time zones: it only compares it with the backend's clock (for ``Retry-After``) and names
the day's counter by it. A day is not always 24 hours — around a DST change it has 23 or 25 —
which is why the boundary comes from the zone's rules and not from ``now // 86400``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from datetime import time as dtime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["QuotaDay"]


class QuotaDay:
    def __init__(self, zone: str = "UTC") -> None:
        try:
            self.zone = ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {zone!r} (an IANA name such as UTC or Asia/Shanghai)") from exc
        self._start = 0.0  # the cached day: [start, end) in unix seconds
        self._end = 0.0

    def end(self, now: float) -> int:
        """Unix seconds at which the day containing ``now`` ends (the next local midnight).

        Called on every admission with a daily limit, so the current day is cached: one comparison."""
        if self._start <= now < self._end:
            return int(self._end)
        today = datetime.fromtimestamp(now, self.zone).date()
        # A midnight that falls in a DST gap resolves (fold=0) to the instant of the transition.
        self._start = datetime.combine(today, dtime(0), self.zone).timestamp()
        self._end = datetime.combine(today + timedelta(days=1), dtime(0), self.zone).timestamp()
        return int(self._end)
