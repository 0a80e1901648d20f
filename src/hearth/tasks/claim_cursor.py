"""Where a queue's next claim may start: past the tasks this worker has already claimed.

Claims take the lowest claim keys first — priority (highest first), then fair position (``fair_seq``) — by
walking the claim index from its start. Every task claimed leaves its ``queued`` entry behind in that index
until vacuum removes it, and while a long transaction anywhere pins the database's vacuum horizon, vacuum
removes none: each claim then steps over the entries of *every* task claimed since the pin (visiting their
heap rows to learn they are dead), a cost that grows without bound — 20 ms per claim after 50,000 tasks,
84 ms after 120,000, measured. So while a backlog drains, a claim starts where the previous one ended (the
last key it took: :class:`ClaimCursor`), and the index scan begins there, on PostgreSQL's B-tree descent
rather than by walking (the approach of Que's "cursor" locker).

A task can become claimable *behind* the cursor. Each way is covered:

* a submission with a lower key (a higher priority, another user's earlier fair position): its
  notification carries the lowest key it queued (:func:`news`), and a key behind the cursor resets it;
* any other move into ``queued`` (a retry or hand-back, the reaper's promotions and requeues, an operator's
  redrive): its notification carries no key and resets the cursor;
* a news item that arrives while a claim is in flight is compared with that claim's last key at its end (the
  claim may have read a snapshot from before the task was committed);
* a retry of this worker's, due later (``run_after``), resets the cursor when it falls due (:func:`due_at`);
* anything else — a row that a claim skipped because another transaction held it locked, a notification
  lost — by a full claim at least every ``rescan_s`` (the worker's poll interval) while the cursor is in use.

A claim that fills fewer slots than asked means the backlog ahead of the cursor is drained: the next claim
starts from the beginning of the queue again. An idle queue therefore never uses a cursor.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable

ClaimKey = tuple[int, int]  # (priority, fair_seq): claims take higher priority first, then lower fair_seq


def before(a: ClaimKey, b: ClaimKey) -> bool:
    """Whether a task with key ``a`` is claimed before one with key ``b``."""
    return (-a[0], a[1]) < (-b[0], b[1])


def last_of(keys: Iterable[ClaimKey]) -> ClaimKey | None:
    """The key claimed last, in claim order, of ``keys`` (None if there are none)."""
    return max(keys, key=lambda k: (-k[0], k[1]), default=None)


class ClaimCursor:
    """The start of one queue's next claim, for one worker; ``now`` is the worker's clock."""

    def __init__(self, *, rescan_s: float, now: Callable[[], float]) -> None:
        self._rescan_s = rescan_s
        self._now = now
        self._floor: ClaimKey | None = None
        self._rescan_at = math.inf
        self._due: list[float] = []  # when this worker's own delayed retries become claimable (a heap)
        self._claiming = False
        self._keyless_news = False  # news without a key arrived during the claim in flight
        self._lowest_news: ClaimKey | None = None  # the lowest keyed news during the claim in flight

    @property
    def floor(self) -> ClaimKey | None:
        return self._floor

    def begin(self) -> ClaimKey | None:
        """A claim starts: the key it starts at (inclusive), or None to claim from the start of the queue."""
        now = self._now()
        due = False
        while self._due and self._due[0] <= now:
            heapq.heappop(self._due)
            due = True
        if due or now >= self._rescan_at:
            self._floor = None
        self._claiming = True
        self._keyless_news = False
        self._lowest_news = None
        return self._floor

    def end(self, keys: Iterable[ClaimKey], *, full: bool) -> None:
        """The claim took tasks with ``keys``; ``full`` if it filled every slot it asked for."""
        self._claiming = False
        last = last_of(keys)
        missed = self._keyless_news or (self._lowest_news is not None and last is not None
                                        and before(self._lowest_news, last))
        if not full or last is None or missed:
            self._floor = None
            return
        if self._floor is None:  # this claim started from the beginning: the next full one is due in rescan_s
            self._rescan_at = self._now() + self._rescan_s
        self._floor = last

    def failed(self) -> None:
        """The claim failed (its effect unknown): start the next one from the beginning."""
        self._claiming = False
        self._floor = None

    def news(self, key: ClaimKey | None) -> None:
        """Tasks were queued: the lowest key among them, or None if it is not known."""
        if key is None:
            self._floor = None
            if self._claiming:
                self._keyless_news = True
            return
        if self._floor is not None and before(key, self._floor):
            self._floor = None
        if self._claiming and (self._lowest_news is None or before(key, self._lowest_news)):
            self._lowest_news = key

    def due_at(self, at: float) -> None:
        """One of this worker's tasks was put back in the queue to become claimable at ``at``."""
        heapq.heappush(self._due, at)
