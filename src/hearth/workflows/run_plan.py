"""What the run engine needs to know about a definition's graph, computed once per version, and the pure
rules that decide from the step rows alone whether a step may start, must be skipped, or failed its run.

Every incoming edge of a step (see :func:`hearth.workflows.definitions.edges`) is, at any moment, one of
``done`` (it lets the step run), ``dead`` (it never will) or ``pending``:

* ``needs`` from S: done when S succeeded, or failed with ``on_error: continue``; dead when S ended otherwise
  (failed, skipped, cancelled);
* ``then`` / ``else`` from a condition C: done when C succeeded and took that branch; dead when C ended otherwise
  (so the steps of the branch not taken are skipped, and so are the steps that need them);
* ``on_error`` from S: done when S failed (and an approval's expiry did not go to its timeout branch); dead
  when S ended otherwise;
* ``on_timeout`` from an approval A: done when A's review item expired; dead when A ended otherwise.

A step's join rule counts all of them: ``all`` — ready when every edge is done, skipped as soon as one is
dead; ``any`` — ready at the first done edge, skipped when every edge is dead. A step inside a loop's body
also waits for its loop to be running (iterating), and is skipped if the loop was. ``body`` edges are not
counted: the loop step itself decides when its body has finished an iteration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from hearth.workflows.definitions import (
    ApprovalStep,
    LoopStep,
    Step,
    WorkflowDefinition,
    edges,
    topological_order,
)

ENDED = frozenset({"succeeded", "failed", "skipped", "cancelled"})
Verdict = Literal["ready", "skip", "wait"]


@dataclass(frozen=True, slots=True)
class RunPlan:
    """A definition with its graph indexed for the engine (immutable, shared by every run of the version)."""

    definition: WorkflowDefinition
    steps: Mapping[str, Step]
    order: tuple[str, ...]  # topological, declaration order among equals
    incoming: Mapping[str, tuple[tuple[str, str], ...]]  # step → ((source, edge kind), ...) without body edges
    loop_of: Mapping[str, str]  # a body step → its loop
    inside: Mapping[str, frozenset[str]]  # a loop → every step in its body, nested loops' bodies included
    sinks: tuple[str, ...]  # steps no other step follows: their outputs are the run's output

    @classmethod
    def of(cls, defn: WorkflowDefinition) -> RunPlan:
        incoming: dict[str, list[tuple[str, str]]] = {s.id: [] for s in defn.steps}
        has_successor: set[str] = set()
        for edge in edges(defn):
            has_successor.add(edge.source)
            if edge.kind != "body":
                incoming[edge.target].append((edge.source, edge.kind))
        loop_of = {member: s.id for s in defn.steps if isinstance(s, LoopStep) for member in s.body}
        inside: dict[str, frozenset[str]] = {}
        for s in defn.steps:
            if isinstance(s, LoopStep):
                inside[s.id] = frozenset(m for m in loop_of if s.id in _enclosing(m, loop_of))
        return cls(definition=defn, steps={s.id: s for s in defn.steps}, order=tuple(topological_order(defn)),
                   incoming={k: tuple(v) for k, v in incoming.items()}, loop_of=loop_of, inside=inside,
                   sinks=tuple(s.id for s in defn.steps if s.id not in has_successor))


def _enclosing(step_id: str, loop_of: Mapping[str, str]) -> list[str]:
    chain: list[str] = []
    while step_id in loop_of:
        step_id = loop_of[step_id]
        chain.append(step_id)
    return chain


def expired_to_branch(step: Step, row: Mapping[str, Any]) -> bool:
    """An approval whose item expired and whose ``on_timeout`` names a step: its timeout branch handles it."""
    return (isinstance(step, ApprovalStep) and step.on_timeout != "fail" and row["state"] == "failed"
            and (row["error"] or {}).get("code") == "review_expired")


def is_fatal(step: Step, row: Mapping[str, Any]) -> bool:
    """A failure nothing handles (``on_error: fail`` and no timeout branch took it): it fails the run."""
    return row["state"] == "failed" and step.on_error == "fail" and not expired_to_branch(step, row)


def edge_state(source: Step, row: Mapping[str, Any], kind: str) -> Literal["done", "dead", "pending"]:
    state = row["state"]
    if state not in ENDED:
        return "pending"
    if kind == "needs":
        done = state == "succeeded" or (state == "failed" and source.on_error == "continue")
    elif kind in ("then", "else"):
        done = state == "succeeded" and (row["output"] or {}).get("branch") == kind
    elif kind == "on_error":
        done = state == "failed" and not expired_to_branch(source, row)
    else:  # on_timeout
        done = expired_to_branch(source, row)
    return "done" if done else "dead"


def readiness(plan: RunPlan, step_id: str, rows: Mapping[str, Mapping[str, Any]]) -> Verdict:
    """``ready``, ``skip`` (it can never run) or ``wait``, by the step's join rule over its edges."""
    loop = plan.loop_of.get(step_id)
    if loop is not None and rows[loop]["state"] != "running":
        return "skip" if rows[loop]["state"] in ENDED else "wait"
    seen = [edge_state(plan.steps[src], rows[src], kind) for src, kind in plan.incoming[step_id]]
    if not seen:
        return "ready"
    if plan.steps[step_id].join == "all":
        return "skip" if "dead" in seen else "ready" if all(s == "done" for s in seen) else "wait"
    return "ready" if "done" in seen else "skip" if all(s == "dead" for s in seen) else "wait"
