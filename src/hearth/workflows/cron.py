"""Cron expressions: parsing, and the instants a schedule fires at in an IANA time zone.

Pure functions for the schedule engine: :meth:`CronSpec.parse` turns an expression into the sets of
values each field allows; :func:`next_fire` and :func:`fire_times` turn a spec, a zone and a window
into absolute instants (epoch seconds, floats). There is no clock and no I/O here: the caller says
what "now" is, so the engine's catch-up and misfire policies can ask about any past window.

Syntax
------
Five fields ``minute hour day-of-month month day-of-week`` (the second is then 0), or six with the
second FIRST: ``second minute hour day-of-month month day-of-week``. A field is a comma list of items;
an item is ``*``, a number ``a``, a range ``a-b``, or one of those with a step: ``*/n``, ``a-b/n``,
``a/n`` (``a`` up to the field's maximum). Months take JAN-DEC and days of the week SUN-SAT, in any
case; day-of-week 7 is Sunday, as 0 is (``*`` and ``a/n`` run to 6, Saturday). The macros are
``@yearly`` (= ``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (= ``@midnight``) and ``@hourly``.
A malformed expression raises :class:`CronError`, whose message names the field and the reason. An
expression that can never fire (``0 0 30 2 *``) is valid: :func:`next_fire` returns None for it.

Days follow Vixie cron: when day-of-month and day-of-week are both restricted, a day matches if
EITHER matches (``0 0 13 * 5`` fires on every 13th and on every Friday); otherwise both must match.
A field is unrestricted when it starts with ``*``, as in Vixie cron's code: ``*/2`` counts as
unrestricted, so ``0 0 */2 * 1`` fires on Mondays that fall on an odd day of the month.

Time zones and daylight saving time (documented product behaviour)
-----------------------------------------------------------------
* A schedule is read in the local wall time of its zone: matching days and times of day are found on
  the local calendar, then each wall time is converted to an absolute instant.
* A wall time that does not exist (in a spring-forward gap, such as 02:30 on the day New York's
  clocks jump from 02:00 to 03:00) fires ONCE, at the first instant after the gap (03:00 local). If
  several wall times of the schedule map to that instant (02:00, 02:30 and 03:00, say), it fires
  once: there are never two fires at one instant.
* A wall time that occurs twice (in a fall-back fold, such as 01:30 in New York on the first Sunday
  of November) fires ONCE, at its first occurrence. Schedules that fire every minute or every hour
  therefore do NOT fire during the repeated hour's second pass: an hourly schedule fires 24 times on
  the 25-hour fall-back day (once per wall hour) and 23 times on the 23-hour spring-forward day.
* The instants are strictly increasing, with no duplicates.

:func:`next_fire` looks at most five years ahead (5 × 366 days); a schedule that fires less often
than that, or never, gives None. Instants must lie within :mod:`datetime`'s years 1-9999.

Cost: only matching local days are visited (a month the schedule excludes is skipped whole), and in a
matching day the sorted hours × minutes × seconds are enumerated; the first candidate after a given
instant is found by bisection, so asking about an every-second schedule costs a few dozen conversions.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

__all__ = ["CronError", "CronSpec", "fire_times", "next_fire"]

_HORIZON_SECONDS = 5 * 366 * 86_400
# fire_times looks no further, so that ``after + horizon`` near datetime's limit gives None, not OverflowError.
_LATEST_INSTANT = datetime(9999, 1, 1, tzinfo=UTC).timestamp()
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_ONE_DAY = timedelta(days=1)
# In a fold a wall time on a later local date than ``until``'s can still map to an instant before it;
# folds are at most a day long, so two days past ``until``'s date no wall time can.
_DAY_SLACK = timedelta(days=2)


class CronError(ValueError):
    """A malformed cron expression; the message names the field and the reason."""


@dataclass(frozen=True, slots=True)
class _Field:
    """One position of the expression: its name for messages, bounds, and the names it accepts."""

    name: str
    low: int
    high: int
    open_high: int  # where ``*`` and ``a/n`` end; below ``high`` only for day-of-week (7 is Sunday again)
    names: Mapping[str, int]


_MONTH_NAMES = {name: number for number, name in enumerate(
    ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1)}
_DAY_NAMES = {name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}

_SECOND = _Field("second", 0, 59, 59, {})
_MINUTE = _Field("minute", 0, 59, 59, {})
_HOUR = _Field("hour", 0, 23, 23, {})
_DAY_OF_MONTH = _Field("day-of-month", 1, 31, 31, {})
_MONTH = _Field("month", 1, 12, 12, _MONTH_NAMES)
_DAY_OF_WEEK = _Field("day-of-week", 0, 7, 6, _DAY_NAMES)

_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


@dataclass(frozen=True, slots=True)
class CronSpec:
    """A parsed cron expression: the values each field allows (day-of-week 0 = Sunday .. 6).

    ``dom_restricted`` and ``dow_restricted`` say whether day-of-month and day-of-week were written
    as something other than ``*``-based; when both are, a day matches if either field matches.
    """

    seconds: frozenset[int]
    minutes: frozenset[int]
    hours: frozenset[int]
    days_of_month: frozenset[int]
    months: frozenset[int]
    days_of_week: frozenset[int]
    dom_restricted: bool
    dow_restricted: bool

    @classmethod
    def parse(cls, expr: str) -> CronSpec:
        """Parse five fields, six (second first) or a macro; raise :class:`CronError` if malformed."""
        fields = _expand_macro(expr.strip()).split()
        if len(fields) == 5:
            fields = ["0", *fields]
        elif len(fields) != 6:
            raise CronError(f"expected 5 fields (minute hour day-of-month month day-of-week) or 6 (second "
                            f"first), got {len(fields)} in {expr!r}")
        second, minute, hour, day_of_month, month, day_of_week = fields
        return cls(
            seconds=_parse_field(second, _SECOND),
            minutes=_parse_field(minute, _MINUTE),
            hours=_parse_field(hour, _HOUR),
            days_of_month=_parse_field(day_of_month, _DAY_OF_MONTH),
            months=_parse_field(month, _MONTH),
            days_of_week=frozenset(day % 7 for day in _parse_field(day_of_week, _DAY_OF_WEEK)),
            dom_restricted=not day_of_month.startswith("*"),
            dow_restricted=not day_of_week.startswith("*"),
        )


def _expand_macro(text: str) -> str:
    if not text.startswith("@"):
        return text
    try:
        return _MACROS[text.lower()]
    except KeyError:
        raise CronError(f"unknown macro {text!r} (known: {', '.join(_MACROS)})") from None


def _parse_field(text: str, field: _Field) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{field.name}: empty item in list {text!r}")
        values.update(_parse_item(item, field))
    return frozenset(values)


def _parse_item(item: str, field: _Field) -> range:
    base, slash, step_text = item.partition("/")
    step = _parse_step(step_text, field) if slash else 1
    if base == "*":
        low, high = field.low, field.open_high
    elif "-" in base:
        first, _, last = base.partition("-")
        low, high = _parse_value(first, field), _parse_value(last, field)
        if low > high:
            raise CronError(f"{field.name}: range {base!r} is reversed ({low} > {high})")
    else:
        low = _parse_value(base, field)
        high = max(low, field.open_high) if slash else low
    return range(low, high + 1, step)


def _parse_step(text: str, field: _Field) -> int:
    if not _is_number(text):
        raise CronError(f"{field.name}: step {text!r} is not a number")
    step = int(text)
    if step == 0:
        raise CronError(f"{field.name}: step 0 is not allowed")
    return step


def _parse_value(text: str, field: _Field) -> int:
    if _is_number(text):
        value = int(text)
    elif text.upper() in field.names:
        value = field.names[text.upper()]
    else:
        kind = "a number or a name" if field.names else "a number"
        raise CronError(f"{field.name}: {text!r} is not {kind}")
    if not field.low <= value <= field.high:
        raise CronError(f"{field.name}: {value} is out of range {field.low}-{field.high}")
    return value


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def next_fire(spec: CronSpec, tz: ZoneInfo, after: float) -> float | None:
    """The first fire instant strictly after ``after``, or None if there is none within five years."""
    fires = fire_times(spec, tz, after, after + _HORIZON_SECONDS, limit=1)
    return fires[0] if fires else None


def fire_times(spec: CronSpec, tz: ZoneInfo, after: float, until: float, *, limit: int = 10_000) -> list[float]:
    """Every fire instant ``t`` with ``after < t <= until``, ascending, at most ``limit`` of them.

    The limit bounds the work as well as the answer: the walk stops at the limit-th fire.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    fires: list[float] = []
    until = min(until, _LATEST_INSTANT)
    if limit == 0 or until <= after:
        return fires
    times = _TimesOfDay.of(spec)
    first_day = datetime.fromtimestamp(after, tz).date()
    last_day = datetime.fromtimestamp(until, tz).date() + _DAY_SLACK
    for day in _matching_days(spec, first_day, last_day):
        for instant in _fires_on(day, times, tz, fires[-1] if fires else after):
            if instant > until:
                return fires
            fires.append(instant)
            if len(fires) == limit:
                return fires
    return fires


@dataclass(frozen=True, slots=True)
class _TimesOfDay:
    """The wall-clock times a matching day offers, in order and addressable by index (for bisection)."""

    hours: tuple[int, ...]
    minutes: tuple[int, ...]
    seconds: tuple[int, ...]

    @classmethod
    def of(cls, spec: CronSpec) -> _TimesOfDay:
        return cls(tuple(sorted(spec.hours)), tuple(sorted(spec.minutes)), tuple(sorted(spec.seconds)))

    def __len__(self) -> int:
        return len(self.hours) * len(self.minutes) * len(self.seconds)

    def seconds_of_day(self, index: int) -> int:
        rest, second = divmod(index, len(self.seconds))
        hour, minute = divmod(rest, len(self.minutes))
        return self.hours[hour] * 3600 + self.minutes[minute] * 60 + self.seconds[second]


def _matching_days(spec: CronSpec, first: date, last: date) -> Iterator[date]:
    """The local dates from ``first`` to ``last`` whose month and day the schedule allows."""
    day = first
    while day <= last:
        if day.month not in spec.months:
            day = date(day.year + day.month // 12, day.month % 12 + 1, 1)
            continue
        if _day_matches(spec, day):
            yield day
        day += _ONE_DAY


def _day_matches(spec: CronSpec, day: date) -> bool:
    by_month_day = day.day in spec.days_of_month
    by_weekday = day.isoweekday() % 7 in spec.days_of_week
    if spec.dom_restricted and spec.dow_restricted:
        return by_month_day or by_weekday
    return by_month_day and by_weekday


def _fires_on(day: date, times: _TimesOfDay, tz: ZoneInfo, after: float) -> Iterator[float]:
    """The fire instants of one matching local day that come after ``after``, strictly increasing.

    Instants never decrease as wall time advances (see :func:`_instant`), which makes the bisection
    valid and reduces deduplication to skipping an instant equal to the previous one.
    """
    previous = after
    for index in range(_first_index_after(day, times, tz, after), len(times)):
        instant = _instant(tz, day, times.seconds_of_day(index))
        if instant > previous:
            yield instant
            previous = instant


def _first_index_after(day: date, times: _TimesOfDay, tz: ZoneInfo, after: float) -> int:
    if len(times) == 0 or _instant(tz, day, times.seconds_of_day(0)) > after:
        return 0
    low, high = 1, len(times)
    while low < high:
        middle = (low + high) // 2
        if _instant(tz, day, times.seconds_of_day(middle)) > after:
            high = middle
        else:
            low = middle + 1
    return low


def _instant(tz: ZoneInfo, day: date, seconds_of_day: int) -> float:
    """The instant a local wall time fires at: itself; its first occurrence if repeated; the end of
    the gap if skipped. As a function of wall time it never decreases."""
    hour, rest = divmod(seconds_of_day, 3600)
    minute, second = divmod(rest, 60)
    wall = (day.toordinal() - _EPOCH_ORDINAL) * 86_400 + seconds_of_day
    # fold=0 reads a wall time with the offset from before a transition, fold=1 with the one after.
    by_old_offset = wall - _offset_seconds(tz, datetime(day.year, day.month, day.day, hour, minute, second))
    by_new_offset = wall - _offset_seconds(tz, datetime(day.year, day.month, day.day, hour, minute, second, fold=1))
    if by_old_offset <= by_new_offset:  # equal, or repeated and by_old_offset is the first occurrence
        return float(by_old_offset)
    return _gap_end(tz, by_new_offset, by_old_offset)


def _offset_seconds(tz: ZoneInfo, wall: datetime) -> int:
    offset = tz.utcoffset(wall)
    if offset is None:  # ZoneInfo always has one; the type says otherwise
        raise ValueError(f"{tz} gives no UTC offset for {wall}")
    return offset // timedelta(seconds=1)


def _gap_end(tz: ZoneInfo, before: int, after: int) -> float:
    """The first instant of the new offset, known to lie in ``(before, after]``; bisected in whole seconds."""
    old_offset = datetime.fromtimestamp(before, tz).utcoffset()
    while after - before > 1:
        middle = (before + after) // 2
        if datetime.fromtimestamp(middle, tz).utcoffset() == old_offset:
            before = middle
        else:
            after = middle
    return float(after)
