"""The claim cursor: while a backlog drains, a claim starts where the previous one ended; whenever a task may
have become claimable behind it, the next claim starts from the head of the queue again."""

from __future__ import annotations

from hearth.tasks.claim_cursor import ClaimCursor, before, last_of


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _cursor(rescan_s: float = 1.0) -> tuple[ClaimCursor, Clock]:
    clock = Clock()
    return ClaimCursor(rescan_s=rescan_s, now=clock), clock


def _claimed(cursor: ClaimCursor, keys: list[tuple[int, int]], *, full: bool = True) -> tuple[int, int] | None:
    start = cursor.begin()
    cursor.end(keys, full=full)
    return start


def test_claim_order_is_higher_priority_first_then_lower_fair_seq() -> None:
    assert before((5, 900), (0, 1)) and before((0, 1), (0, 2)) and not before((0, 2), (0, 2))
    assert last_of([(0, 7), (1, 9), (0, 3)]) == (0, 7) and last_of([]) is None


def test_a_full_claim_moves_the_cursor_to_its_last_key() -> None:
    cursor, _ = _cursor()
    assert _claimed(cursor, [(0, 3), (0, 1), (0, 2)]) is None  # the first claim starts at the head
    assert _claimed(cursor, [(0, 4), (0, 5)]) == (0, 3)
    assert cursor.begin() == (0, 5)


def test_a_claim_that_fills_fewer_slots_than_asked_sends_the_next_one_to_the_head() -> None:
    cursor, _ = _cursor()
    _claimed(cursor, [(0, 1), (0, 2)])
    _claimed(cursor, [(0, 3)], full=False)
    assert cursor.begin() is None


def test_news_of_a_task_behind_the_cursor_resets_it_and_news_ahead_does_not() -> None:
    cursor, _ = _cursor()
    _claimed(cursor, [(0, 10)])
    cursor.news((0, 12))
    assert cursor.floor == (0, 10)
    cursor.news((0, 10))  # the cursor is inclusive: a task at its very key is still ahead
    assert cursor.floor == (0, 10)
    cursor.news((1, 99))  # a higher priority is claimed before everything at priority 0
    assert cursor.begin() is None


def test_news_without_a_key_resets_the_cursor() -> None:
    cursor, _ = _cursor()
    _claimed(cursor, [(0, 10)])
    cursor.news(None)
    assert cursor.begin() is None


def test_news_during_a_claim_is_weighed_against_what_that_claim_took() -> None:
    # the claim may have read a snapshot from before the announced task was committed
    cursor, _ = _cursor()
    _claimed(cursor, [(0, 10)])
    assert cursor.begin() == (0, 10)
    cursor.news((0, 15))  # ahead of the cursor when it arrives ...
    cursor.end([(0, 20)], full=True)  # ... behind what the claim took
    assert cursor.begin() is None

    cursor, _ = _cursor()
    _claimed(cursor, [(0, 10)])
    cursor.begin()
    cursor.news((0, 25))
    cursor.end([(0, 20)], full=True)
    assert cursor.begin() == (0, 20)

    cursor, _ = _cursor()
    _claimed(cursor, [(0, 10)])
    cursor.begin()
    cursor.news(None)
    cursor.end([(0, 20)], full=True)
    assert cursor.begin() is None


def test_a_full_scan_comes_at_least_every_rescan_interval_while_the_cursor_is_in_use() -> None:
    cursor, clock = _cursor(rescan_s=1.0)
    _claimed(cursor, [(0, 1)])  # from the head at t = 1000
    clock.t += 0.6
    assert _claimed(cursor, [(0, 2)]) == (0, 1)
    clock.t += 0.5
    assert _claimed(cursor, [(0, 3)]) is None  # 1.1 s after the last full scan
    clock.t += 0.9
    assert _claimed(cursor, [(0, 4)]) == (0, 3)


def test_a_retry_of_this_worker_resets_the_cursor_when_it_falls_due() -> None:
    cursor, clock = _cursor(rescan_s=60.0)
    _claimed(cursor, [(0, 10)])
    cursor.due_at(clock.t + 2.0)
    clock.t += 1.0
    assert _claimed(cursor, [(0, 20)]) == (0, 10)
    clock.t += 1.0
    assert cursor.begin() is None


def test_a_failed_claim_sends_the_next_one_to_the_head() -> None:
    cursor, _ = _cursor()
    _claimed(cursor, [(0, 10)])
    cursor.begin()
    cursor.failed()
    assert cursor.begin() is None


def test_a_notification_carries_the_queue_and_the_lowest_key_queued() -> None:
    from hearth.tasks.queue import lowest_keys, notice, read_notice

    rows = [{"queue": "a", "state": "queued", "priority": 0, "fair_seq": 17},
            {"queue": "a", "state": "queued", "priority": 2, "fair_seq": 90},
            {"queue": "b", "state": "queued", "priority": -3, "fair_seq": 5},
            {"queue": "c", "state": "waiting", "priority": 9, "fair_seq": 1}]
    lowest = lowest_keys(rows)
    assert lowest == {"a": (2, 90), "b": (-3, 5)}  # a waiting task is announced when it falls due
    assert read_notice(notice("b", lowest["b"])) == ("b", (-3, 5))
    assert read_notice(notice("ai.default", None)) == ("ai.default", None)
    assert read_notice("ai.default") == ("ai.default", None)  # what a process of an earlier version sends
