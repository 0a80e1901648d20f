"""A process's graceful shutdown: begun once (SIGTERM), in phases, within a total bound (seed 002 §6.8).

The order, measured from the moment shutdown begins (``T0``):

1. ``/readyz`` answers 503 ``shutting_down`` at once, so a load balancer stops sending; the server stops
   accepting connections; the worker stops claiming tasks (running ones go on); streams that only
   *follow* something (task, run and job events, a duplicate chat request) end at once with an explicit
   ``service_shutting_down`` event — their clients resume elsewhere with ``Last-Event-ID``;
2. answers in flight (streams, plain calls) may finish until ``T0 + shutdown_stream_grace_s``; a stream
   still open then ends with an explicit ``service_shutting_down`` error event in its own protocol — never
   a silent truncation — and its call is settled and logged like any other;
3. running tasks may finish until ``T0 + task_grace_s``; the rest are handed back (``queued`` again, the
   attempt given back);
4. writers flush (task outcomes, request logs, budget ledger), then backends close (HTTP sessions,
   state backend, database pool);
5. the whole is bounded by ``shutdown_timeout_s``: past it the process exits anyway (a stuck dependency
   must not keep a replica up forever; what was not flushed is recovered as after a crash — leases expire,
   reservations are swept as spent).

:class:`Shutdown` holds the moment and the phase timers; :class:`OpenStreams` is the register of the
open event-stream responses, which the shutdown ends. Both are cheap for the hot path: registering a
stream is a set insertion.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable

from hearth.observability.logging import get_logger

log = get_logger("hearth.shutdown")

EXIT_TIMED_OUT = 70  # the exit status when the total bound forced the exit


class OpenStreams:
    """The open event-stream responses of a process, each with the callback that ends it.

    *Answers* (a model's answer being relayed) are ended when the stream grace is over; *followers*
    (events read from the database or from another stream) at once when shutdown begins."""

    __slots__ = ("answers", "answers_ending", "followers", "followers_ending")

    def __init__(self) -> None:
        self.answers: set[Callable[[], None]] = set()
        self.followers: set[Callable[[], None]] = set()
        self.answers_ending = False
        self.followers_ending = False

    def add(self, stop: Callable[[], None], *, answer: bool) -> None:
        """Register an open stream; one opened after its kind began ending is ended at the next loop turn."""
        (self.answers if answer else self.followers).add(stop)
        if self.answers_ending if answer else self.followers_ending:
            asyncio.get_running_loop().call_soon(stop)

    def discard(self, stop: Callable[[], None]) -> None:
        self.answers.discard(stop)
        self.followers.discard(stop)

    def end_followers(self) -> int:
        self.followers_ending = True
        return _call_all(self.followers)

    def end_answers(self) -> int:
        self.answers_ending = True
        return _call_all(self.answers)

    def __len__(self) -> int:
        return len(self.answers) + len(self.followers)


def _call_all(stops: set[Callable[[], None]]) -> int:
    ended = list(stops)
    for stop in ended:
        try:
            stop()
        except Exception as exc:  # one stream's failure must not keep the others open
            log.warning("stream_stop_failed", error=type(exc).__name__)
    return len(ended)


class Shutdown:
    """When shutdown began, and the timers of its phases (see the module docstring)."""

    def __init__(self, *, stream_grace_s: float, task_grace_s: float, timeout_s: float) -> None:
        self.stream_grace_s = stream_grace_s
        self.task_grace_s = task_grace_s
        self.timeout_s = timeout_s
        self.streams = OpenStreams()
        self.begun_at: float | None = None  # time.monotonic() of the beginning
        self._on_begin: list[Callable[[], None]] = []
        self._grace_timer: asyncio.TimerHandle | None = None
        self._watchdog: threading.Timer | None = None

    @property
    def begun(self) -> bool:
        return self.begun_at is not None

    def on_begin(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when shutdown begins (e.g. the worker stops claiming)."""
        self._on_begin.append(callback)

    def begin(self, *, bound_process: bool = False) -> bool:
        """Begin (in the event loop); False if it had begun already. ``bound_process``: this object owns
        the process's exit — past ``timeout_s`` the process exits even if a phase is stuck (a server run in
        a thread, as in tests, must not)."""
        if self.begun_at is not None:
            if bound_process and self._watchdog is None:
                self._arm_watchdog(max(0.0, self.left(self.timeout_s)))
            return False
        self.begun_at = time.monotonic()
        log.info("shutdown_begun", stream_grace_s=self.stream_grace_s, task_grace_s=self.task_grace_s,
                 timeout_s=self.timeout_s, open_streams=len(self.streams))
        if bound_process:
            self._arm_watchdog(self.timeout_s)
        for callback in self._on_begin:
            try:
                callback()
            except Exception as exc:
                log.warning("shutdown_callback_failed", error=type(exc).__name__)
        self.streams.end_followers()
        self._grace_timer = asyncio.get_running_loop().call_later(self.stream_grace_s, self.end_answers)
        return True

    def end_answers(self) -> None:
        """The stream grace is over (or the server stopped waiting): end every answer still streaming."""
        if self._grace_timer is not None:
            self._grace_timer.cancel()
        ended = self.streams.end_answers()
        if ended:
            log.warning("streams_ended_by_shutdown", streams=ended)

    def left(self, budget_s: float) -> float:
        """Seconds left of a phase that may last ``budget_s`` from the beginning (all of it if not begun)."""
        if self.begun_at is None:
            return budget_s
        return max(0.0, self.begun_at + budget_s - time.monotonic())

    def finished(self) -> None:
        """Every phase is done: the timers go (the process exits on its own)."""
        if self._grace_timer is not None:
            self._grace_timer.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self.begun_at is not None:
            log.info("shutdown_finished", seconds=round(time.monotonic() - self.begun_at, 3))

    def _arm_watchdog(self, after_s: float) -> None:
        timer = threading.Timer(after_s, _exit_timed_out, args=(self.timeout_s,))
        timer.daemon = True
        timer.start()
        self._watchdog = timer


def _exit_timed_out(timeout_s: float) -> None:
    log.error("shutdown_timed_out", timeout_s=timeout_s,
              hint="a phase did not end in time; leases expire and reservations are swept as after a crash")
    os._exit(EXIT_TIMED_OUT)
