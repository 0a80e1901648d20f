"""Cron expressions: the parser, fire times in UTC, and the documented rules for DST gaps and folds.

The property tests compare the module, which walks local wall times forwards and converts each to an
instant, with a reference that does the opposite: it walks absolute instants minute by minute and
asks what the local clock shows, so the two cannot share a mistake in the conversion.
"""

from __future__ import annotations

import itertools
import re
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearth.workflows.cron import CronError, CronSpec, fire_times, next_fire
from tests.support import examples

UTC_ZONE = ZoneInfo("UTC")
NEW_YORK = ZoneInfo("America/New_York")
SHANGHAI = ZoneInfo("Asia/Shanghai")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp()


def iso(instant: float) -> str:
    return datetime.fromtimestamp(instant, UTC).strftime("%Y-%m-%d %H:%M:%S")


def fires(expr: str, tz: ZoneInfo, after: float, until: float) -> list[str]:
    return [iso(t) for t in fire_times(CronSpec.parse(expr), tz, after, until)]


def local_day(tz: ZoneInfo, day: date) -> tuple[float, float]:
    """(after, until) selecting the fires from local midnight of ``day`` up to, not including, the next."""
    start = datetime(day.year, day.month, day.day, tzinfo=tz).timestamp()
    end = datetime.combine(day + timedelta(days=1), datetime.min.time(), tzinfo=tz).timestamp()
    return start - 0.5, end - 0.5


# --- parsing ---------------------------------------------------------------------------------------


def test_five_fields_fire_at_second_zero() -> None:
    spec = CronSpec.parse("5 4 3 2 1")
    assert spec == CronSpec(seconds=frozenset({0}), minutes=frozenset({5}), hours=frozenset({4}),
                            days_of_month=frozenset({3}), months=frozenset({2}), days_of_week=frozenset({1}),
                            dom_restricted=True, dow_restricted=True)


def test_six_fields_put_the_second_first() -> None:
    spec = CronSpec.parse("30 5 4 3 2 1")
    assert [spec.seconds, spec.minutes, spec.hours] == [{30}, {5}, {4}]
    assert [spec.days_of_month, spec.months, spec.days_of_week] == [{3}, {2}, {1}]


def test_star_allows_the_whole_range_of_each_field() -> None:
    spec = CronSpec.parse("* * * * * *")
    assert spec.seconds == spec.minutes == set(range(60))
    assert spec.hours == set(range(24))
    assert spec.days_of_month == set(range(1, 32))
    assert spec.months == set(range(1, 13))
    assert spec.days_of_week == set(range(7))
    assert not spec.dom_restricted and not spec.dow_restricted


@pytest.mark.parametrize(("minute_field", "minutes"), [
    ("7", {7}),
    ("10-13", {10, 11, 12, 13}),
    ("*/15", {0, 15, 30, 45}),
    ("10-30/10", {10, 20, 30}),
    ("50/4", {50, 54, 58}),
    ("1,2,40-42,*/30", {0, 1, 2, 30, 40, 41, 42}),
    ("5,5,5", {5}),
    ("*/90", {0}),
    ("007", {7}),
])
def test_minute_field_forms(minute_field: str, minutes: set[int]) -> None:
    assert CronSpec.parse(f"{minute_field} * * * *").minutes == minutes


def test_month_and_day_names_are_case_insensitive_and_mix_with_numbers() -> None:
    spec = CronSpec.parse("0 0 * jan,Mar-may,12 mon-WED,fri,6")
    assert spec.months == {1, 3, 4, 5, 12}
    assert spec.days_of_week == {1, 2, 3, 5, 6}


@pytest.mark.parametrize(("day_of_week", "days"), [
    ("7", {0}),
    ("0,7", {0}),
    ("5-7", {5, 6, 0}),
    ("FRI-7", {5, 6, 0}),
    ("*/2", {0, 2, 4, 6}),
    ("4/1", {4, 5, 6}),
    ("7/3", {0}),
])
def test_day_of_week_seven_is_sunday_and_star_spans_sunday_to_saturday(day_of_week: str, days: set[int]) -> None:
    assert CronSpec.parse(f"0 0 * * {day_of_week}").days_of_week == days


@pytest.mark.parametrize(("macro", "expression"), [
    ("@yearly", "0 0 1 1 *"),
    ("@annually", "0 0 1 1 *"),
    ("@monthly", "0 0 1 * *"),
    ("@weekly", "0 0 * * 0"),
    ("@daily", "0 0 * * *"),
    ("@midnight", "0 0 * * *"),
    ("@hourly", "0 * * * *"),
    ("  @Daily ", "0 0 * * *"),
])
def test_macros_are_their_five_field_equivalents(macro: str, expression: str) -> None:
    assert CronSpec.parse(macro) == CronSpec.parse(expression)


@pytest.mark.parametrize(("day_of_month", "day_of_week", "restricted"), [
    ("*", "*", (False, False)),
    ("13", "*", (True, False)),
    ("*", "FRI", (False, True)),
    ("1-31", "0-6", (True, True)),
    ("*/2", "*/3", (False, False)),  # Vixie cron: a field starting with * is unrestricted
])
def test_a_day_field_is_restricted_unless_it_starts_with_star(
        day_of_month: str, day_of_week: str, restricted: tuple[bool, bool]) -> None:
    spec = CronSpec.parse(f"0 0 {day_of_month} * {day_of_week}")
    assert (spec.dom_restricted, spec.dow_restricted) == restricted


def test_fields_may_be_separated_by_any_whitespace() -> None:
    assert CronSpec.parse("\t0  8\n* * 1-5 ") == CronSpec.parse("0 8 * * 1-5")


@pytest.mark.parametrize(("expr", "message"), [
    ("", "expected 5 fields"),
    ("* * * *", "got 4"),
    ("* * * * * * *", "got 7"),
    ("61 * * * *", "minute: 61 is out of range 0-59"),
    ("60 * * * * *", "second: 60 is out of range 0-59"),
    ("0 24 * * *", "hour: 24 is out of range 0-23"),
    ("0 0 0 * *", "day-of-month: 0 is out of range 1-31"),
    ("0 0 32 * *", "day-of-month: 32 is out of range 1-31"),
    ("0 0 * 13 *", "month: 13 is out of range 1-12"),
    ("0 0 * 0 *", "month: 0 is out of range 1-12"),
    ("0 0 * * 8", "day-of-week: 8 is out of range 0-7"),
    ("1,,2 * * * *", "minute: empty item"),
    ("0 , * * *", "hour: empty item"),
    ("*/0 * * * *", "minute: step 0 is not allowed"),
    ("*/ * * * *", "minute: step '' is not a number"),
    ("*/x * * * *", "minute: step 'x' is not a number"),
    ("1/2/3 * * * *", "minute: step '2/3' is not a number"),
    ("30-10 * * * *", "minute: range '30-10' is reversed"),
    ("0 0 * DEC-JAN *", "month: range 'DEC-JAN' is reversed"),
    ("a * * * *", "minute: 'a' is not a number"),
    ("-5 * * * *", "minute: '' is not a number"),
    ("1-2-3 * * * *", "minute: '2-3' is not a number"),
    ("*-5 * * * *", "minute: '*' is not a number"),
    ("+5 * * * *", "minute: '+5' is not a number"),
    ("0 0 * JANUARY *", "month: 'JANUARY' is not a number or a name"),
    ("0 0 * * MONDAY", "day-of-week: 'MONDAY' is not a number or a name"),
    ("0 0 MON * *", "day-of-month: 'MON' is not a number"),
    ("0 0 ? * MON", "day-of-month: '?' is not a number"),
    ("0 0 * * ½", "day-of-week: '½' is not a number or a name"),
    ("@reboot", "unknown macro '@reboot'"),
    ("@daily extra", "unknown macro"),
])
def test_malformed_expressions_are_rejected_naming_the_field(expr: str, message: str) -> None:
    with pytest.raises(CronError, match=re.escape(message)):
        CronSpec.parse(expr)


def test_cron_error_is_a_value_error() -> None:
    assert issubclass(CronError, ValueError)


def test_an_expression_that_can_never_fire_parses() -> None:
    assert CronSpec.parse("0 0 30 2 *").days_of_month == {30}


# --- fire times in UTC -----------------------------------------------------------------------------


def test_every_fifteen_minutes() -> None:
    assert fires("*/15 * * * *", UTC_ZONE, utc(2026, 1, 1, 9, 50), utc(2026, 1, 1, 10, 45)) == [
        "2026-01-01 10:00:00", "2026-01-01 10:15:00", "2026-01-01 10:30:00", "2026-01-01 10:45:00"]


def test_weekdays_at_eight() -> None:
    # 2026-03-02 is a Monday
    assert fires("0 8 * * 1-5", UTC_ZONE, utc(2026, 3, 1), utc(2026, 3, 9)) == [
        "2026-03-02 08:00:00", "2026-03-03 08:00:00", "2026-03-04 08:00:00", "2026-03-05 08:00:00",
        "2026-03-06 08:00:00"]


def test_six_fields_fire_on_the_seconds_given() -> None:
    assert fires("15,45 0 12 * * *", UTC_ZONE, utc(2026, 1, 1), utc(2026, 1, 2, 12, 0, 15)) == [
        "2026-01-01 12:00:15", "2026-01-01 12:00:45", "2026-01-02 12:00:15"]


def test_every_second_schedule_finds_the_next_second_quickly_late_in_the_day() -> None:
    spec = CronSpec.parse("* * * * * *")
    assert next_fire(spec, UTC_ZONE, utc(2026, 1, 1, 23, 59, 58) + 0.25) == utc(2026, 1, 1, 23, 59, 59)
    assert next_fire(spec, UTC_ZONE, utc(2026, 1, 1, 23, 59, 59)) == utc(2026, 1, 2)


def test_the_thirty_first_skips_the_months_without_one() -> None:
    assert fires("0 0 31 * *", UTC_ZONE, utc(2026, 1, 1), utc(2026, 9, 1)) == [
        "2026-01-31 00:00:00", "2026-03-31 00:00:00", "2026-05-31 00:00:00", "2026-07-31 00:00:00",
        "2026-08-31 00:00:00"]


def test_both_day_fields_restricted_fire_when_either_matches() -> None:
    # January 2026: the 13th is a Tuesday; the Fridays are the 2nd, 9th, 16th, 23rd and 30th.
    assert fires("0 0 13 * 5", UTC_ZONE, utc(2026, 1, 1), utc(2026, 1, 31)) == [
        "2026-01-02 00:00:00", "2026-01-09 00:00:00", "2026-01-13 00:00:00", "2026-01-16 00:00:00",
        "2026-01-23 00:00:00", "2026-01-30 00:00:00"]


def test_one_day_field_restricted_alone_decides() -> None:
    assert fires("0 0 13 * *", UTC_ZONE, utc(2026, 1, 1), utc(2026, 1, 31)) == ["2026-01-13 00:00:00"]
    assert len(fires("0 0 * * FRI", UTC_ZONE, utc(2026, 1, 1), utc(2026, 1, 31))) == 5


def test_a_starred_step_day_of_month_is_combined_with_day_of_week_by_and() -> None:
    # Fridays of January 2026 on odd days of the month (*/2 is 1, 3, 5, ...): the 9th and the 23rd.
    assert fires("0 0 */2 * 5", UTC_ZONE, utc(2026, 1, 1), utc(2026, 1, 31)) == [
        "2026-01-09 00:00:00", "2026-01-23 00:00:00"]


def test_asia_shanghai_eight_in_the_morning_is_midnight_utc() -> None:
    assert fires("0 8 * * *", SHANGHAI, utc(2026, 5, 31, 12), utc(2026, 6, 3, 12)) == [
        "2026-06-01 00:00:00", "2026-06-02 00:00:00", "2026-06-03 00:00:00"]


# --- daylight saving time (America/New_York, 2026: spring forward 03-08, fall back 11-01) -----------


def test_a_wall_time_in_the_spring_forward_gap_fires_once_when_the_gap_ends() -> None:
    assert fires("30 2 * * *", NEW_YORK, utc(2026, 3, 7), utc(2026, 3, 10)) == [
        "2026-03-07 07:30:00",  # 02:30 EST
        "2026-03-08 07:00:00",  # 02:30 does not exist: 03:00 EDT, the first instant after the gap
        "2026-03-09 06:30:00",  # 02:30 EDT
    ]


def test_wall_times_that_map_to_the_end_of_the_gap_fire_once_there() -> None:
    # 02:00, 02:30 and 03:00 all become 03:00 EDT (07:00 UTC); 03:30 is 07:30 UTC.
    assert fires("0,30 2,3 * * *", NEW_YORK, *local_day(NEW_YORK, date(2026, 3, 8))) == [
        "2026-03-08 07:00:00", "2026-03-08 07:30:00"]


def test_a_repeated_wall_time_fires_once_at_its_first_occurrence() -> None:
    assert fires("30 1 * * *", NEW_YORK, utc(2026, 10, 31), utc(2026, 11, 3)) == [
        "2026-10-31 05:30:00",  # 01:30 EDT
        "2026-11-01 05:30:00",  # 01:30 EDT, the first of the two 01:30s; not again at 01:30 EST (06:30 UTC)
        "2026-11-02 06:30:00",  # 01:30 EST
    ]


def test_hourly_fires_23_times_on_the_spring_forward_day() -> None:
    # 24 wall hours, but 02:00 does not exist and becomes 03:00 EDT, which the 03:00 wall time also is.
    times = fire_times(CronSpec.parse("0 * * * *"), NEW_YORK, *local_day(NEW_YORK, date(2026, 3, 8)))
    assert len(times) == 23
    assert iso(times[1]) == "2026-03-08 06:00:00" and iso(times[2]) == "2026-03-08 07:00:00"


def test_hourly_fires_24_times_on_the_25_hour_fall_back_day() -> None:
    # One fire per wall hour: 01:00 fires at 01:00 EDT only, not again an hour later at 01:00 EST.
    times = fire_times(CronSpec.parse("0 * * * *"), NEW_YORK, *local_day(NEW_YORK, date(2026, 11, 1)))
    assert len(times) == 24
    assert [iso(t) for t in times[1:3]] == ["2026-11-01 05:00:00", "2026-11-01 07:00:00"]


def test_every_minute_skips_the_repeated_hour_and_collapses_the_missing_one() -> None:
    every_minute = CronSpec.parse("* * * * *")
    fall = fire_times(every_minute, NEW_YORK, *local_day(NEW_YORK, date(2026, 11, 1)))
    assert len(fall) == 24 * 60
    assert not [t for t in fall if utc(2026, 11, 1, 6) <= t < utc(2026, 11, 1, 7)]  # 01:00-01:59 EST
    spring = fire_times(every_minute, NEW_YORK, *local_day(NEW_YORK, date(2026, 3, 8)))
    assert len(spring) == 23 * 60
    assert [iso(t) for t in spring[119:122]] == ["2026-03-08 06:59:00", "2026-03-08 07:00:00", "2026-03-08 07:01:00"]


def test_next_fire_from_the_second_pass_of_the_repeated_hour_waits_for_the_next_wall_hour() -> None:
    # 06:30 UTC is 01:30 EST, the second 01:30; the 01:00 wall time already fired at 01:00 EDT.
    assert next_fire(CronSpec.parse("0 * * * *"), NEW_YORK, utc(2026, 11, 1, 6, 30)) == utc(2026, 11, 1, 7)


def test_fire_times_are_strictly_increasing_across_both_transitions() -> None:
    times = fire_times(CronSpec.parse("*/7 * * * *"), NEW_YORK, utc(2026, 1, 1), utc(2027, 1, 1), limit=100_000)
    assert all(a < b for a, b in itertools.pairwise(times))


# --- next_fire and the window of fire_times --------------------------------------------------------


def test_next_fire_is_none_for_an_expression_that_never_fires() -> None:
    assert next_fire(CronSpec.parse("0 0 30 2 *"), UTC_ZONE, utc(2026, 1, 1)) is None
    assert next_fire(CronSpec.parse("0 0 31 4,6,9,11 *"), NEW_YORK, utc(2026, 1, 1)) is None


def test_next_fire_finds_a_leap_day_years_ahead() -> None:
    assert next_fire(CronSpec.parse("0 12 29 2 *"), UTC_ZONE, utc(2024, 3, 1)) == utc(2028, 2, 29, 12)


def test_next_fire_of_a_yearly_schedule() -> None:
    assert next_fire(CronSpec.parse("@yearly"), NEW_YORK, utc(2026, 1, 1, 5)) == utc(2027, 1, 1, 5)


def test_next_fire_is_strictly_after() -> None:
    daily = CronSpec.parse("@daily")
    assert next_fire(daily, UTC_ZONE, utc(2026, 1, 1)) == utc(2026, 1, 2)
    assert next_fire(daily, UTC_ZONE, utc(2026, 1, 1) - 0.001) == utc(2026, 1, 1)


def test_fire_times_window_excludes_after_and_includes_until() -> None:
    assert fires("0 * * * *", UTC_ZONE, utc(2026, 1, 1, 1), utc(2026, 1, 1, 3)) == [
        "2026-01-01 02:00:00", "2026-01-01 03:00:00"]


def test_fire_times_stops_at_the_limit() -> None:
    every_minute = CronSpec.parse("* * * * *")
    times = fire_times(every_minute, UTC_ZONE, utc(2026, 1, 1), utc(2027, 1, 1), limit=3)
    assert [iso(t) for t in times] == ["2026-01-01 00:01:00", "2026-01-01 00:02:00", "2026-01-01 00:03:00"]
    assert len(fire_times(every_minute, UTC_ZONE, utc(2026, 1, 1), utc(2027, 1, 1))) == 10_000
    assert fire_times(every_minute, UTC_ZONE, utc(2026, 1, 1), utc(2027, 1, 1), limit=0) == []


def test_fire_times_of_an_empty_or_reversed_window_is_empty() -> None:
    every_minute = CronSpec.parse("* * * * *")
    assert fire_times(every_minute, UTC_ZONE, utc(2026, 1, 1), utc(2026, 1, 1)) == []
    assert fire_times(every_minute, UTC_ZONE, utc(2026, 1, 2), utc(2026, 1, 1)) == []


def test_a_negative_limit_is_rejected() -> None:
    with pytest.raises(ValueError, match="limit"):
        fire_times(CronSpec.parse("* * * * *"), UTC_ZONE, utc(2026, 1, 1), utc(2026, 1, 2), limit=-1)


# --- properties: the module against an instant-by-instant reference -------------------------------


def _matches(spec: CronSpec, wall: datetime) -> bool:
    if wall.minute not in spec.minutes or wall.hour not in spec.hours or wall.month not in spec.months:
        return False
    by_month_day = wall.day in spec.days_of_month
    by_weekday = wall.isoweekday() % 7 in spec.days_of_week
    if spec.dom_restricted and spec.dow_restricted:
        return by_month_day or by_weekday
    return by_month_day and by_weekday


def _reference(spec: CronSpec, tz: ZoneInfo, after: int, until: int) -> list[float]:
    """Fires of a five-field spec, walking absolute minutes and reading the local clock at each: an
    instant fires if the clock shows a matching time for the first time, or if the clock just jumped
    over a matching time (a gap)."""
    assert after % 60 == 0 and spec.seconds == {0}
    out: list[float] = []
    previous = datetime.fromtimestamp(after, tz).replace(tzinfo=None)
    for instant in range(after + 60, until + 1, 60):
        now = datetime.fromtimestamp(instant, tz)
        wall = now.replace(tzinfo=None)
        skipped = (previous + timedelta(minutes=k) for k in range(1, (wall - previous) // timedelta(minutes=1)))
        if (now.fold == 0 and _matches(spec, wall)) or any(_matches(spec, w) for w in skipped):
            out.append(float(instant))
        previous = wall
    return out


def _item(low: int, high: int) -> st.SearchStrategy[str]:
    value = st.integers(low, high)
    step = st.integers(1, high - low + 1)
    pair = st.tuples(value, value).map(sorted)
    return st.one_of(
        st.just("*"),
        step.map(lambda n: f"*/{n}"),
        value.map(str),
        pair.map(lambda ab: f"{ab[0]}-{ab[1]}"),
        st.tuples(pair, step).map(lambda p: f"{p[0][0]}-{p[0][1]}/{p[1]}"),
        st.tuples(value, step).map(lambda p: f"{p[0]}/{p[1]}"),
    )


def _field(low: int, high: int) -> st.SearchStrategy[str]:
    return st.lists(_item(low, high), min_size=1, max_size=3).map(",".join)


FIVE_FIELDS = st.tuples(
    _field(0, 59),
    _field(0, 23),
    st.one_of(st.just("*"), _field(1, 31)),
    st.one_of(st.just("*"), _field(1, 12)),
    st.one_of(st.just("*"), _field(0, 7)),
).map(" ".join)

# Days with a transition: spring forward and fall back by an hour (New York, London), by half an hour
# (Lord Howe Island), and at a quarter to the hour (Chatham Islands).
TRANSITIONS = [
    ("America/New_York", date(2026, 3, 8)), ("America/New_York", date(2026, 11, 1)),
    ("Europe/London", date(2026, 3, 29)), ("Europe/London", date(2026, 10, 25)),
    ("Australia/Lord_Howe", date(2026, 4, 5)), ("Australia/Lord_Howe", date(2026, 10, 4)),
    ("Pacific/Chatham", date(2026, 4, 5)), ("Pacific/Chatham", date(2026, 9, 27)),
]
THREE_DAYS = 3 * 86_400


@settings(max_examples=examples(50), deadline=None)
@given(expr=FIVE_FIELDS, start_minute=st.integers(0, 4 * 365 * 1440))
def test_utc_fire_times_agree_with_a_minute_by_minute_reference(expr: str, start_minute: int) -> None:
    spec = CronSpec.parse(expr)
    after = int(utc(2025, 1, 1)) + 60 * start_minute
    until = after + THREE_DAYS
    assert fire_times(spec, UTC_ZONE, after, until) == _reference(spec, UTC_ZONE, after, until)


@settings(max_examples=examples(50), deadline=None)
@given(expr=FIVE_FIELDS, transition=st.sampled_from(TRANSITIONS), start_minute=st.integers(0, 2 * 1440))
def test_fire_times_around_dst_transitions_agree_with_the_reference(
        expr: str, transition: tuple[str, date], start_minute: int) -> None:
    tz = ZoneInfo(transition[0])
    after = int(datetime.combine(transition[1] - timedelta(days=2), datetime.min.time(), tzinfo=UTC).timestamp())
    after += 60 * start_minute
    spec = CronSpec.parse(expr)
    times = fire_times(spec, tz, after, after + THREE_DAYS)
    assert times == _reference(spec, tz, after, after + THREE_DAYS)
    for earlier, later in itertools.pairwise([float(after), *times[:20]]):
        assert next_fire(spec, tz, earlier) == later
