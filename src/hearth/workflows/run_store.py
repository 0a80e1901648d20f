"""The rows of workflow runs: runs, their steps' checkpoints, the signals sent to them and the audit of operator
actions. All SQL of ``workflow_runs``, ``workflow_steps``, ``workflow_signals`` and ``workflow_run_actions`` is
here.

Reads come in batches (a scheduler pass reads many runs' rows in a handful of queries). Writes come as one
:class:`Changes` per run and pass, applied in one transaction in which the run row is a compare-and-set on the
(state ``running``, epoch) the pass read, every step row one on the (state, round) the pass read, and every
signal taken one on it being untaken: if another process or an operator moved anything first, nothing of the
pass is written (:class:`Conflict`) and the next pass decides again from what is there. What a pass did outside
these tables before writing — a task submitted, a review item raised — is keyed so that doing it again names the
same thing. An operator action (:func:`act`) locks the run row, decides from the rows under the lock, and
writes them with the epoch moved on and its audit row, in one transaction."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import bindparam, func, select, tuple_, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from hearth.store.db import write_transaction
from hearth.store.tables import workflow_run_actions, workflow_runs, workflow_signals, workflow_steps

_runs = workflow_runs.c
_steps = workflow_steps.c
_signals = workflow_signals.c
_actions = workflow_run_actions.c
_CHUNK = 500  # ids per IN list


class Conflict(Exception):
    """Another process moved the run first; this pass wrote nothing."""


@dataclass(slots=True)
class NewRun:
    """A run to insert with its steps all ``waiting`` (a sub-workflow's child is inserted with its parent's
    changes, so a pass that loses a race leaves no orphan child)."""

    id: str
    workflow: str
    version: int
    caller: str
    input: Any
    step_ids: Sequence[str]
    parent: dict[str, Any] | None = None


@dataclass(slots=True)
class Changes:
    """What one pass decided for one run."""

    steps: list[tuple[str, str, int, dict[str, Any]]] = field(default_factory=list)  # (step, state, round, values)
    signals: list[tuple[int, str]] = field(default_factory=list)  # (signal id, "<step>#<round>") taken
    children: list[NewRun] = field(default_factory=list)
    run: dict[str, Any] | None = None  # the run's own end: {state, error, output}

    def __bool__(self) -> bool:
        return bool(self.steps or self.signals or self.children or self.run)


async def insert_runs(conn: AsyncConnection, new: Iterable[NewRun], *, now: float) -> None:
    """The runs and all their steps ``waiting``, in two statements however many there are."""
    runs = list(new)
    if not runs:
        return
    await conn.execute(workflow_runs.insert(), [
        {"id": r.id, "workflow": r.workflow, "version": r.version, "caller": r.caller, "input": r.input,
         "state": "running", "parent": r.parent, "created_at": now, "updated_at": now} for r in runs])
    await conn.execute(workflow_steps.insert(), [{"run_id": r.id, "step_id": s, "state": "waiting", "round": 0}
                                                  for r in runs for s in r.step_ids])


async def create_run(engine: AsyncEngine, new: NewRun, *, now: float) -> None:
    await create_runs(engine, [new], now=now)


async def create_runs(engine: AsyncEngine, new: Sequence[NewRun], *, now: float) -> None:
    async with write_transaction(engine) as conn:
        await insert_runs(conn, new, now=now)


async def running_runs(engine: AsyncEngine, *, after: str, limit: int) -> list[str]:
    """Ids of running runs after ``after`` in id order (a pass pages through them all)."""
    async with engine.connect() as conn:
        return list((await conn.execute(select(_runs.id).where(_runs.state == "running", _runs.id > after)
                                        .order_by(_runs.id).limit(limit))).scalars().all())


Loaded = tuple[dict[str, Any], dict[str, dict[str, Any]], list[dict[str, Any]]]


async def load(engine: AsyncEngine, run_ids: Sequence[str]) -> dict[str, Loaded]:
    """For each run found: (run row, {step id: step row}, its signals not yet taken, oldest first)."""
    out: dict[str, Loaded] = {}
    async with engine.connect() as conn:
        for i in range(0, len(run_ids), _CHUNK):
            chunk = list(run_ids[i:i + _CHUNK])
            for run in (await conn.execute(select(workflow_runs).where(_runs.id.in_(chunk)))).mappings():
                out[run["id"]] = (dict(run), {}, [])
            for row in (await conn.execute(select(workflow_steps).where(_steps.run_id.in_(chunk)))).mappings():
                if row["run_id"] in out:
                    out[row["run_id"]][1][row["step_id"]] = dict(row)
            for sig in (await conn.execute(select(workflow_signals).where(
                    _signals.run_id.in_(chunk), _signals.consumed_by.is_(None)).order_by(_signals.id))).mappings():
                if sig["run_id"] in out:
                    out[sig["run_id"]][2].append(dict(sig))
    return out


async def runs_by_id(engine: AsyncEngine, run_ids: Iterable[str]) -> dict[str, dict[str, Any]]:
    ids = list(set(run_ids))
    found: dict[str, dict[str, Any]] = {}
    if not ids:
        return found
    async with engine.connect() as conn:
        for i in range(0, len(ids), _CHUNK):
            for row in (await conn.execute(select(workflow_runs).where(_runs.id.in_(ids[i:i + _CHUNK])))).mappings():
                found[row["id"]] = dict(row)
    return found


@dataclass(slots=True)
class PassWrite:
    """One run's pass to write: the (state ``running``, ``epoch``) it read the run at, and its changes."""

    run_id: str
    epoch: int
    changes: Changes


async def apply(engine: AsyncEngine, run_id: str, changes: Changes, *, epoch: int, now: float) -> None:
    """Write one pass's changes to a run, or nothing (:class:`Conflict`); see :func:`apply_many`."""
    if run_id in await apply_many(engine, [PassWrite(run_id, epoch, changes)], now=now):
        raise Conflict(run_id)


async def apply_many(engine: AsyncEngine, writes: Sequence[PassWrite], *, now: float) -> set[str]:
    """Write many runs' passes in one transaction; each run's whole pass or nothing of it. The runs whose pass was
    not written (another process or an operator moved them first) are returned.

    The statements do not depend on how many runs there are (a few per 500 runs, each an executemany or an IN
    list), which is what lets one worker move a thousand runs a second:

    1. **Lock** the run rows — on PostgreSQL ``SELECT … ORDER BY id FOR UPDATE`` first, so two batches lock in
       the same order and never deadlock — and write the ones still ``running`` at the epoch their pass read
       (``updated_at``; on SQLite this first write takes the database's write lock). Every writer of a run's
       steps writes its run row first (an operator action, :func:`act`, moving the epoch on; a cancel; another
       pass), so from here on nothing else moves these runs' steps or signals until this transaction ends.
    2. **Check** every step a pass changes is still at the (state, round) it read, and every signal it takes
       still untaken: a pass that lost a race to another pass (which does not move the epoch) is dropped whole.
    3. **Write** the kept passes' steps, run ends, signals and child runs."""
    if not writes:
        return set()
    by_id = {w.run_id: w for w in writes}
    ids = sorted(by_id)
    lost: set[str] = set()
    try:
        async with write_transaction(engine) as conn:
            locked: set[str] = set()
            for i in range(0, len(ids), _CHUNK):
                chunk = ids[i:i + _CHUNK]
                if conn.dialect.name == "postgresql":
                    await conn.execute(select(_runs.id).where(_runs.id.in_(chunk)).order_by(_runs.id).with_for_update())
                fence = tuple_(_runs.id, _runs.epoch).in_([(r, by_id[r].epoch) for r in chunk])
                locked.update((await conn.execute(update(workflow_runs).where(fence, _runs.state == "running")
                                                  .values(updated_at=now).returning(_runs.id))).scalars())
            lost = set(ids) - locked
            lost |= await _moved_meanwhile(conn, [by_id[r] for r in sorted(locked)])
            kept = [by_id[r] for r in ids if r not in lost]
            await _write(conn, kept, now=now)
    except IntegrityError:  # another process inserted the same child run first: the next pass decides
        return set(ids)
    return lost


async def _moved_meanwhile(conn: AsyncConnection, writes: Sequence[PassWrite]) -> set[str]:
    """The runs (locked) of which a step or a signal their pass changes is no longer as the pass read it."""
    expect = {(w.run_id, sid): (state, round_) for w in writes for sid, state, round_, _ in w.changes.steps}
    signals = {sig: w.run_id for w in writes for sig, _ in w.changes.signals}
    moved: set[str] = set()
    run_ids = sorted({r for r, _ in expect})
    for i in range(0, len(run_ids), _CHUNK):
        for row in (await conn.execute(select(_steps.run_id, _steps.step_id, _steps.state, _steps.round).where(
                _steps.run_id.in_(run_ids[i:i + _CHUNK])))).all():
            want = expect.get((row[0], row[1]))
            if want is not None and want != (row[2], row[3]):
                moved.add(row[0])
    sig_ids = sorted(signals)
    for i in range(0, len(sig_ids), _CHUNK):
        untaken = set((await conn.execute(select(_signals.id).where(
            _signals.id.in_(sig_ids[i:i + _CHUNK]), _signals.consumed_by.is_(None)))).scalars())
        moved.update(signals[s] for s in sig_ids[i:i + _CHUNK] if s not in untaken)
    return moved


async def _write(conn: AsyncConnection, writes: Sequence[PassWrite], *, now: float) -> None:
    steps = [{"b_run": w.run_id, "b_step": sid, **{f"b_{k}": v for k, v in values.items()}}
             for w in writes for sid, _, _, values in w.changes.steps]
    if steps:
        columns = next(list(values) for w in writes for _, _, _, values in w.changes.steps)
        await conn.execute(update(workflow_steps).where(
            _steps.run_id == bindparam("b_run"), _steps.step_id == bindparam("b_step")).values(
            {c: bindparam(f"b_{c}") for c in columns}), steps)
    ends = [{"b_id": w.run_id, **{f"b_{k}": v for k, v in w.changes.run.items()}}
            for w in writes if w.changes.run is not None]
    if ends:
        await conn.execute(update(workflow_runs).where(_runs.id == bindparam("b_id")).values(
            state=bindparam("b_state"), output=bindparam("b_output"), error=bindparam("b_error"), finished_at=now),
            [{"b_output": None, "b_error": None, **e} for e in ends])
    taken = [{"b_id": sig, "b_taker": taker} for w in writes for sig, taker in w.changes.signals]
    if taken:
        await conn.execute(update(workflow_signals).where(_signals.id == bindparam("b_id")).values(
            consumed_by=bindparam("b_taker"), consumed_at=now), taken)
    await insert_runs(conn, [c for w in writes for c in w.changes.children], now=now)


async def cancel_run(engine: AsyncEngine, run_id: str, *, error: dict[str, Any],
                     now: float) -> list[dict[str, Any]] | None:
    """End a running (or paused) run as ``cancelled`` (its parent stopped it) with every step not ended; the rows
    that were running, for their tasks and child runs to be stopped. None if it was not running or paused."""
    async with write_transaction(engine) as conn:
        ended = await conn.execute(update(workflow_runs).where(
            _runs.id == run_id, _runs.state.in_(("running", "paused"))).values(
            state="cancelled", error=error, finished_at=now, updated_at=now, epoch=_runs.epoch + 1))
        if ended.rowcount != 1:
            return None
        running = [dict(r) for r in (await conn.execute(select(workflow_steps).where(
            _steps.run_id == run_id, _steps.state == "running"))).mappings()]
        await conn.execute(update(workflow_steps).where(_steps.run_id == run_id, _steps.state.in_(
            ("waiting", "running"))).values(state="cancelled", finished_at=now))
    return running


@dataclass(frozen=True, slots=True)
class SignalRoom:
    """What decided whether a signal was kept: the run's state, its wait steps for the event not yet ended, and
    the signals already kept for them; ``signal_id`` when it was kept."""

    run_state: str | None
    open_waits: int
    kept: int
    signal_id: int | None = None


async def add_signal(engine: AsyncEngine, run_id: str, *, event: str, payload: Any, waits: Collection[str],
                     now: float) -> SignalRoom:
    """Keep the signal if a step can still take it — the run is running or paused and its wait steps ``waits``
    (those for ``event``) not yet ended outnumber the signals already kept for the event — deciding and inserting
    in one transaction under the run row's lock, so senders racing for one wait step keep exactly one signal."""
    async with write_transaction(engine) as conn:
        state = (await conn.execute(update(workflow_runs).where(_runs.id == run_id).values(
            updated_at=_runs.updated_at).returning(_runs.state))).scalar()
        open_waits = int((await conn.execute(select(func.count()).select_from(workflow_steps).where(
            _steps.run_id == run_id, _steps.step_id.in_(list(waits)),
            _steps.state.in_(("waiting", "running"))))).scalar_one()) if waits else 0
        kept = int((await conn.execute(select(func.count()).select_from(workflow_signals).where(
            _signals.run_id == run_id, _signals.event == event, _signals.consumed_by.is_(None)))).scalar_one())
        if state not in ("running", "paused") or open_waits <= kept:
            return SignalRoom(state, open_waits, kept)
        result = await conn.execute(workflow_signals.insert().values(run_id=run_id, event=event, payload=payload,
                                                                     created_at=now))
        key = result.inserted_primary_key
        assert key is not None
        return SignalRoom(state, open_waits, kept, int(key[0]))


async def signal_row(engine: AsyncEngine, signal_id: int) -> dict[str, Any]:
    async with engine.connect() as conn:
        return dict((await conn.execute(select(workflow_signals).where(_signals.id == signal_id))).mappings().one())


@dataclass(slots=True)
class ActionChanges:
    """What an operator action writes: the run's new values and each step's (the epoch moves on by itself)."""

    run: dict[str, Any] = field(default_factory=dict)
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)


AUDITED = ("state", "round", "task_id", "review_id", "output", "error", "override", "detail", "started_at",
           "finished_at")
Decide = Callable[[Mapping[str, Any], Mapping[str, Mapping[str, Any]]], ActionChanges]


async def act(engine: AsyncEngine, run_id: str, decide: Decide, *, step_id: str | None, action: str,
              operator: str, reason: str, now: float) -> dict[str, Any]:
    """One operator action in one transaction: lock the run row by writing it first (its ``epoch`` + 1 — on
    PostgreSQL the row lock; on SQLite the database's write lock, which a ``SELECT … FOR UPDATE`` would not
    take: the driver begins a transaction only at the first write, so another process could commit between
    the read and the write), read its steps, ``decide`` (which may raise: nothing is written), write the steps
    — each a compare-and-set on what was read —, the run, and the audit row. The audit row returned."""
    async with write_transaction(engine) as conn:
        await conn.execute(update(workflow_runs).where(_runs.id == run_id).values(epoch=_runs.epoch + 1))
        run = dict((await conn.execute(select(workflow_runs).where(_runs.id == run_id))).mappings().one())
        rows = {r["step_id"]: dict(r) for r in (await conn.execute(
            select(workflow_steps).where(_steps.run_id == run_id))).mappings()}
        decided = decide(run, rows)
        for sid, values in decided.steps.items():
            moved = await conn.execute(update(workflow_steps).where(
                _steps.run_id == run_id, _steps.step_id == sid, _steps.state == rows[sid]["state"],
                _steps.round == rows[sid]["round"]).values(**values))
            if moved.rowcount != 1:  # under the run's lock nothing else moves its steps: a bug, rolled back
                raise RuntimeError(f"step {sid} of run {run_id} changed under the run's lock")
        epoch = run["epoch"]  # already moved on by the lock
        await conn.execute(update(workflow_runs).where(_runs.id == run_id).values(**decided.run, updated_at=now))
        audit = {
            "run_id": run_id, "step_id": step_id, "action": action, "operator": operator, "reason": reason, "at": now,
            "before": {"run": {"state": run["state"], "epoch": epoch - 1},
                       "steps": {sid: {k: rows[sid][k] for k in AUDITED} for sid in decided.steps}},
            "after": {"run": {"state": decided.run.get("state", run["state"]), "epoch": epoch},
                      "steps": {sid: {k: v.get(k, rows[sid][k]) for k in AUDITED}
                                for sid, v in decided.steps.items()}}}
        await conn.execute(workflow_run_actions.insert().values(**audit))
    return audit


async def actions_of(engine: AsyncEngine, run_id: str) -> list[dict[str, Any]]:
    """The run's audited operator actions, oldest first."""
    async with engine.connect() as conn:
        rows = (await conn.execute(select(workflow_run_actions).where(_actions.run_id == run_id)
                                   .order_by(_actions.id))).mappings().all()
    return [{k: v for k, v in r.items() if k != "run_id"} for r in rows]


async def runs_page(engine: AsyncEngine, *, state: str | None, before: tuple[float, str] | None,
                    limit: int) -> tuple[list[dict[str, Any]], tuple[float, str] | None]:
    """Runs newest first (``created_at``, then ``id``, descending), ``state`` only if given, strictly after the
    cursor ``before`` (the last row of the previous page); the page and the next cursor (None on the last page).
    A range read of ``ix_workflow_runs_created`` or ``ix_workflow_runs_state_created`` (0028): no count, no sort."""
    stmt = select(_runs.id, _runs.workflow, _runs.version, _runs.caller, _runs.state, _runs.error, _runs.parent,
                  _runs.created_at, _runs.updated_at, _runs.finished_at)
    if state is not None:
        stmt = stmt.where(_runs.state == state)
    if before is not None:
        stmt = stmt.where(tuple_(_runs.created_at, _runs.id) < tuple_(*before))
    stmt = stmt.order_by(_runs.created_at.desc(), _runs.id.desc()).limit(limit + 1)
    async with engine.connect() as conn:
        rows = [dict(r) for r in (await conn.execute(stmt)).mappings()]
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, ((rows[-1]["created_at"], rows[-1]["id"]) if more else None)
