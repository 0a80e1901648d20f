"""The claim cursor: a claim starts where the previous one ended; a task that becomes claimable behind it moves
it back (to the task's key when the news says it, to the head of the queue when it does not), and a claim from
the head comes at least every rescan interval for whatever no news announced."""

from __future__ import annotations

from hearth.tasks.claim_cursor import END, ClaimCursor, before, last_of


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _cursor(rescan_s: float = 1.0) -> tuple[ClaimCursor, Clock]:
    clock = Clock()
    return ClaimCursor(rescan_s=rescan_s, now=clock), clock


def _claimed(cursor: ClaimCursor, keys: list[tuple[int, int]]) -> tuple[int, int] | None:
    start = cursor.begin()
    cursor.end(keys)
    return start


def test_claim_order_is_higher_priority_first_then_lower_fair_seq() -> None:
    assert before((5, 900), (0, 1)) and before((0, 1), (0, 2)) and not before((0, 2), (0, 2))
    assert last_of([(0, 7), (1, 9), (0, 3)]) == (0, 7) and last_of([]) is None
    assert all(before(k, END) for k in [(0, 10**12), (-(2**31), 2**62 - 1), (2**31 - 1, 0)])


def test_a_claim_moves_the_cursor_to_its_last_key() -> None:
    cursor, _ = _cursor()
    assert _claimed(cursor, [(0, 3), (0, 1), (0, 2)]) is None  # the first claim starts at the head
    assert _claimed(cursor, [(0, 4)]) == (0, 3)
    assert _claimed(cursor, []) == (0, 4)  # nothing claimable from there: it stays
    assert cursor.begin() == (0, 4)


def test_a_claim_from_the_head_that_finds_nothing_leaves_the_cursor_past_every_key() -> None:
    cursor, _ = _cursor()
    assert _claimed(cursor, []) is None
    assert cursor.floor == END
    cursor.news((0, 50))  # the next submission
    assert cursor.begin() == (0, 50)


def test_news_of_a_task_behind_the_cursor_moves_it_back_to_that_task_and_news_ahead_does_not() -> None:
    cursor, _ = _cursor()
    _claimed(cursor, [(0, 10)])
    cursor.news((0, 12))
    assert cursor.floor == (0, 10)
    cursor.news((0, 10))  # the cursor is inclusive: a task at its very key is still ahead
    assert cursor.floor == (0, 10)
    cursor.news((0, 4))
    assert cursor.floor == (0, 4)
    cursor.news((1, 99))  # a higher priority is claimed before everything at priority 0
    assert cursor.begin() == (1, 99)


def test_news_without_a_key_sends_the_next_claim_to_the_head() -> None:
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
    cursor.end([(0, 20)])  # ... behind what the claim took
    assert cursor.begin() == (0, 15)

    cursor, _ = _cursor()
    _claimed(cursor, [(0, 10)])
    cursor.begin()
    cursor.news((0, 25))
    cursor.end([(0, 20)])
    assert cursor.begin() == (0, 20)

    cursor, _ = _cursor()
    _claimed(cursor, [])
    cursor.begin()  # from END
    cursor.news((0, 7))
    cursor.end([])
    assert cursor.begin() == (0, 7)

    cursor, _ = _cursor()
    _claimed(cursor, [(0, 10)])
    cursor.begin()
    cursor.news(None)
    cursor.end([(0, 20)])
    assert cursor.begin() is None


def test_a_claim_from_the_head_comes_at_least_every_rescan_interval() -> None:
    cursor, clock = _cursor(rescan_s=1.0)
    _claimed(cursor, [(0, 1)])  # from the head at t = 1000
    clock.t += 0.6
    assert _claimed(cursor, [(0, 2)]) == (0, 1)
    clock.t += 0.5
    assert _claimed(cursor, [(0, 3)]) is None  # 1.1 s after the last claim from the head
    clock.t += 0.9
    assert _claimed(cursor, [(0, 4)]) == (0, 3)


def test_claims_from_the_head_that_became_slow_take_at_most_a_twentieth_of_the_time() -> None:
    cursor, clock = _cursor(rescan_s=1.0)
    assert cursor.begin() is None
    clock.t += 0.5  # a claim from the head that took 0.5 s (millions of dead index entries)
    cursor.end([(0, 1)])
    clock.t += 9.0
    assert _claimed(cursor, [(0, 2)]) == (0, 1)  # 9 s later: still from the cursor
    clock.t += 1.1
    assert cursor.begin() is None  # 10 s (0.5 / 5 %) after that claim ended


def test_a_retry_of_this_worker_sends_the_claim_after_it_falls_due_to_the_head() -> None:
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

