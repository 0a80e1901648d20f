"""Workflow definitions: the frozen model a registered workflow becomes, and the rules it must pass.

A definition arrives as YAML or JSON (already parsed to a mapping) when it is registered, by the API or
by ``hearth apply``. :func:`validate_definition` turns it into a :class:`WorkflowDefinition` or refuses it
with ``HearthError("invalid_request", ..., param=<path>)``: a 400 whose ``param`` names the field at
fault in dotted form with indexes, such as ``steps[2].needs[0]`` or ``steps[0].input.text``. Everything a
run could trip over that can be known before it starts is refused here, so a run never discovers a
cycle, an unknown task type or a reference to a step that has not run.

Shape (every object refuses unknown fields)::

    name: lesson-prep                 # NAME: ^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$
    description: ...                  # optional
    input_schema: {...}               # optional JSON Schema, kept as given (checked elsewhere)
    steps:                            # 1..1000 steps
      - id: analyse                   # NAME, unique; "fail" and "continue" are reserved
        kind: task                    # task | approval | wait | condition | fanout | join | loop | subworkflow
        needs: [step ids]             # dependencies (default none)
        join: all                     # all: every need finished (AND) | any: the first one (OR)
        on_error: fail                # fail | continue | <step id>: the error branch
        timeout_s: 600                # optional, > 0 and at most 366 days (as wait seconds)
        # task:        task_type, input (a mapping, see expressions)
        # approval:    timeout_s (required), form (JSON Schema), on_timeout (fail | <step id>), input
        # wait:        seconds | event (exactly one)
        # condition:   when "${ expr }", then [step ids], else [step ids]
        # fanout:      over "${ expr }" (a list), max_items (1..1000, required),
        #              step {kind task|subworkflow, task_type|workflow+version, input, timeout_s}
        # join:        nothing more: a point where branches meet by its join rule
        # loop:        body [step ids] (required), max_iterations (1..100, required), until "${ expr }"
        # subworkflow: workflow (a registered workflow's name), version (optional), input

The graph
---------
A step runs after its **edges' sources**; the edges are (see :class:`Edge`):

* ``needs``: each named step → this step;
* a condition's ``then`` and ``else``: the condition → each branch step (the branch not taken is skipped);
* ``on_error: X``: the step → X (X runs when the step fails); an approval's ``on_timeout: X`` likewise;
* a loop's ``body``: each body step → the loop (the loop finishes after its last iteration).

The graph must be acyclic. A loop does not make a cycle: it is *unrolled* — its body runs once per
iteration, up to ``max_iterations``, until ``until`` is true after an iteration. The one rule that keeps
unrolling sound: **no edge leaves a loop except through the loop step.** A step inside a loop's body
(directly, or inside a loop nested in that body) may be the source of an edge only to steps inside the
same loop; a step outside depends on the loop step instead and sees the body's last iteration.

References (see :mod:`hearth.workflows.expressions`): a step's expressions may read ``$.input.*``
always, and ``$.steps.X`` only when X is *upstream* of the step — a transitive source of its edges — so
X has finished before the step runs (an X that was skipped, or lost an OR join, reads as null).
``$.item`` and ``$.index`` exist only in a fan-out's step template. A loop's ``until`` sees its body
(upstream by the body edges), and so does every step after the loop (the last iteration's outputs).

What a validated definition promises the engine: ids are unique; every named step exists; the graph is
acyclic; task types and sub-workflows were known at registration; every expression parses and reads only
what will be there; loops and fan-outs are bounded; approvals time out (and expire, never approve).
"""

from __future__ import annotations

import heapq
import json
import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from hearth.errors import HearthError
from hearth.workflows import expressions
from hearth.workflows.expressions import ExpressionError

__all__ = [
    "MAX_FANOUT_ITEMS",
    "MAX_LOOP_ITERATIONS",
    "MAX_SECONDS",
    "MAX_STEPS",
    "NAME_PATTERN",
    "STEP_KINDS",
    "ApprovalStep",
    "ConditionStep",
    "Edge",
    "FanoutStep",
    "FanoutTemplate",
    "JoinStep",
    "LoopStep",
    "Step",
    "SubworkflowStep",
    "SubworkflowTemplate",
    "TaskStep",
    "TaskTemplate",
    "WaitStep",
    "WorkflowDefinition",
    "downstream",
    "edges",
    "topological_order",
    "upstream",
    "validate_definition",
]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
MAX_STEPS = 1_000
MAX_FANOUT_ITEMS = 1_000
MAX_LOOP_ITERATIONS = 100
# timeouts and waits: a year and a day at most (YAML's .inf, or 1e300, would be a wait that never ends)
MAX_SECONDS = 366 * 86_400
STEP_KINDS = ("task", "approval", "wait", "condition", "fanout", "join", "loop", "subworkflow")
# on_error / on_timeout keywords; a step with such an id could never be named as a branch
_RESERVED_IDS = frozenset({"fail", "continue"})

Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
TaskType = Annotated[str, StringConstraints(min_length=1, max_length=200)]
Seconds = Annotated[float, Field(gt=0, le=MAX_SECONDS, allow_inf_nan=False, strict=True)]
InputMapping = dict[str, Any]  # a mapping value whose strings are templates (expressions.render)


class _Model(BaseModel):
    # serialize_by_alias: ``model_dump`` writes ``else`` (not ``else_``), so a dump validates again as is
    model_config = ConfigDict(frozen=True, extra="forbid", serialize_by_alias=True)


# --- the model ------------------------------------------------------------------------------------------


class _StepBase(_Model):
    """What every step has: identity, dependencies and their join rule, error handling, a time limit."""

    id: Name
    kind: str  # each kind narrows it to its Literal (the discriminator); declared here so dumps show it second
    needs: tuple[Name, ...] = ()
    join: Literal["all", "any"] = "all"
    on_error: Name = "fail"
    timeout_s: Seconds | None = None


class TaskStep(_StepBase):
    """Runs one task of a registered task type with the rendered ``input``."""

    kind: Literal["task"]
    task_type: TaskType
    input: InputMapping = Field(default_factory=dict)


class ApprovalStep(_StepBase):
    """A human decision (a review item showing the rendered ``input``, decided through ``form``).

    ``timeout_s`` is required: on timeout the item expires and the run goes to ``on_timeout`` (or fails);
    it is never approved by the timer.
    """

    kind: Literal["approval"]
    timeout_s: Seconds
    form: dict[str, Any] | None = None
    on_timeout: Name = "fail"
    input: InputMapping = Field(default_factory=dict)


class WaitStep(_StepBase):
    """Waits for a timer (``seconds``) or for an external ``event``: exactly one of the two."""

    kind: Literal["wait"]
    seconds: Seconds | None = None
    event: Name | None = None


class ConditionStep(_StepBase):
    """Evaluates ``when`` (a boolean expression): the ``then`` steps run if true, the ``else`` steps if
    false; the steps of the branch not taken are skipped."""

    kind: Literal["condition"]
    when: str
    then: tuple[Name, ...] = ()
    else_: tuple[Name, ...] = Field(default=(), alias="else")


class TaskTemplate(_Model):
    """A fan-out's per-item task; its ``input`` may read ``$.item`` and ``$.index``."""

    kind: Literal["task"]
    task_type: TaskType
    input: InputMapping = Field(default_factory=dict)
    timeout_s: Seconds | None = None


class SubworkflowTemplate(_Model):
    """A fan-out's per-item sub-workflow; its ``input`` may read ``$.item`` and ``$.index``."""

    kind: Literal["subworkflow"]
    workflow: Name
    version: Annotated[int, Field(ge=1, strict=True)] | None = None
    input: InputMapping = Field(default_factory=dict)
    timeout_s: Seconds | None = None


FanoutTemplate = Annotated[TaskTemplate | SubworkflowTemplate, Field(discriminator="kind")]


class FanoutStep(_StepBase):
    """Runs ``step`` once per element of the list ``over`` evaluates to (at most ``max_items``, else the
    step fails); its output is the list of the items' outputs, in order."""

    kind: Literal["fanout"]
    over: str
    max_items: Annotated[int, Field(ge=1, le=MAX_FANOUT_ITEMS, strict=True)]
    step: FanoutTemplate


class JoinStep(_StepBase):
    """Does nothing but wait for its ``needs`` by its ``join`` rule: where parallel branches meet."""

    kind: Literal["join"]


class LoopStep(_StepBase):
    """Runs its ``body`` steps again and again, at most ``max_iterations`` times, until ``until`` is true
    after an iteration (without ``until``, exactly ``max_iterations`` times)."""

    kind: Literal["loop"]
    body: tuple[Name, ...] = Field(min_length=1)
    max_iterations: Annotated[int, Field(ge=1, le=MAX_LOOP_ITERATIONS, strict=True)]
    until: str | None = None


class SubworkflowStep(_StepBase):
    """Runs another registered workflow (its newest version, or ``version``) with the rendered ``input``."""

    kind: Literal["subworkflow"]
    workflow: Name
    version: Annotated[int, Field(ge=1, strict=True)] | None = None
    input: InputMapping = Field(default_factory=dict)


Step = Annotated[TaskStep | ApprovalStep | WaitStep | ConditionStep | FanoutStep | JoinStep | LoopStep
                 | SubworkflowStep, Field(discriminator="kind")]


class WorkflowDefinition(_Model):
    """A workflow definition that passed :func:`validate_definition` (build it only through that).

    Frozen; its ``input``/``form``/``input_schema`` dicts are the caller's data and must not be changed.
    ``model_dump(mode="json", exclude_none=True)`` gives a mapping that validates back to an equal model.
    """

    name: Name
    description: str | None = None
    input_schema: dict[str, Any] | None = None
    steps: tuple[Step, ...] = Field(min_length=1, max_length=MAX_STEPS)


# --- the graph ------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Edge:
    """``source`` runs before ``target``; ``kind`` is the field that says so (``needs``, ``then``, ``else``,
    ``on_error``, ``on_timeout``, ``body``) and ``param`` its path, for messages."""

    source: str
    target: str
    kind: str
    param: str


def edges(defn: WorkflowDefinition) -> list[Edge]:
    """Every edge of the graph, in declaration order (see the module's docstring)."""
    found: list[Edge] = []
    for i, step in enumerate(defn.steps):
        found += [Edge(need, step.id, "needs", f"steps[{i}].needs[{k}]") for k, need in enumerate(step.needs)]
        if isinstance(step, ConditionStep):
            found += [Edge(step.id, t, "then", f"steps[{i}].then[{k}]") for k, t in enumerate(step.then)]
            found += [Edge(step.id, t, "else", f"steps[{i}].else[{k}]") for k, t in enumerate(step.else_)]
        if isinstance(step, LoopStep):
            found += [Edge(b, step.id, "body", f"steps[{i}].body[{k}]") for k, b in enumerate(step.body)]
        if step.on_error not in _RESERVED_IDS:
            found.append(Edge(step.id, step.on_error, "on_error", f"steps[{i}].on_error"))
        if isinstance(step, ApprovalStep) and step.on_timeout != "fail":
            found.append(Edge(step.id, step.on_timeout, "on_timeout", f"steps[{i}].on_timeout"))
    return found


def _adjacency(defn: WorkflowDefinition, graph: list[Edge], *, reverse: bool = False) -> dict[str, list[str]]:
    """Each step's targets (or, ``reverse``, its sources), from an :func:`edges` list computed once."""
    out: dict[str, list[str]] = {step.id: [] for step in defn.steps}
    for edge in graph:
        if reverse:
            out[edge.target].append(edge.source)
        else:
            out[edge.source].append(edge.target)
    return out


def topological_order(defn: WorkflowDefinition) -> list[str]:
    """Step ids so that every edge's source comes before its target; among steps that could come next,
    the one declared first (so the order is stable and reads like the definition)."""
    return _topological(defn, _adjacency(defn, edges(defn)))


def _topological(defn: WorkflowDefinition, successors: Mapping[str, list[str]]) -> list[str]:
    position = {step.id: i for i, step in enumerate(defn.steps)}
    waiting = dict.fromkeys(position, 0)
    for targets in successors.values():
        for target in targets:
            waiting[target] += 1
    ready = [position[s] for s, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        step_id = defn.steps[heapq.heappop(ready)].id
        order.append(step_id)
        for target in successors[step_id]:
            waiting[target] -= 1
            if waiting[target] == 0:
                heapq.heappush(ready, position[target])
    if len(order) != len(position):
        raise ValueError("the definition has a dependency cycle (it did not come from validate_definition)")
    return order


def downstream(defn: WorkflowDefinition, step_id: str) -> set[str]:
    """Every step that depends on ``step_id``, transitively (not the step itself): what a rerun of the
    step must run again. Raises KeyError for an unknown step."""
    return _reachable(_adjacency(defn, edges(defn)), step_id)


def upstream(defn: WorkflowDefinition, step_id: str) -> set[str]:
    """Every step ``step_id`` depends on, transitively (not the step itself): the steps whose outputs its
    expressions may read. Raises KeyError for an unknown step."""
    return _reachable(_adjacency(defn, edges(defn), reverse=True), step_id)


def _reachable(graph: Mapping[str, list[str]], start: str) -> set[str]:
    if start not in graph:
        raise KeyError(f"no step {start!r} in the definition")
    seen: set[str] = set()
    pending = list(graph[start])
    while pending:
        node = pending.pop()
        if node not in seen:
            seen.add(node)
            pending += graph[node]
    return seen


# --- validation -----------------------------------------------------------------------------------------


def validate_definition(raw: Mapping[str, Any], *, known_task_types: Collection[str],
                        known_workflows: Collection[str] = ()) -> WorkflowDefinition:
    """Validate a parsed definition into a :class:`WorkflowDefinition`, or raise
    ``HearthError("invalid_request", message, param=path)`` for the first problem found.

    The checks run in this order, each assuming the ones before passed: shape (types, required and
    unknown fields, bounds); step ids (unique, not reserved); every step named in ``needs``, ``then``,
    ``else``, ``body``, ``on_error``, ``on_timeout`` exists (and is named once per list); per-kind rules
    (a wait's seconds or event, known task types and sub-workflows, a workflow not running itself); loop
    bodies (each step in at most one, a loop not in its own); no cycle; no edge leaving a loop; every
    expression parses and reads only what is bound. ``known_workflows`` are the registered names a
    ``subworkflow`` step may run.
    """
    defn = _parse_shape(raw)
    index = _check_ids(defn)
    _check_step_names(defn, index)
    _check_kinds(defn, known_task_types=set(known_task_types), known_workflows=set(known_workflows))
    loops = _check_loop_bodies(defn)
    graph = edges(defn)
    _check_acyclic(defn, graph, index=index)
    _check_loop_exits(graph, loops)
    _check_expressions(defn, graph)
    return defn


def _refuse(param: str | None, message: str, **details: Any) -> HearthError:
    text = f"{param}: {message}" if param else message
    return HearthError("invalid_request", text, param=param, details=details or None)


# shape -----------------------------------------------------------------------------------------------

_MISSING = {
    ("loop", "max_iterations"): f"unbounded loop: a loop must set max_iterations (1..{MAX_LOOP_ITERATIONS})",
    ("fanout", "max_items"): f"unbounded fan-out: a fanout must set max_items (1..{MAX_FANOUT_ITEMS})",
    ("approval", "timeout_s"): "an approval must set timeout_s: on timeout it expires (a timer never approves), "
                               "so a run cannot wait for a human forever",
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _parse_shape(raw: Mapping[str, Any]) -> WorkflowDefinition:
    try:
        return WorkflowDefinition.model_validate(raw)
    except ValidationError as exc:
        param, message = _shape_error(exc.errors(include_url=False)[0])
        raise _refuse(param, message) from None


def _shape_error(error: Mapping[str, Any]) -> tuple[str | None, str]:
    """(param, message) for pydantic's first error, in this module's words where they say more."""
    loc, kind = _strip_tags(tuple(error["loc"]))
    field = loc[-1] if loc else None  # the missing field, for a "missing" error
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        return _path((*loc, "kind")), f"a step's kind must be one of {', '.join(STEP_KINDS)}"
    if error["type"] in ("model_attributes_type", "model_type"):
        return _path(loc) or None, "must be an object" if loc else "a workflow definition must be an object"
    if error["type"] == "missing" and kind is not None and isinstance(field, str) and (kind, field) in _MISSING:
        return _path(loc), _MISSING[(kind, field)]
    return _path(loc) or None, str(error["msg"])


def _strip_tags(loc: tuple[str | int, ...]) -> tuple[tuple[str | int, ...], str | None]:
    """Pydantic puts the discriminator's value into ``loc`` (``steps, 2, "task", "input"``); drop it, and
    say which kind the error is in (the innermost)."""
    kept: list[str | int] = []
    kind: str | None = None
    for i, part in enumerate(loc):
        after_step = i >= 2 and loc[i - 2] == "steps" and isinstance(loc[i - 1], int)
        after_template = i >= 1 and loc[i - 1] == "step"
        if isinstance(part, str) and part in STEP_KINDS and (after_step or after_template):
            kind = part
            continue
        if part != "[key]":
            kept.append(part)
    return tuple(kept), kind


def _path(parts: tuple[str | int, ...]) -> str:
    """``("steps", 2, "input", "a b")`` → ``steps[2].input["a b"]``."""
    out = "".join(f"[{part}]" if isinstance(part, int) else _key_suffix(part) for part in parts)
    return out.removeprefix(".")


# ids and names ---------------------------------------------------------------------------------------


def _check_ids(defn: WorkflowDefinition) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, step in enumerate(defn.steps):
        if step.id in _RESERVED_IDS:
            raise _refuse(f"steps[{i}].id", f"{step.id!r} is reserved (on_error and on_timeout use it as a keyword)")
        if step.id in index:
            raise _refuse(f"steps[{i}].id", f"duplicate step id {step.id!r} (first at steps[{index[step.id]}])")
        index[step.id] = i
    return index


def _named_lists(step: Step) -> Iterator[tuple[str, tuple[str, ...]]]:
    yield "needs", step.needs
    if isinstance(step, ConditionStep):
        yield "then", step.then
        yield "else", step.else_
    if isinstance(step, LoopStep):
        yield "body", step.body


def _check_step_names(defn: WorkflowDefinition, index: Mapping[str, int]) -> None:
    for i, step in enumerate(defn.steps):
        for field, names in _named_lists(step):
            for k, name in enumerate(names):
                if name not in index:
                    raise _refuse(f"steps[{i}].{field}[{k}]", f"unknown step {name!r}")
                if name in names[:k]:
                    raise _refuse(f"steps[{i}].{field}[{k}]", f"step {name!r} is listed twice")
        if step.on_error not in _RESERVED_IDS and step.on_error not in index:
            raise _refuse(f"steps[{i}].on_error", f"unknown step {step.on_error!r} (or fail, continue)")
        if isinstance(step, ApprovalStep) and step.on_timeout != "fail" and step.on_timeout not in index:
            raise _refuse(f"steps[{i}].on_timeout", f"unknown step {step.on_timeout!r} (or fail)")


# per kind --------------------------------------------------------------------------------------------


def _check_kinds(defn: WorkflowDefinition, *, known_task_types: set[str], known_workflows: set[str]) -> None:
    for i, step in enumerate(defn.steps):
        if isinstance(step, WaitStep):
            _check_wait(step, f"steps[{i}]")
        for prefix, work in _work(step, i):
            if isinstance(work, TaskStep | TaskTemplate) and work.task_type not in known_task_types:
                raise _refuse(f"{prefix}.task_type", f"unknown task type {work.task_type!r}")
            if isinstance(work, SubworkflowStep | SubworkflowTemplate):
                _check_subworkflow(defn.name, work.workflow, known_workflows, param=f"{prefix}.workflow")


def _check_wait(step: WaitStep, prefix: str) -> None:
    if step.seconds is None and step.event is None:
        raise _refuse(prefix, "a wait step needs seconds (a timer) or event (an external event)")
    if step.seconds is not None and step.event is not None:
        raise _refuse(f"{prefix}.event", "a wait step takes seconds or event, not both")


def _work(step: Step, i: int) -> Iterator[tuple[str, TaskStep | SubworkflowStep | TaskTemplate | SubworkflowTemplate]]:
    """(path, what runs) for a step that runs a task or a sub-workflow, itself or as a fan-out's template."""
    if isinstance(step, TaskStep | SubworkflowStep):
        yield f"steps[{i}]", step
    elif isinstance(step, FanoutStep):
        yield f"steps[{i}].step", step.step


def _check_subworkflow(own_name: str, workflow: str, known: set[str], *, param: str) -> None:
    if workflow == own_name:
        raise _refuse(param, f"workflow {own_name!r} cannot run itself as a sub-workflow")
    if workflow not in known:
        raise _refuse(param, f"unknown workflow {workflow!r} (register it first)")


# loops -----------------------------------------------------------------------------------------------


def _check_loop_bodies(defn: WorkflowDefinition) -> dict[str, str]:
    """Each body step's loop (a step belongs to at most one loop's body; a loop is not in its own)."""
    owner: dict[str, str] = {}
    for i, step in enumerate(defn.steps):
        if not isinstance(step, LoopStep):
            continue
        for k, member in enumerate(step.body):
            if member == step.id:
                raise _refuse(f"steps[{i}].body[{k}]", f"loop {step.id!r} cannot be in its own body")
            if member in owner:
                raise _refuse(f"steps[{i}].body[{k}]", f"step {member!r} is already in the body of loop "
                                                       f"{owner[member]!r}")
            owner[member] = step.id
    return owner


def _enclosing(step_id: str, owner: Mapping[str, str]) -> list[str]:
    """The loops around a step, innermost first (the graph is acyclic, so the chain ends)."""
    chain: list[str] = []
    while step_id in owner:
        step_id = owner[step_id]
        chain.append(step_id)
    return chain


def _check_loop_exits(graph: list[Edge], owner: Mapping[str, str]) -> None:
    for edge in graph:
        if edge.kind == "body":
            continue
        outside = [loop for loop in _enclosing(edge.source, owner) if loop not in _enclosing(edge.target, owner)]
        if outside and edge.target in outside:
            raise _refuse(edge.param, f"loop {edge.target!r} runs {edge.source!r} (its body): it does not also "
                                      f"depend on it")
        if outside:
            loop = outside[-1]
            raise _refuse(edge.param, f"{edge.source!r} is inside loop {loop!r} and {edge.target!r} is not: "
                                      f"outside a loop, depend on the loop step {loop!r} (it finishes after the "
                                      f"body's last iteration)")


# cycles ----------------------------------------------------------------------------------------------


def _check_acyclic(defn: WorkflowDefinition, graph: list[Edge], *, index: Mapping[str, int]) -> None:
    found = _find_cycle(_adjacency(defn, graph))
    if found is None:
        return
    first = found.index(min(found, key=index.__getitem__))  # start at the step declared first
    cycle = found[first:] + found[:first]
    shown = " → ".join([*cycle, cycle[0]])
    raise _refuse(f"steps[{index[cycle[0]]}]", f"dependency cycle: {shown} (each step must finish before the "
                                               f"next can start)", cycle=cycle)


def _find_cycle(successors: Mapping[str, list[str]]) -> list[str] | None:
    """A cycle in the graph (its steps in running order), by depth-first search in declaration order."""
    state = dict.fromkeys(successors, 0)  # 0 unseen, 1 on the current path, 2 finished
    for root in successors:
        if state[root]:
            continue
        path, iterators = [root], [iter(successors[root])]
        state[root] = 1
        while iterators:
            target = next(iterators[-1], None)
            if target is None:
                state[path.pop()] = 2
                iterators.pop()
            elif state[target] == 1:
                return path[path.index(target):]
            elif state[target] == 0:
                state[target] = 1
                path.append(target)
                iterators.append(iter(successors[target]))
    return None


# expressions -----------------------------------------------------------------------------------------


def _leaves(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, str]]:
    """(path, string) for every string in a mapping value that may hold a template."""
    if depth > expressions.MAX_VALUE_DEPTH:
        raise _refuse(path, f"nested more than {expressions.MAX_VALUE_DEPTH} deep")
    if isinstance(value, str):
        if "$" in value:
            yield path, value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{path}{_key_suffix(str(key))}", depth + 1)
    elif isinstance(value, list | tuple):
        for k, item in enumerate(value):
            yield from _leaves(item, f"{path}[{k}]", depth + 1)


def _key_suffix(key: str) -> str:
    return f".{key}" if _IDENTIFIER.fullmatch(key) else f"[{json.dumps(key, ensure_ascii=False)}]"


def _templates(step: Step, i: int) -> Iterator[tuple[str, str, bool]]:
    """(path, template, exact) for every template of a step; exact = must be one whole ``${ expr }``."""
    prefix = f"steps[{i}]"
    if isinstance(step, TaskStep | ApprovalStep | SubworkflowStep):
        yield from ((path, text, False) for path, text in _leaves(step.input, f"{prefix}.input"))
    elif isinstance(step, ConditionStep):
        yield f"{prefix}.when", step.when, True
    elif isinstance(step, FanoutStep):
        yield f"{prefix}.over", step.over, True
    elif isinstance(step, LoopStep) and step.until is not None:
        yield f"{prefix}.until", step.until, True


@dataclass(frozen=True, slots=True)
class _Binding:
    """What the expressions of one step may read: ``$.steps.X`` for X upstream of ``step_id`` (bit
    ``position[X]`` of ``upstream``); ``$.item`` and ``$.index`` when ``item`` (a fan-out's template)."""

    step_id: str
    upstream: int
    position: Mapping[str, int]
    item: bool

    def is_upstream(self, step_id: str) -> bool:
        return bool(self.upstream >> self.position[step_id] & 1)


def _check_expressions(defn: WorkflowDefinition, graph: list[Edge]) -> None:
    position = {step.id: i for i, step in enumerate(defn.steps)}
    closure = _upstream_bits(defn, graph, position=position)
    for i, step in enumerate(defn.steps):
        binding = _Binding(step.id, closure[step.id], position, item=False)
        for path, template, exact in _templates(step, i):
            _check_template(path, template, exact=exact, binding=binding)
        if isinstance(step, FanoutStep):
            per_item = _Binding(step.id, closure[step.id], position, item=True)
            for path, template in _leaves(step.step.input, f"steps[{i}].step.input"):
                _check_template(path, template, exact=False, binding=per_item)


def _upstream_bits(defn: WorkflowDefinition, graph: list[Edge], *, position: Mapping[str, int]) -> dict[str, int]:
    """Each step's upstream steps as a bit set (bit = declaration index): one pass in topological order,
    so a dense 1,000-step graph costs milliseconds, not a search per step."""
    predecessors = _adjacency(defn, graph, reverse=True)
    bits: dict[str, int] = {}
    for step_id in _topological(defn, _adjacency(defn, graph)):
        mask = 0
        for source in predecessors[step_id]:
            mask |= bits[source] | 1 << position[source]
        bits[step_id] = mask
    return bits


def _check_template(path: str, template: str, *, exact: bool, binding: _Binding) -> None:
    try:
        found = expressions.template_references(template)
        is_exact = expressions.exact_expression(template) is not None
    except ExpressionError as exc:
        raise _refuse(path, f"invalid expression: {exc}", position=exc.position) from None
    if exact and not is_exact:
        raise _refuse(path, 'must be a single expression, written "${ ... }" with nothing around it')
    for reference in sorted(found):
        problem = _binding_problem(reference, binding)
        if problem:
            raise _refuse(path, f"unbound reference {_reference_text(reference)}: {problem}")


def _binding_problem(reference: tuple[str, ...], binding: _Binding) -> str | None:
    root = reference[0]
    if root == "input" or (root in ("item", "index") and binding.item):
        return None
    if root in ("item", "index"):
        return "$.item and $.index exist only in a fanout's step template"
    source = reference[1]
    if source == binding.step_id:
        return f"step {source!r} cannot read its own output"
    if source not in binding.position:
        return f"there is no step {source!r}"
    if not binding.is_upstream(source):
        return f"step {source!r} is not upstream of {binding.step_id!r} (add it, or a step after it, to needs)"
    return None


def _reference_text(reference: tuple[str, ...]) -> str:
    """``("steps", "a.b", "output", "[0]")`` → ``$.steps["a.b"].output[0]``."""
    return "$" + "".join(part if part.startswith("[") and part.endswith("]") else _key_suffix(part)
                         for part in reference)
