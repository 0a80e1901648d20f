"""Where a queue's next claim may start: past the tasks this worker has already claimed.

Claims take the lowest claim keys first — priority (highest first), then fair position (``fair_seq``) — by
walking the claim index from its start. Every task claimed leaves its ``queued`` entry behind in that index
until vacuum removes it, and while a long transaction anywhere pins the database's vacuum horizon, vacuum
removes none: each claim then steps over the entries of *every* task claimed since the pin (visiting their
heap rows to learn they are dead), a cost that grows without bound — 20 ms per claim after 50,000 tasks,
84 ms after 120,000, measured. So a claim starts where the previous one ended (the last key it took:
:class:`ClaimCursor`), and its index scan begins there by the B-tree's descent rather than by a walk.

Everything claimable lies at or after the cursor, except what became claimable behind it. Each way is
covered:

* a submission: its notification carries the lowest key it queued (:func:`news`); a key behind the cursor
  moves the cursor back to it (not to the head: the queue ahead of that key is known);
* any other move into ``queued`` (a retry or hand-back, the reaper's promotions and requeues, an operator's
  redrive): its notification carries no key and sends the next claim to the head of the queue;
* a news item that arrives while a claim is in flight is weighed against that claim's last key at its end
  (the claim may have read a snapshot from before the task was committed);
* a retry of this worker's that falls due later (``run_after``) sends the next claim after that to the head
  (:func:`due_at`);
* anything else — a row that a claim skipped because another transaction held it locked, a lost
  notification — by a claim from the head every ``rescan_s`` (50 ms), or, once claims from the head have
  become slow (a pinned horizon), as often as keeps them to ``HEAD_SHARE`` of the time.

Claims from the head also keep the claim index clean when nothing pins the horizon: a scan that meets an
entry of a row dead to every transaction marks it dead in the index, so later scans skip it without a visit
(without them, entries behind the cursor would wait for vacuum, and every other scan of the index — the
admission count — would pay for them).

A claim from the head that finds nothing leaves the cursor at :data:`END`, past every key: an idle worker's
polls then read nothing, and the next submission's news brings the cursor back to its key.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable

ClaimKey = tuple[int, int]  # (priority, fair_seq): claims take higher priority first, then lower fair_seq
HEAD_SHARE = 0.05  # the most of a worker's time that claims from the head of the queue may take
RESCAN_S = 0.05  # how often a claim starts from the head while that is cheap
# past every key: where a claim from the head that found nothing leaves the cursor (a claim from here reads nothing)
END: ClaimKey = (-(2**31), 2**62)


def before(a: ClaimKey, b: ClaimKey) -> bool:
    """Whether a task with key ``a`` is claimed before one with key ``b``."""
    return (-a[0], a[1]) < (-b[0], b[1])


def last_of(keys: Iterable[ClaimKey]) -> ClaimKey | None:
    """The key claimed last, in claim order, of ``keys`` (None if there are none)."""
    return max(keys, key=lambda k: (-k[0], k[1]), default=None)


class ClaimCursor:
    """The start of one queue's next claim, for one worker; ``now`` is the worker's clock."""

    def __init__(self, *, now: Callable[[], float], rescan_s: float = RESCAN_S) -> None:
        self._rescan_s = rescan_s
        self._now = now
        self._floor: ClaimKey | None = None
        self._rescan_at = math.inf
        self._due: list[float] = []  # when this worker's own delayed retries become claimable (a heap)
        self._claiming = False
        self._from_head = False
        self._began = 0.0
        self._keyless_news = False  # news without a key arrived during the claim in flight
        self._lowest_news: ClaimKey | None = None  # the lowest keyed news during the claim in flight

    @property
    def floor(self) -> ClaimKey | None:
        return self._floor

    def begin(self) -> ClaimKey | None:
        """A claim starts: the key it starts at (inclusive), or None to claim from the head of the queue."""
        now = self._now()
        due = False
        while self._due and self._due[0] <= now:
            heapq.heappop(self._due)
            due = True
        if due or now >= self._rescan_at:
            self._floor = None
        self._claiming = True
        self._from_head = self._floor is None
        self._began = now
        self._keyless_news = False
        self._lowest_news = None
        return self._floor

    def end(self, keys: Iterable[ClaimKey]) -> None:
        """The claim took tasks with ``keys`` (none: nothing was claimable from where it started)."""
        self._claiming = False
        if self._keyless_news:
            self._floor = None
            return
        last = last_of(keys)
        floor = last if last is not None else END if self._from_head else self._floor
        if self._lowest_news is not None and floor is not None and before(self._lowest_news, floor):
            floor = self._lowest_news
        self._floor = floor
        if self._from_head:
            now = self._now()
            self._rescan_at = now + max(self._rescan_s, (now - self._began) / HEAD_SHARE)

    def failed(self) -> None:
        """The claim failed (its effect unknown): start the next one from the head."""
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
            self._floor = key
        if self._claiming and (self._lowest_news is None or before(key, self._lowest_news)):
            self._lowest_news = key

    def due_at(self, at: float) -> None:
        """One of this worker's tasks was put back in the queue to become claimable at ``at``."""
        heapq.heappush(self._due, at)
