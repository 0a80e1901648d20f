"""The worker: claims tasks for its free slots, runs their handlers, writes outcomes fenced by attempt.

One :class:`Worker` per process serves several queues, each with its own concurrency (a queue of
IO-bound model calls high, CPU-bound parsing low). Per queue, two loops: the *claim* loop claims as many
tasks as there are free slots, woken by a freed slot, a notification (:mod:`hearth.tasks.notify`) or the
poll timer; the *write* loop writes the outcomes gathered since its last write (plain successes on
PostgreSQL in one autocommit statement, the rest in a transaction with their follow-ups) and the progress
reports that are due — so when the worker is busy, completions are batched, and when it is idle a lone
completion is written at once. A write lets a running or due claim go first: freed slots wait for tasks,
outcomes only for their rows.

Leases: a claim leases a task for ``lease_s``; the heartbeat loop renews every held lease every
``heartbeat_s`` (at most a third of the lease, checked at start) and learns which tasks were cancelled;
a task the heartbeat no longer holds (another attempt owns it) is stopped and its result discarded.
The reaper loop — in every worker, they never block each other — requeues tasks whose lease expired,
fails them once out of attempts, and holds them for an operator when their type is not safe to repeat.
It also moves ``waiting`` tasks whose time has come to ``queued``.

Shutdown (:meth:`Worker.stop`) stops claiming, lets running tasks finish for ``grace_s``, then hands the
rest back (``queued`` again, or ``hold`` when not safe to repeat) before the process exits. A process that
shuts down gracefully calls :meth:`Worker.stop_claiming` as soon as shutdown begins (``hearth.shutdown``). A
task handed back keeps its attempt: the claim counted one, so the hand-back allows one more (the attempt
number itself only grows — it fences writes). A task lost with a crashed worker does count the attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.errors import HearthError, UpstreamHTTPError
from hearth.ids import new_id
from hearth.observability import tracing
from hearth.observability.logging import get_logger
from hearth.observability.metrics import count_lease_expirations, count_retry
from hearth.store.db import stop_writer_task, write_transaction
from hearth.tasks import queue as task_queue
from hearth.tasks.admission import count_requeued
from hearth.tasks.claim_cursor import ClaimCursor
from hearth.tasks.notify import Ended, PgListener, Wakeups
from hearth.tasks.retry import DEFAULT_POLICY, RetryPolicy, as_hearth_error, decide
from hearth.tasks.states import TERMINAL
from hearth.tasks.terminal import TerminalRules, after_moves, follows_up
from hearth.tasks.transitions import AttemptEnd, Move, apply, apply_now
from hearth.tasks.types import TaskCancelled, TaskContext, TaskLeaseLost, TaskRecord, TaskType, TaskTypes

log = get_logger("hearth.tasks.worker")
PROGRESS_DELAY_S = 0.2  # how long a progress report waits before it is written (a task that succeeds sooner: never)
CLAIM_FIRST_S = 0.05  # longest an outcome write waits for a claim that is running or due
REAPER_SHARE = 0.05  # the most of the time the reaper's pass may take (see reaper_pause)


def reaper_pause(reap_s: float, took_s: float) -> float:
    """The wait before the reaper's next pass: ``reap_s``, or longer when a pass has become slow. Its lease scan
    reads an index entry for every task that has run since vacuum last cleaned up — while a long transaction
    pins the vacuum horizon that grows with every task (0.6 s per pass after a million tasks, measured), and
    every worker process reaps every second. Expired leases are then found later, never missed."""
    return max(reap_s, took_s / REAPER_SHARE)


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    queues: Mapping[str, int]  # queue name → concurrency
    lease_s: float = 9.0
    heartbeat_s: float = 3.0
    poll_s: float = 1.0
    reap_s: float = 1.0
    grace_s: float = 10.0
    rules: TerminalRules = field(default_factory=TerminalRules)
    default_retry: RetryPolicy = DEFAULT_POLICY
    worker_id: str = ""
    running_per_key: Mapping[str, int] = field(default_factory=dict)  # queue → most tasks running per user

    def check(self) -> None:
        if self.heartbeat_s > self.lease_s / 3 + 1e-9:
            raise SystemExit(f"task heartbeat ({self.heartbeat_s:g} s) must be at most a third of the lease "
                             f"({self.lease_s:g} s): a worker that misses two heartbeats would lose its tasks")
        for name, n in self.queues.items():
            if n < 1:
                raise SystemExit(f"queue {name!r}: concurrency must be at least 1")


def default_worker_id() -> str:
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{new_id()[-6:]}"


@dataclass(slots=True)
class _Running:
    ctx: TaskContext
    task: asyncio.Task[Move | None]
    started_at: float
    repeat_safe: bool
    claimed_at: float  # loop time: a heartbeat begun before the claim does not know the task yet
    handing_back: bool = False


class Worker:
    def __init__(self, engine: AsyncEngine, types: TaskTypes, services: Any, config: WorkerConfig, *,
                 wakeups: Wakeups | None = None, clock: Clock = SYSTEM_CLOCK, database_url: str | None = None) -> None:
        config.check()
        self.engine = engine
        self.types = types
        self.services = services
        self.config = config
        self.id = config.worker_id or default_worker_id()
        self.clock = clock
        self.wakeups = wakeups or Wakeups()
        self._listener = (PgListener(database_url, self.wakeups)
                          if database_url and engine.dialect.name == "postgresql" else None)
        by_queue = types.on_queues(config.queues)
        self.runners = {q: _QueueRunner(self, q, n, by_queue[q]) for q, n in config.queues.items()}
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        self.heartbeats_paused = False  # tests: a worker that is alive but has stopped renewing (frozen)
        self.wakeups.on_cancel(self._cancel_requested)

    async def start(self) -> None:
        if self._listener is not None:
            self._listener.start()
        for runner in self.runners.values():
            runner.start()
        self._loops.append(asyncio.create_task(self._heartbeats(), name="task-heartbeat"))
        self._loops.append(asyncio.create_task(self._reaper(), name="task-reaper"))
        log.info("worker_started", worker=self.id, queues=dict(self.config.queues))

    @property
    def running(self) -> int:
        return sum(len(r.running) for r in self.runners.values())

    def stop_claiming(self) -> None:
        """No new claims from now on (shutdown has begun); running tasks go on."""
        for runner in self.runners.values():
            runner.claiming = False

    async def stop(self, *, grace_s: float | None = None) -> None:
        """Stop claiming, wait up to ``grace_s`` (else the configured one) for running tasks, hand back the rest,
        stop the loops."""
        self.stop_claiming()
        running = [r.task for runner in self.runners.values() for r in runner.running.values()]
        if running:
            await asyncio.wait(running, timeout=self.config.grace_s if grace_s is None else grace_s)
        for runner in self.runners.values():
            await runner.hand_back()
        for runner in self.runners.values():
            await runner.stop()
        self._stopping.set()
        for task in self._loops:  # they end at their next wait; cancelled only if stuck (never mid-commit)
            await stop_writer_task(task, grace_s=5.0)
        if self._listener is not None:
            await self._listener.stop()
        log.info("worker_stopped", worker=self.id)

    def _cancel_requested(self, task_id: str) -> None:
        for runner in self.runners.values():
            held = runner.running.get(task_id)
            if held is not None:
                held.ctx.cancel()

    async def _pause(self, seconds: float) -> bool:
        """Wait ``seconds``; False once the worker is stopping."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)
        return not self._stopping.is_set()

    async def _heartbeats(self) -> None:
        loop = asyncio.get_running_loop()
        while await self._pause(self.config.heartbeat_s):
            if self.heartbeats_paused:
                continue
            began = loop.time()
            held = {tid: (runner, r) for runner in self.runners.values() for tid, r in runner.running.items()
                    if not r.handing_back}
            if not held:
                continue
            try:
                async with write_transaction(self.engine) as conn:
                    alive = await task_queue.heartbeat(conn, worker=self.id, held=list(held),
                                                       now=self.clock.now(), lease_s=self.config.lease_s)
            except Exception as exc:
                log.warning("task_heartbeat_failed", worker=self.id, error=type(exc).__name__, tasks=len(held))
                continue
            for tid, (runner, r) in held.items():
                state = alive.get(tid)
                if state is None or state[0] != r.ctx.task.attempt:
                    if r.claimed_at < began and runner.running.get(tid) is r:
                        log.warning("task_lease_lost", task_id=tid, attempt=r.ctx.task.attempt, worker=self.id)
                        r.ctx.lose_lease()
                        r.task.cancel()
                elif state[1]:
                    r.ctx.cancel()

    async def _reaper(self) -> None:
        loop = asyncio.get_running_loop()
        pause = self.config.reap_s
        while await self._pause(pause):
            began = loop.time()
            slowed = pause > self.config.reap_s
            try:
                await self.reap_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed pass (the database away) says nothing about the pace
                log.warning("task_reaper_failed", worker=self.id, error=type(exc).__name__)
                pause = self.config.reap_s
                continue
            pause = reaper_pause(self.config.reap_s, loop.time() - began)
            if pause > self.config.reap_s and not slowed:
                log.warning("task_reaper_slow", worker=self.id, pass_ms=round((loop.time() - began) * 1000),
                            next_in_s=round(pause, 1), hint="a long transaction may pin the vacuum horizon")

    async def reap_once(self) -> int:
        """Promote due ``waiting`` tasks and settle expired leases; how many tasks were moved."""
        async with write_transaction(self.engine) as conn:
            now = self.clock.now()
            due = await task_queue.due_waiting(conn, now=now)
            moves = [Move(r["id"], "queued", detail={"reason": "run_after_reached"}) for r in due]
            queues = [r["queue"] for r in due]
            for r in await task_queue.expired(conn, now=now):
                moves.append(_expired_move(r, now=now))
            if not moves:
                return 0
            moved = await apply(conn, moves, now=now)
            await after_moves(conn, moved, now=now, rules=self.config.rules)
            requeued = [m.row["queue"] for m in moved if m.move.to == "queued"]
            await task_queue.notify(conn, queues + requeued)
        await count_requeued(self.engine, len(requeued))
        for q in set(queues + requeued):
            self.wakeups.poke(q)
        lost = [m for m in moved if m.move.ended is not None]
        count_lease_expirations([m.row["queue"] for m in lost], configured=self.config.queues)
        if lost:
            log.warning("task_leases_expired", tasks=len(lost), requeued=sum(m.move.to == "queued" for m in lost),
                        held=sum(m.move.to == "hold" for m in lost), failed=sum(m.move.to == "failed" for m in lost))
        return len(moved)


def _expired_move(r: Mapping[Any, Any], *, now: float) -> Move:
    end = AttemptEnd("lease_expired", r["worker"], r["started_at"] or now, error_code="worker_lost",
                     error_message="the worker stopped renewing its lease")
    detail = {"reason": "lease_expired", "worker": r["worker"]}
    if not r["repeat_safe"]:
        return Move(r["id"], "hold", r["attempt"], ended=end, detail=detail, values={
            "lease_until": None, "worker": None,
            "hold_reason": (f"attempt {r['attempt']} was running on {r['worker']} when that worker stopped "
                            f"(step {r['current_step'] or 'unknown'}); {r['task_type']} is not safe to repeat "
                            "blindly, so an operator must check the upstream and release or finish the task")})
    if r["attempt"] >= r["max_attempts"]:
        return Move(r["id"], "failed", r["attempt"], ended=end, detail=detail, values={
            "lease_until": None, "finished_at": now, "error_code": "worker_lost",
            "failure_stage": r["current_step"] or "running",
            "error": {"code": "worker_lost", "message": "The worker running the task stopped answering, and the "
                      "task has no attempts left.", "details": {"attempts": r["attempt"]}}})
    return Move(r["id"], "queued", r["attempt"], ended=end, detail=detail,
                values={"lease_until": None, "worker": None, "run_after": now})


class _QueueRunner:
    def __init__(self, worker: Worker, queue: str, concurrency: int, types: list[str]) -> None:
        self.worker = worker
        self.queue = queue
        self.concurrency = concurrency
        self.types = types
        self.running: dict[str, _Running] = {}
        self.claiming = True
        self._done: list[Move] = []
        self._plain: set[str] = set()  # tasks in _done that succeeded with no follow-up (terminal.follows_up)
        self._keys: dict[str, str] = {}  # the idempotency keys of tasks in _done that have one (for Wakeups.ended)
        self._progress: dict[str, TaskContext] = {}
        self._progress_since: dict[str, float] = {}  # loop time of each task's first unwritten report
        self._loops: list[asyncio.Task[None]] = []
        # where the next claim starts (PostgreSQL, uncapped queues: the others claim from the head every time)
        self.cursor: ClaimCursor | None = None
        if worker.engine.dialect.name == "postgresql" and queue not in worker.config.running_per_key:
            self.cursor = ClaimCursor(now=worker.clock.now)
        # claim: a slot freed, a notification, the poll timer
        self.wake = worker.wakeups.subscribe(queue, on_news=self.cursor.news if self.cursor else None)
        self.dirty = asyncio.Event()  # write: outcomes or progress are waiting
        self._progress_timer: asyncio.TimerHandle | None = None
        self._claim_running = False
        self._claim_pass: asyncio.Future[None] | None = None  # resolved when the running or due claim is over
        self._stopping = False

    def start(self) -> None:
        self._loops = [asyncio.create_task(self._claim_loop(), name=f"task-claim-{self.queue}"),
                       asyncio.create_task(self._write_loop(), name=f"task-write-{self.queue}")]

    async def stop(self) -> None:
        await self._flush_final()
        self._stopping = True
        self.wake.set()
        self.dirty.set()
        for task in self._loops:  # each ends at its next wait; cancelled only if stuck (never mid-commit)
            await stop_writer_task(task, grace_s=5.0)
        if self._progress_timer is not None:
            self._progress_timer.cancel()
        self.worker.wakeups.unsubscribe(self.queue, self.wake)

    async def _claim_loop(self) -> None:
        delay = 0.05
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self.worker.config.poll_s)
            self.wake.clear()
            if self._stopping:
                self._claim_pass_over()
                return
            self._claim_running = True
            try:
                if await self.claim_free():
                    self.wake.set()
                delay = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("task_claim_failed", queue=self.queue, error=type(exc).__name__, retry_in_s=round(delay, 2))
                self._claim_pass_over()
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                self.wake.set()
            finally:
                self._claim_running = False
                self._claim_pass_over()

    def _claim_pass_over(self) -> None:
        if self._claim_pass is not None and not self._claim_pass.done():
            self._claim_pass.set_result(None)

    async def _after_due_claim(self) -> None:
        """Let a claim that is running or due go first, for at most CLAIM_FIRST_S: freed slots wait for their next
        tasks, outcomes (already timestamped) only for their row versions. On a busy database the two compete;
        a wave of 64 completions written beside its 64 claims made the claim three times slower."""
        claim_due = self._claim_running or (self.wake.is_set() and self.claiming)
        if not claim_due or len(self._done) > 2 * self.concurrency:
            return  # two waves waiting: write now, or unwritten outcomes pile up behind back-to-back claims
        if self._claim_pass is None or self._claim_pass.done():
            self._claim_pass = asyncio.get_running_loop().create_future()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._claim_pass), CLAIM_FIRST_S)

    async def _write_loop(self) -> None:
        delay = 0.05
        while True:
            await self.dirty.wait()
            self.dirty.clear()
            if self._stopping:
                return
            try:
                await self._after_due_claim()
                await self.write_outcomes()
                delay = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("task_write_failed", queue=self.queue, error=type(exc).__name__,
                            retry_in_s=round(delay, 2), pending_outcomes=len(self._done))
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
                self.dirty.set()

    async def claim_free(self) -> bool:
        """Claim tasks for the free slots and start them; True if every free slot was filled (maybe more)."""
        free = self.concurrency - len(self.running) if self.claiming and self.types else 0
        if free <= 0:
            return False
        w = self.worker
        cursor = self.cursor
        after = cursor.begin() if cursor is not None else None
        try:
            claimed = await task_queue.claim_now(w.engine, queue=self.queue, types=self.types, limit=free,
                                                 worker=w.id, now=w.clock.now(), lease_s=w.config.lease_s,
                                                 per_key_cap=w.config.running_per_key.get(self.queue), after=after)
        except BaseException:
            if cursor is not None:
                cursor.failed()
            raise
        if cursor is not None:
            cursor.end([(r["priority"], r["fair_seq"]) for r in claimed])
        for row in claimed:
            self._spawn(row)
        return len(claimed) == free

    async def write_outcomes(self, *, all_progress: bool = False) -> None:
        """One transaction: the outcomes gathered since the last one (fenced moves) and the progress reports
        that have waited ``PROGRESS_DELAY_S`` (all of them with ``all_progress``).

        A report of a task that succeeded meanwhile is not written: the succeeded move sets the step and the
        progress itself, so a short task's report costs no row version and no event of its own. A report of a
        task that ended otherwise is written before its end, in the same transaction (it records the step)."""
        done, self._done = self._done, []
        for move in done:
            if move.to == "succeeded":
                self._progress.pop(move.task_id, None)
        progress = self._due_progress(everything=all_progress, ending={m.task_id for m in done})
        if not done and not progress:
            self._arm_progress_timer()
            return
        w = self.worker
        plain = [m for m in done if m.task_id in self._plain] if w.engine.dialect.name == "postgresql" else []
        rest = [m for m in done if m.task_id not in self._plain] if plain else done
        try:
            if plain:  # plain successes: one autocommit statement, no transaction around it
                await apply_now(w.engine, plain, now=w.clock.now())
                self._plain.difference_update(m.task_id for m in plain)
                plain = []
            if rest or progress:
                async with write_transaction(w.engine) as conn:
                    now = w.clock.now()
                    if progress:
                        await task_queue.report_progress(conn, [(c.task.id, c.task.attempt, c.percent, c.step)
                                                                for c in progress.values()], now=now)
                    if rest:
                        moved = await apply(conn, rest, now=now)
                        await after_moves(conn, moved, now=now, rules=w.config.rules)
                        if any(m.move.to == "queued" for m in moved):
                            await task_queue.notify(conn, [self.queue])
            self._plain.difference_update(m.task_id for m in rest)
        except BaseException:
            self._done = plain + rest + self._done
            self._progress = {**progress, **self._progress}
            raise
        finally:
            self._arm_progress_timer()
        if any(m.to == "queued" for m in done):
            await count_requeued(self.worker.engine, sum(m.to == "queued" for m in done))
            if self.cursor is not None:
                for m in done:
                    if m.to == "queued" and m.values and "run_after" in m.values:
                        self.cursor.due_at(float(m.values["run_after"]))
            self.worker.wakeups.poke(self.queue)
        keys = {m.task_id: self._keys.pop(m.task_id, None) for m in done}
        ended = [Ended(m.task_id, keys[m.task_id]) for m in done if m.to in TERMINAL]
        if ended:
            self.worker.wakeups.ended(ended)

    def _spawn(self, row: Mapping[Any, Any]) -> None:
        w = self.worker
        ttype = w.types.get(row["task_type"])
        assert ttype is not None  # claims name only the types this runner has
        record = TaskRecord(id=row["id"], task_type=row["task_type"], queue=row["queue"], attempt=row["attempt"],
                            max_attempts=row["max_attempts"], payload=row["payload"], caller=row["caller"],
                            tenant=row["tenant"], end_user=row["end_user"], request_id=row["request_id"],
                            priority=row["priority"], callback_url=row["callback_url"],
                            trace_parent=row["trace_parent"], idempotency_key=row["idempotency_key"])
        loop = asyncio.get_running_loop()
        soft = loop.time() + ttype.soft_time_limit_s if ttype.soft_time_limit_s else None
        ctx = TaskContext(record, w.services, report=self._report, soft_deadline=soft,
                          soft_limit_s=ttype.soft_time_limit_s)
        execute = self._execute if tracing.active is None else self._traced_execute
        task = asyncio.create_task(execute(ctx, ttype, started_at=row["started_at"]), name=f"task-{record.id}")
        self.running[record.id] = _Running(ctx, task, row["started_at"], bool(row["repeat_safe"]), loop.time())

    def _report(self, ctx: TaskContext) -> None:
        """Progress is informative: a task's report is written once its first unwritten one is PROGRESS_DELAY_S
        old (with whatever write comes then), unless the task succeeds before."""
        if ctx.task.id not in self._progress:
            self._progress_since[ctx.task.id] = asyncio.get_running_loop().time()
        self._progress[ctx.task.id] = ctx
        self._arm_progress_timer()

    def _due_progress(self, *, everything: bool, ending: set[str]) -> dict[str, TaskContext]:
        """Take the reports that are due (or of tasks ``ending`` in this write) out of the pending ones."""
        due_since = asyncio.get_running_loop().time() - PROGRESS_DELAY_S
        due = {tid: ctx for tid, ctx in self._progress.items()
               if everything or tid in ending or self._progress_since.get(tid, due_since) <= due_since}
        for tid in due:
            del self._progress[tid]
        self._progress_since = {tid: self._progress_since[tid] for tid in self._progress}
        return due

    def _arm_progress_timer(self) -> None:
        """A write when the oldest pending report falls due (none if a timer is armed or nothing is pending)."""
        if self._progress_timer is not None or not self._progress:
            return
        loop = asyncio.get_running_loop()
        oldest = min(self._progress_since.get(tid, loop.time()) for tid in self._progress)
        self._progress_timer = loop.call_at(oldest + PROGRESS_DELAY_S, self._progress_due)

    def _progress_due(self) -> None:
        self._progress_timer = None
        self.dirty.set()

    async def _traced_execute(self, ctx: TaskContext, ttype: TaskType, *, started_at: float) -> Move | None:
        """:meth:`_execute` in a span of its own (tracing on), which links to the span that submitted the task
        and is the parent of the gateway calls its handler makes."""
        t = tracing.active
        assert t is not None
        task = ctx.task
        submitted_by = tracing.remote_parent(task.trace_parent)
        span = t.start(f"task {task.task_type}", under=None, kind="consumer",
                       links=(submitted_by,) if submitted_by is not None else (),
                       attributes={"hearth.task.id": task.id, "hearth.task.type": task.task_type,
                                   "hearth.task.queue": task.queue, "hearth.task.attempt": task.attempt,
                                   "hearth.request_id": task.request_id})
        token = tracing.parent.set(span)
        move: Move | None = None
        try:
            move = await self._execute(ctx, ttype, started_at=started_at)
        finally:
            tracing.parent.reset(token)
            ended = move.ended if move is not None else None
            tracing.end(span, error=ended.error_code if ended is not None else None,
                        attributes={"hearth.task.outcome": ended.outcome if ended is not None else "lease_lost"})
        return move

    async def _execute(self, ctx: TaskContext, ttype: TaskType, *, started_at: float) -> Move | None:
        move: Move | None = None
        try:
            ctx.check_cancel()
            async with asyncio.timeout(ttype.time_limit_s):
                result = await ttype.handler(ctx)
            ctx.check_cancel(soft_limit=False)  # cancelled while the last call ran: its result is discarded
            move = self._succeeded(ctx, result, started_at=started_at)
        except TaskCancelled:
            move = self._killed(ctx, started_at=started_at)
        except TaskLeaseLost:
            move = None
        except asyncio.CancelledError:
            held = self.running.get(ctx.task.id)
            move = self._handed_back(ctx, held, started_at=started_at) if held and held.handing_back else None
        except TimeoutError:
            move = self._failed_or_retried(ctx, ttype, HearthError(
                "task_time_limit", f"The task ran past its time limit of {ttype.time_limit_s:g} s and was stopped."),
                started_at=started_at)
        except Exception as exc:
            if not isinstance(exc, HearthError | UpstreamHTTPError):
                log.error("task_handler_crashed", task_id=ctx.task.id, task_type=ctx.task.task_type,
                          error=type(exc).__name__)
            move = self._failed_or_retried(ctx, ttype, exc, started_at=started_at)
        finally:
            self.running.pop(ctx.task.id, None)
            self.wake.set()
            if move is not None:
                self._done.append(move)
                if ctx.task.idempotency_key is not None:
                    self._keys[move.task_id] = ctx.task.idempotency_key
                if move.to == "succeeded" and not follows_up(move.to, attempt=ctx.task.attempt,
                                                              callback_url=ctx.task.callback_url):
                    self._plain.add(move.task_id)
                self.dirty.set()
        return move

    def _end(self, ctx: TaskContext, outcome: str, started_at: float, error: HearthError | None = None) -> AttemptEnd:
        return AttemptEnd(outcome, self.worker.id, started_at, error_code=error.code if error else None,
                          error_message=error.message if error else None)

    def _succeeded(self, ctx: TaskContext, result: dict[str, Any] | None, *, started_at: float) -> Move:
        return Move(ctx.task.id, "succeeded", ctx.task.attempt, ended=self._end(ctx, "succeeded", started_at), values={
            "result": result if result is not None else {}, "progress": 100, "finished_at": self.worker.clock.now(),
            "lease_until": None, "current_step": ctx.step, "versions": ctx.versions or None, "error": None,
            "error_code": None})

    def _killed(self, ctx: TaskContext, *, started_at: float) -> Move:
        err = HearthError("task_cancelled")
        return Move(ctx.task.id, "killed", ctx.task.attempt, ended=self._end(ctx, "killed", started_at, err), values={
            "finished_at": self.worker.clock.now(), "lease_until": None, "error_code": err.code,
            "error": {"code": err.code, "message": "The task was cancelled; a result that arrived afterwards was "
                      "discarded.", "details": {}}})

    def _handed_back(self, ctx: TaskContext, held: _Running, *, started_at: float) -> Move:
        end = self._end(ctx, "handed_back", started_at)
        if not held.repeat_safe:
            return Move(ctx.task.id, "hold", ctx.task.attempt, ended=end, values={
                "lease_until": None, "worker": None,
                "hold_reason": f"the worker shut down during attempt {ctx.task.attempt} (step {ctx.step or 'unknown'})"
                               f"; {ctx.task.task_type} is not safe to repeat blindly"})
        return Move(ctx.task.id, "queued", ctx.task.attempt, ended=end, detail={"reason": "worker_shutdown"},
                    values={"lease_until": None, "worker": None, "run_after": self.worker.clock.now(),
                            "max_attempts": ctx.task.max_attempts + 1})  # the attempt is given back

    def _failed_or_retried(self, ctx: TaskContext, ttype: TaskType, exc: BaseException, *, started_at: float) -> Move:
        error = as_hearth_error(exc)
        policy = ttype.retry or self.worker.config.default_retry
        # decided on the exception as raised: an unexpected one (a bug) fails at once, though recorded as internal_error
        decision = decide(exc, attempt=ctx.task.attempt, max_attempts=ctx.task.max_attempts, policy=policy)
        body = {"code": error.code, "message": error.message, "details": error.details}
        now = self.worker.clock.now()
        if decision.verdict == "fail":
            return Move(ctx.task.id, "failed", ctx.task.attempt, ended=self._end(ctx, "failed", started_at, error),
                        detail={"retry_class": decision.reason}, values={
                            "finished_at": now, "lease_until": None, "error": body, "error_code": error.code,
                            "failure_stage": ctx.step or "running", "versions": ctx.versions or None})
        values: dict[str, Any] = {"run_after": now + decision.delay_s, "lease_until": None, "worker": None,
                                  "error": body, "error_code": error.code}
        count_retry(self.queue)
        if decision.verdict == "retry_uncounted":
            values["max_attempts"] = ctx.task.max_attempts + 1
        return Move(ctx.task.id, "queued", ctx.task.attempt, ended=self._end(ctx, "retry", started_at, error),
                    detail={"retry_class": decision.reason, "retry_in_s": round(decision.delay_s, 3)}, values=values)

    async def hand_back(self) -> None:
        for r in list(self.running.values()):
            r.handing_back = True
            r.task.cancel()
        if self.running:
            await asyncio.gather(*(r.task for r in list(self.running.values())), return_exceptions=True)

    async def _flush_final(self, within_s: float = 3.0) -> None:
        """Write what is gathered before the worker goes; a database that stays away for ``within_s`` keeps
        the rest (those tasks' leases expire and the reaper settles them, as after a crash)."""
        loop = asyncio.get_running_loop()
        until = loop.time() + within_s
        while (self._done or self._progress) and loop.time() < until:
            try:
                async with asyncio.timeout(max(0.1, until - loop.time())):
                    await self.write_outcomes(all_progress=True)
            except Exception as exc:
                log.warning("task_final_flush_failed", queue=self.queue, error=type(exc).__name__,
                            outcomes=len(self._done))
                await asyncio.sleep(0.25)
