"""Noticing that the state backend lost its data, and rebuilding budget counters before admitting.

Redis only accelerates; the ledger is the authority. When Redis restarts empty, fails over or is
flushed, the epoch key is gone (or is another generation than the one this process knows):
every admission that involves money or a nonce is refused by the script itself, and this object
rebuilds — reading the ledger (:func:`~hearth.gateway.budget_balances.rebuild_snapshot`) and
installing counters, the reservation keys of calls in flight and a new epoch in one atomic step
(the first process to finish wins; the others adopt its epoch). Until then budgeted and signed
calls get 503 ``state_backend_reset`` with Retry-After. The epoch is also recorded in the database,
so a backend without one is told apart: new (this database never saw an epoch; nothing was lost)
or emptied (signed requests older than the rebuild are refused). An emptied shared backend is read
from the ledger only one *reservation window* after the loss was noticed: every reservation that let
a call proceed was committed within that window of its admission, and every admission the lost
backend took ran before the loss, so the rebuild counts them all (see
:mod:`hearth.gateway.budget_ledger`). A watcher reads the epoch every
``check_s`` so a loss is noticed within a second even without traffic, in every process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.gateway.budget import period_key, utc_now
from hearth.gateway.budget_balances import last_epoch, rebuild_snapshot, record_epoch
from hearth.ids import new_id
from hearth.observability.logging import get_logger
from hearth.registry.snapshot import Registry
from hearth.state.base import Epoch, StateBackend, StateUnavailable, reservation_key

log = get_logger("hearth.state_recovery")


class StateRecovery:
    def __init__(self, state: StateBackend, engine: AsyncEngine, registry: Callable[[], Registry], *,
                 reservation_ttl_s: float, open_within_s: float, reservation_window_s: float,
                 check_s: float = 1.0) -> None:
        self._state = state
        self._engine = engine
        self._registry = registry
        self._reservation_ttl_s = reservation_ttl_s
        self._open_within_s = open_within_s
        self._window_s = reservation_window_s
        self._check_s = check_s
        self._running: asyncio.Task[None] | None = None
        self._watcher: asyncio.Task[None] | None = None
        self.rebuilds = 0
        self.last_rebuild_at: float | None = None

    @property
    def rebuilding(self) -> bool:
        return self._running is not None and not self._running.done()

    async def ensure(self) -> None:
        """Adopt the backend's epoch, or rebuild if it has none (start-up; waits for the result)."""
        self.trigger()
        assert self._running is not None
        await asyncio.shield(self._running)

    def trigger(self) -> None:
        """Look again (once at a time): adopt a newer epoch, or rebuild if there is none."""
        if not self.rebuilding:
            self._running = asyncio.get_running_loop().create_task(self._recover(), name="state-recovery")
            self._running.add_done_callback(_log_failure)

    async def _recover(self) -> None:
        current = await self._state.read_epoch()
        if current is None:
            noticed = time.monotonic()
            previous = await last_epoch(self._engine)
            if previous is not None and self._state.shared:
                # Reservations admitted just before the loss may still be committing: wait them out.
                await asyncio.sleep(max(0.0, noticed + self._window_s - time.monotonic()))
            current = await self._rebuild(first=previous is None)
        elif current != self._state.epoch:
            log.info("state_epoch_adopted", epoch=current.id)
        self._state.epoch = current

    async def _rebuild(self, *, first: bool) -> Epoch:
        started = time.monotonic()
        snap = await rebuild_snapshot(self._engine, self._open_within_s)
        names = {b.name: b for b in self._registry().budgets}
        counters: dict[str, tuple[int, float]] = {}
        for key, bal in snap.balances.items():
            budget = names.get(key.split("|", 1)[0])
            if budget is None:
                continue
            suffix, ttl = period_key(budget.period, utc_now())
            if key.endswith("|" + suffix):  # past periods are never charged again
                counters[key] = (bal.used, ttl)
        now = time.time()
        if first:
            lost_at = 0.0  # this deployment never had state before: nothing was lost, no nonce to forget
        elif self._state.name == "memory":
            # Its data is "lost" only by a process restart, never within a second of the previous
            # process ending: requests signed in the second it started are not refused.
            lost_at = float(int(now))
        else:
            lost_at = round(now, 3)
        epoch = Epoch(new_id(), lost_at, snap.mark)
        installed = await self._state.install_epoch(epoch, counters,
                                                    tuple(reservation_key(c) for c in snap.open_calls),
                                                    self._reservation_ttl_s)
        if installed == epoch:
            await record_epoch(self._engine, installed.encode())
            self.rebuilds += 1
            self.last_rebuild_at = time.time()
            log.warning("state_backend_rebuilt", counters=len(counters), open_reservations=len(snap.open_calls),
                        ledger_mark=snap.mark, ms=round((time.monotonic() - started) * 1000, 1))
        return installed

    def start_watching(self) -> None:
        self._watcher = asyncio.get_running_loop().create_task(self._watch(), name="state-epoch-watch")

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self._check_s)
            with contextlib.suppress(StateUnavailable):
                if await self._state.read_epoch() != self._state.epoch:
                    self.trigger()

    async def stop(self) -> None:
        for task in (self._watcher, self._running):
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task


def _log_failure(task: asyncio.Task[None]) -> None:
    if task.cancelled():
        return
    exc = task.exception()
    if exc is not None:
        log.warning("state_recovery_failed", error=type(exc).__name__)
