"""The nine task states and the moves between them (DESIGN.md, "Task states").

``waiting`` (run_after or dependencies not reached) → ``queued`` → ``running`` → ``succeeded`` |
``failed`` | ``killed`` | ``hold``; ``skipped`` and ``mark_succeeded`` are operator overrides. A retry
is ``running → queued`` with a later ``run_after``; an expired lease is ``running → queued`` (or
``hold``/``failed``) by the reaper; a redrive is ``failed → queued``.

:data:`ALLOWED_FROM` is the whole state machine: :func:`hearth.tasks.transitions.apply` writes a move
only where the row's current state is one of these, in the same statement, so an illegal or stale move
changes nothing however workers and operators race.
"""

from __future__ import annotations

from typing import Final, Literal

TaskState = Literal["waiting", "queued", "running", "succeeded", "failed", "killed", "hold", "skipped",
                    "mark_succeeded"]

STATES: Final[tuple[TaskState, ...]] = ("waiting", "queued", "running", "succeeded", "failed", "killed", "hold",
                                        "skipped", "mark_succeeded")
TERMINAL: Final[frozenset[str]] = frozenset({"succeeded", "failed", "killed", "skipped", "mark_succeeded"})
SUCCESSFUL: Final[frozenset[str]] = frozenset({"succeeded", "mark_succeeded"})

ALLOWED_FROM: Final[dict[str, frozenset[str]]] = {
    "waiting": frozenset(),  # only ever a task's first state
    "queued": frozenset({"waiting", "running", "hold", "failed"}),  # due; retry or lease lost; released; redrive
    "running": frozenset({"queued"}),  # a claim
    "succeeded": frozenset({"running"}),
    "failed": frozenset({"running", "queued", "hold"}),  # finished badly; reaper out of attempts; operator
    "killed": frozenset({"waiting", "queued", "running", "hold"}),  # cancelled
    "hold": frozenset({"running", "queued"}),  # a human must decide (an unsafe call was in flight)
    "skipped": frozenset({"waiting", "queued", "hold", "failed"}),  # operator override
    "mark_succeeded": frozenset({"hold", "failed"}),  # operator override
}


class IllegalTransition(ValueError):
    """A move the state machine does not have (a programming error, not a race)."""


def check(from_state: str, to_state: str) -> None:
    if from_state not in ALLOWED_FROM.get(to_state, frozenset()):
        raise IllegalTransition(f"a task cannot move from {from_state!r} to {to_state!r}")
