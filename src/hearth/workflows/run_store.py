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

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update
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
    for r in new:
        await conn.execute(workflow_runs.insert().values(
            id=r.id, workflow=r.workflow, version=r.version, caller=r.caller, input=r.input, state="running",
            parent=r.parent, created_at=now, updated_at=now))
        await conn.execute(workflow_steps.insert(), [{"run_id": r.id, "step_id": s, "state": "waiting", "round": 0}
                                                      for s in r.step_ids])


async def create_run(engine: AsyncEngine, new: NewRun, *, now: float) -> None:
    async with write_transaction(engine) as conn:
        await insert_runs(conn, [new], now=now)


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


async def apply(engine: AsyncEngine, run_id: str, changes: Changes, *, epoch: int, now: float) -> None:
    """Write one pass's changes to a run in one transaction, or nothing (:class:`Conflict`).

    The run row is written first, and only while the run is still ``running`` at the ``epoch`` the pass read:
    an operator action (:mod:`hearth.workflows.run_actions`) moves the epoch on under the run row's lock, so a
    pass that read the rows before it writes nothing after it; and as both lock the run row first, they queue
    on it rather than deadlock."""
    try:
        async with write_transaction(engine) as conn:
            run_values: dict[str, Any] = {"updated_at": now}
            if changes.run is not None:
                run_values |= {**changes.run, "finished_at": now}
            fenced = await conn.execute(update(workflow_runs).where(
                _runs.id == run_id, _runs.state == "running", _runs.epoch == epoch).values(**run_values))
            if fenced.rowcount != 1:
                raise Conflict("run")
            for step_id, state, round_, values in changes.steps:
                moved = await conn.execute(update(workflow_steps).where(
                    _steps.run_id == run_id, _steps.step_id == step_id, _steps.state == state,
                    _steps.round == round_).values(**values))
                if moved.rowcount != 1:
                    raise Conflict(step_id)
            for signal_id, taker in changes.signals:
                taken = await conn.execute(update(workflow_signals).where(
                    _signals.id == signal_id, _signals.consumed_by.is_(None)).values(consumed_by=taker,
                                                                                     consumed_at=now))
                if taken.rowcount != 1:
                    raise Conflict(f"signal {signal_id}")
            await insert_runs(conn, changes.children, now=now)
    except IntegrityError:  # another process inserted the same child run first
        raise Conflict("child run") from None


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


async def add_signal(engine: AsyncEngine, run_id: str, *, event: str, payload: Any, now: float) -> int:
    async with write_transaction(engine) as conn:
        result = await conn.execute(workflow_signals.insert().values(run_id=run_id, event=event, payload=payload,
                                                                     created_at=now))
        key = result.inserted_primary_key
        assert key is not None
        return int(key[0])


async def untaken_signals(engine: AsyncEngine, run_id: str, event: str) -> int:
    async with engine.connect() as conn:
        return int((await conn.execute(select(func.count()).select_from(workflow_signals).where(
            _signals.run_id == run_id, _signals.event == event, _signals.consumed_by.is_(None)))).scalar_one())


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
