"""Workflow definitions: the valid shapes, every refusal with the exact path at fault, and the graph helpers.

Definitions here are plain dicts, as YAML or JSON parse to; each refusal test changes one thing in an
otherwise valid definition, so the path it expects can only come from that change.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from hearth.errors import HearthError
from hearth.workflows.definitions import (
    STEP_KINDS,
    ApprovalStep,
    ConditionStep,
    Edge,
    FanoutStep,
    LoopStep,
    TaskTemplate,
    WorkflowDefinition,
    downstream,
    edges,
    topological_order,
    upstream,
    validate_definition,
)
from tests.support import examples

TASK_TYPES = {"summarize", "extract", "generate", "notify", "http.call"}
WORKFLOWS = {"persist-lesson", "ocr"}


def task(step_id: str, *needs: str, **fields: Any) -> dict[str, Any]:
    return {"id": step_id, "kind": "task", "task_type": "summarize", "needs": list(needs), **fields}


def fanout(**fields: Any) -> dict[str, Any]:
    return {"id": "f", "kind": "fanout", "over": "${ $.input.x }", "max_items": 5,
            "step": {"kind": "task", "task_type": "extract"}, **fields}


def definition(*steps: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"name": "lesson-prep", "steps": list(steps), **fields}


def valid(raw: dict[str, Any]) -> WorkflowDefinition:
    return validate_definition(raw, known_task_types=TASK_TYPES, known_workflows=WORKFLOWS)


def refusal(raw: Any) -> HearthError:
    with pytest.raises(HearthError) as caught:
        valid(raw)
    assert caught.value.code == "invalid_request" and caught.value.status == 400
    assert caught.value.message.startswith(f"{caught.value.param}: ") or caught.value.param is None
    return caught.value


# A 6-step workflow: fetch, then analyse and recommend in parallel, an AND join, generate, a teacher's review.
SIX_STEPS = definition(
    task("fetch", input={"url": "${ $.input.url }"}),
    task("analyse", "fetch", input={"text": "${ $.steps.fetch.output.text }"}),
    task("recommend", "fetch", task_type="extract", input={"text": "${ $.steps.fetch.output.text }"}),
    {"id": "both", "kind": "join", "needs": ["analyse", "recommend"], "join": "all"},
    task("generate", "both", task_type="generate", input={
        "topics": "${ $.steps.analyse.output.topics }",
        "prompt": "Plan for ${ $.input.grade }: ${ $.steps.recommend.output.summary }",
        "meta": {"sources": ["${ $.steps.fetch.output.url }", 3, None]}}),
    {"id": "review", "kind": "approval", "needs": ["generate"], "timeout_s": 86400,
     "form": {"type": "object", "properties": {"comment": {"type": "string"}}},
     "input": {"plan": "${ $.steps.generate.output }"}},
    description="analyse → recommend → generate → review", input_schema={"type": "object"},
)

# Every kind at once (the lesson-preparation shape of seed 002, with a fan-out and a sub-workflow).
ALL_KINDS = definition(
    task("analyse", input={"text": "${ $.input.text }"}),
    {"id": "pages", "kind": "fanout", "needs": ["analyse"], "over": "${ $.steps.analyse.output.pages }",
     "max_items": 50, "step": {"kind": "task", "task_type": "extract",
                               "input": {"page": "${ $.item }", "n": "${ $.index }", "lang": "${ $.input.lang }"}}},
    task("generate", "pages", task_type="generate", input={"pages": "${ $.steps.pages.output }"}),
    task("gate", "generate", input={"draft": "${ $.steps.generate.output }"}),
    {"id": "regenerate", "kind": "loop", "needs": ["pages"], "body": ["generate", "gate"], "max_iterations": 3,
     "until": "${ eq($.steps.gate.output.passed, true) }"},
    {"id": "passed", "kind": "condition", "needs": ["regenerate"],
     "when": "${ default($.steps.gate.output.passed, false) }", "then": ["review"], "else": ["alert"]},
    {"id": "review", "kind": "approval", "timeout_s": 86400, "on_timeout": "alert",
     "input": {"draft": "${ $.steps.generate.output }"}},
    task("alert", task_type="notify", input={"why": "no approved plan"}),
    {"id": "cool-off", "kind": "wait", "needs": ["review"], "seconds": 5},
    {"id": "persist", "kind": "subworkflow", "needs": ["cool-off"], "workflow": "persist-lesson", "version": 2,
     "input": {"plan": "${ $.steps.review.output }"}, "on_error": "alert", "timeout_s": 600},
    {"id": "ack", "kind": "wait", "needs": ["persist"], "event": "lesson.acknowledged", "timeout_s": 3600,
     "on_error": "continue"},
)


# --- valid definitions ----------------------------------------------------------------------------------


def test_a_six_step_workflow_with_a_parallel_branch_and_an_and_join_is_valid() -> None:
    defn = valid(SIX_STEPS)
    assert [step.id for step in defn.steps] == ["fetch", "analyse", "recommend", "both", "generate", "review"]
    assert defn.steps[3].join == "all" and defn.steps[3].needs == ("analyse", "recommend")
    assert topological_order(defn) == ["fetch", "analyse", "recommend", "both", "generate", "review"]
    assert upstream(defn, "generate") == {"fetch", "analyse", "recommend", "both"}
    assert downstream(defn, "analyse") == {"both", "generate", "review"}
    assert downstream(defn, "fetch") == {"analyse", "recommend", "both", "generate", "review"}
    review = defn.steps[5]
    assert isinstance(review, ApprovalStep) and review.timeout_s == 86400 and review.on_timeout == "fail"


def test_an_or_join_is_valid_and_may_read_every_branch() -> None:
    defn = valid(definition(
        task("fast"), task("slow", task_type="http.call"),
        task("first", "fast", "slow", join="any",
             input={"answer": "${ default($.steps.fast.output, $.steps.slow.output) }"})))
    assert defn.steps[2].join == "any"
    assert upstream(defn, "first") == {"fast", "slow"}
    assert topological_order(defn) == ["fast", "slow", "first"]


def test_every_step_kind_together_is_valid() -> None:
    defn = valid(ALL_KINDS)
    pages, loop, condition = defn.steps[1], defn.steps[4], defn.steps[5]
    assert isinstance(pages, FanoutStep) and isinstance(pages.step, TaskTemplate) and pages.max_items == 50
    assert isinstance(loop, LoopStep) and loop.body == ("generate", "gate") and loop.max_iterations == 3
    assert isinstance(condition, ConditionStep) and condition.then == ("review",) and condition.else_ == ("alert",)
    # alert waits for persist (its on_error), so cool-off and persist come before it
    assert topological_order(defn) == ["analyse", "pages", "generate", "gate", "regenerate", "passed", "review",
                                       "cool-off", "persist", "alert", "ack"]


def test_defaults_fill_in_what_a_step_does_not_say() -> None:
    step = valid(definition(task("only"))).steps[0]
    assert (step.needs, step.join, step.on_error, step.timeout_s) == ((), "all", "fail", None)


@pytest.mark.parametrize("raw", [SIX_STEPS, ALL_KINDS], ids=["six-steps", "all-kinds"])
def test_a_dump_of_a_definition_validates_back_to_an_equal_definition(raw: dict[str, Any]) -> None:
    defn = valid(raw)
    dumped = defn.model_dump(mode="json", exclude_none=True)
    assert valid(dumped) == defn
    assert all(step["kind"] == original["kind"] for step, original in zip(dumped["steps"], raw["steps"], strict=True))


def test_a_dump_writes_else_under_its_own_name() -> None:
    assert valid(ALL_KINDS).model_dump(mode="json")["steps"][5]["else"] == ["alert"]


def test_a_definition_is_frozen() -> None:
    defn = valid(SIX_STEPS)
    with pytest.raises(ValidationError):
        defn.steps[0].id = "other"  # type: ignore[misc]


def test_validation_does_not_change_the_raw_definition() -> None:
    raw = copy.deepcopy(ALL_KINDS)
    valid(raw)
    assert raw == ALL_KINDS


def test_references_to_the_workflow_input_are_always_bound() -> None:
    valid(definition(task("a", input={"x": "${ $.input.anything.at[0].all }"})))


def test_a_step_named_with_dots_is_referenced_with_a_quoted_key() -> None:
    valid(definition(task("extract.v2"), task("use", "extract.v2", input={"t": '${ $.steps["extract.v2"].output }'})))


# --- refusals: shape ------------------------------------------------------------------------------------

SHAPE_CASES: list[tuple[str, Any, str | None, str]] = [
    ("not an object", ["steps"], None, "a workflow definition must be an object"),
    ("no name", {"steps": [task("a")]}, "name", "Field required"),
    ("a bad name", definition(task("a"), name="-lesson"), "name", "String should match pattern"),
    ("an unknown top-level field", definition(task("a"), version=3), "version", "Extra inputs are not permitted"),
    ("no steps", definition(), "steps", "at least 1 item"),
    ("a step that is not an object", definition("a"), "steps[0]", "must be an object"),
    ("a step without a kind", definition({"id": "a"}), "steps[0].kind", "a step's kind must be one of task,"),
    ("an unknown kind", definition({"id": "a", "kind": "shell"}), "steps[0].kind", "a step's kind must be one of"),
    ("a bad step id", definition(task("a"), task("b c")), "steps[1].id", "String should match pattern"),
    ("an unknown step field", definition(task("a", retries=3)), "steps[0].retries", "Extra inputs are not permitted"),
    ("a field of another kind", definition({"id": "a", "kind": "join", "task_type": "summarize"}),
     "steps[0].task_type", "Extra inputs are not permitted"),
    ("needs that is not a list", definition(task("a"), task("b", needs="a")), "steps[1].needs", "valid tuple"),
    ("a bad join rule", definition(task("a"), task("b", "a", join="xor")), "steps[1].join", "'all' or 'any'"),
    ("a zero timeout", definition(task("a", timeout_s=0)), "steps[0].timeout_s", "greater than 0"),
    ("an infinite approval timeout", definition({"id": "ok", "kind": "approval", "timeout_s": float("inf")}),
     "steps[0].timeout_s", "finite number"),
    ("a wait longer than a year", definition({"id": "w", "kind": "wait", "seconds": 366 * 86400 + 1}),
     "steps[0].seconds", "less than or equal to 31622400"),
    ("a timeout that is a string", definition(task("a", timeout_s="600")), "steps[0].timeout_s", "valid number"),
    ("a task without a task type", definition({"id": "a", "kind": "task"}), "steps[0].task_type", "Field required"),
    ("an input that is not an object", definition(task("a", input="${ $.input }")), "steps[0].input",
     "valid dictionary"),
    ("a fan-out over too many items", definition(fanout(max_items=1001)), "steps[0].max_items",
     "less than or equal to 1000"),
    ("a fan-out bound that is a boolean", definition(fanout(max_items=True)), "steps[0].max_items", "valid integer"),
    ("a fan-out template with an id", definition(fanout(step={"id": "x", "kind": "task", "task_type": "extract"})),
     "steps[0].step.id", "Extra inputs are not permitted"),
    ("a fan-out template of another kind", definition(fanout(step={"kind": "approval"})), "steps[0].step.kind",
     "a step's kind must be one of"),
    ("a loop of 101 iterations", definition(task("a"), {"id": "l", "kind": "loop", "body": ["a"],
                                                        "max_iterations": 101}),
     "steps[1].max_iterations", "less than or equal to 100"),
    ("a loop of 0 iterations", definition(task("a"), {"id": "l", "kind": "loop", "body": ["a"], "max_iterations": 0}),
     "steps[1].max_iterations", "greater than or equal to 1"),
    ("a loop with an empty body", definition({"id": "l", "kind": "loop", "body": [], "max_iterations": 2}),
     "steps[0].body", "at least 1 item"),
    ("a sub-workflow version 0", definition({"id": "s", "kind": "subworkflow", "workflow": "ocr", "version": 0}),
     "steps[0].version", "greater than or equal to 1"),
    ("an unknown field with an odd name", definition(task("a", input={"a b": {"c": 1}}), **{"x y": 1}), '["x y"]',
     "Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("case", "raw", "param", "message"), SHAPE_CASES, ids=[c[0] for c in SHAPE_CASES])
def test_a_malformed_definition_is_refused_at_the_field(case: str, raw: Any, param: str | None, message: str) -> None:
    error = refusal(raw)
    assert error.param == param
    assert message in error.message


def test_a_loop_without_max_iterations_is_refused_as_unbounded() -> None:
    error = refusal(definition(task("a"), {"id": "l", "kind": "loop", "body": ["a"]}))
    assert error.param == "steps[1].max_iterations"
    assert "unbounded loop" in error.message


def test_a_fanout_without_max_items_is_refused_as_unbounded() -> None:
    unbounded = fanout()
    del unbounded["max_items"]
    error = refusal(definition(unbounded))
    assert error.param == "steps[0].max_items"
    assert "unbounded fan-out" in error.message


def test_an_approval_without_a_timeout_is_refused() -> None:
    error = refusal(definition(task("a"), {"id": "ok", "kind": "approval", "needs": ["a"]}))
    assert error.param == "steps[1].timeout_s"
    assert "an approval must set timeout_s" in error.message and "never approves" in error.message


@pytest.mark.parametrize(("fields", "param", "message"), [
    ({}, "steps[0]", "a wait step needs seconds (a timer) or event"),
    ({"seconds": 5, "event": "paid"}, "steps[0].event", "seconds or event, not both"),
])
def test_a_wait_takes_exactly_one_of_seconds_and_event(fields: dict[str, Any], param: str, message: str) -> None:
    error = refusal(definition({"id": "w", "kind": "wait", **fields}))
    assert (error.param, message in error.message) == (param, True)


# --- refusals: ids and the steps they name ----------------------------------------------------------------


def test_a_duplicate_step_id_is_refused_at_the_second_one() -> None:
    error = refusal(definition(task("a"), task("b"), task("a")))
    assert error.param == "steps[2].id"
    assert error.message == "steps[2].id: duplicate step id 'a' (first at steps[0])"


@pytest.mark.parametrize("reserved", ["fail", "continue"])
def test_the_on_error_keywords_are_not_step_ids(reserved: str) -> None:
    assert refusal(definition(task(reserved))).param == "steps[0].id"


def on(index: int, change: Callable[[dict[str, Any]], Any], raw: dict[str, Any] = ALL_KINDS) -> dict[str, Any]:
    """``raw`` with ``change`` applied to its step ``index``."""
    changed = copy.deepcopy(raw)
    change(changed["steps"][index])
    return changed


@pytest.mark.parametrize(("raw", "param"), [
    (on(3, lambda s: s.update(needs=["generate", "ghost"])), "steps[3].needs[1]"),
    (on(5, lambda s: s.update(then=["review", "ghost"])), "steps[5].then[1]"),
    (on(5, lambda s: s.update({"else": ["ghost"]})), "steps[5].else[0]"),
    (on(4, lambda s: s.update(body=["generate", "ghost"])), "steps[4].body[1]"),
    (on(9, lambda s: s.update(on_error="ghost")), "steps[9].on_error"),
    (on(6, lambda s: s.update(on_timeout="ghost")), "steps[6].on_timeout"),
], ids=["needs", "then", "else", "body", "on_error", "on_timeout"])
def test_naming_an_unknown_step_is_refused_at_the_name(raw: dict[str, Any], param: str) -> None:
    error = refusal(raw)
    assert error.param == param
    assert "unknown step 'ghost'" in error.message


def test_a_step_listed_twice_is_refused_at_the_repeat() -> None:
    assert refusal(definition(task("a"), task("b", "a", "a"))).param == "steps[1].needs[1]"


# --- refusals: cycles -----------------------------------------------------------------------------------


def test_a_step_that_needs_itself_is_a_cycle_of_one() -> None:
    error = refusal(definition(task("a"), task("b", "b")))
    assert error.param == "steps[1]"
    assert error.message == "steps[1]: dependency cycle: b → b (each step must finish before the next can start)"


def test_two_steps_needing_each_other_are_a_cycle_of_two() -> None:
    error = refusal(definition(task("start"), task("a", "b"), task("b", "a")))
    assert error.param == "steps[1]"
    assert "dependency cycle: a → b → a" in error.message
    assert error.details == {"cycle": ["a", "b"]}


def test_a_cycle_of_three_is_listed_in_running_order_from_the_step_declared_first() -> None:
    error = refusal(definition(task("c", "b"), task("a", "c"), task("b", "a")))
    assert error.param == "steps[0]"
    assert "dependency cycle: c → a → b → c" in error.message


def test_a_cycle_through_branch_and_error_edges_is_found() -> None:
    # check's error branch is fix, and fix feeds back into check
    error = refusal(definition(task("check", "fix", on_error="fix"), task("fix")))
    assert "dependency cycle: check → fix → check" in error.message
    # a condition whose then-branch is one of its own dependencies
    error = refusal(definition(task("a"), {"id": "c", "kind": "condition", "needs": ["a"], "when": "${ true }",
                                           "then": ["a"]}))
    assert (error.param, "a → c → a" in error.message) == ("steps[0]", True)


def test_a_loop_in_its_own_body_is_refused() -> None:
    error = refusal(definition({"id": "l", "kind": "loop", "body": ["l"], "max_iterations": 2}))
    assert error.param == "steps[0].body[0]"


# --- refusals: task types and sub-workflows ---------------------------------------------------------------


@pytest.mark.parametrize(("raw", "param", "message"), [
    (on(2, lambda s: s.update(task_type="no.such")), "steps[2].task_type", "unknown task type 'no.such'"),
    (on(1, lambda s: s["step"].update(task_type="no.such")), "steps[1].step.task_type", "unknown task type"),
    (on(9, lambda s: s.update(workflow="no-such")), "steps[9].workflow", "unknown workflow 'no-such'"),
    (on(9, lambda s: s.update(workflow="lesson-prep")), "steps[9].workflow", "cannot run itself"),
    (on(1, lambda s: s.update(step={"kind": "subworkflow", "workflow": "nope"})), "steps[1].step.workflow",
     "unknown workflow 'nope'"),
], ids=["task", "fanout-task", "subworkflow", "itself", "fanout-subworkflow"])
def test_unknown_task_types_and_workflows_are_refused(raw: dict[str, Any], param: str, message: str) -> None:
    error = refusal(raw)
    assert (error.param, message in error.message) == (param, True), error.message


def test_a_workflow_may_not_run_itself_even_when_it_is_already_registered() -> None:
    raw = definition({"id": "again", "kind": "subworkflow", "workflow": "lesson-prep"})
    with pytest.raises(HearthError) as caught:
        validate_definition(raw, known_task_types=TASK_TYPES, known_workflows={"lesson-prep"})
    assert caught.value.param == "steps[0].workflow"


# --- refusals: loops ------------------------------------------------------------------------------------


def test_a_step_outside_a_loop_cannot_need_a_step_of_its_body() -> None:
    error = refusal(on(5, lambda s: s.update(needs=["regenerate", "gate"])))
    assert error.param == "steps[5].needs[1]"
    assert "'gate' is inside loop 'regenerate' and 'passed' is not" in error.message


def test_a_body_step_cannot_branch_out_of_its_loop() -> None:
    error = refusal(on(3, lambda s: s.update(on_error="alert")))
    assert error.param == "steps[3].on_error"
    assert "inside loop 'regenerate'" in error.message


def test_a_loop_does_not_also_need_its_own_body() -> None:
    error = refusal(on(4, lambda s: s.update(needs=["pages", "gate"])))
    assert error.param == "steps[4].needs[1]"
    assert "loop 'regenerate' runs 'gate' (its body)" in error.message


def test_a_step_in_two_loop_bodies_is_refused() -> None:
    raw = copy.deepcopy(ALL_KINDS)
    raw["steps"].append({"id": "again", "kind": "loop", "body": ["gate"], "max_iterations": 2})
    error = refusal(raw)
    assert error.param == "steps[11].body[0]"
    assert "already in the body of loop 'regenerate'" in error.message


def test_a_loop_may_nest_and_its_body_may_feed_the_inner_loop_but_not_leave_it() -> None:
    inner = {"id": "inner", "kind": "loop", "body": ["draft"], "max_iterations": 2}
    outer = {"id": "outer", "kind": "loop", "body": ["inner", "prep", "score"], "max_iterations": 3,
             "until": "${ gt($.steps.score.output, 0.8) }"}
    raw = definition(task("prep"), task("draft", "prep"), inner, task("score", "inner",
                     input={"d": "${ $.steps.draft.output }"}), outer, task("after", "outer"))
    defn = valid(raw)
    assert topological_order(defn) == ["prep", "draft", "inner", "score", "outer", "after"]
    leaving = copy.deepcopy(raw)
    leaving["steps"][3]["needs"] = ["inner", "draft"]  # score is in outer's body, draft in inner's
    assert refusal(leaving).param == "steps[3].needs[1]"


# --- refusals: expressions ------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "param", "position"), [
    (on(0, lambda s: s.update(input={"text": "${ $.input.text"})), "steps[0].input.text", 0),
    (on(0, lambda s: s.update(input={"pages": ["ok", "p${ len() }"]})), "steps[0].input.pages[1]", 4),
    (on(0, lambda s: s.update(input={"a b": {"c": "${ nope(1) }"}})), 'steps[0].input["a b"].c', 3),
    (on(5, lambda s: s.update(when="${ eq(1 }")), "steps[5].when", 8),
    (on(1, lambda s: s.update(over="${ $.steps..x }")), "steps[1].over", 11),
    (on(4, lambda s: s.update(until="${ true")), "steps[4].until", 0),
    (on(1, lambda s: s["step"].update(input={"x": "${ 01 }"})), "steps[1].step.input.x", 3),
], ids=["input", "list-element", "odd-key", "when", "over", "until", "fanout-template"])
def test_an_expression_that_does_not_parse_is_refused_at_its_field(raw: dict[str, Any], param: str,
                                                                   position: int) -> None:
    error = refusal(raw)
    assert error.param == param
    assert "invalid expression" in error.message
    assert error.details == {"position": position}


@pytest.mark.parametrize(("raw", "param"), [
    (on(5, lambda s: s.update(when="passed: ${ true }")), "steps[5].when"),
    (on(5, lambda s: s.update(when="true")), "steps[5].when"),
    (on(1, lambda s: s.update(over="${ $.input.a }${ $.input.b }")), "steps[1].over"),
], ids=["text-around", "no-template", "two-templates"])
def test_when_over_and_until_must_be_one_whole_expression(raw: dict[str, Any], param: str) -> None:
    error = refusal(raw)
    assert (error.param, "must be a single expression" in error.message) == (param, True)


@pytest.mark.parametrize(("raw", "param", "problem"), [
    (on(2, lambda s: s.update(input={"x": "${ $.steps.analyse.output }"}), SIX_STEPS), "steps[2].input.x",
     "step 'analyse' is not upstream of 'recommend'"),  # a parallel branch
    (on(0, lambda s: s.update(input={"x": "${ $.steps.review.output }"}), SIX_STEPS), "steps[0].input.x",
     "step 'review' is not upstream of 'fetch'"),  # a later step
    (on(1, lambda s: s.update(input={"x": "a ${ $.steps.analyse.output.y }"}), SIX_STEPS), "steps[1].input.x",
     "step 'analyse' cannot read its own output"),
    (on(1, lambda s: s.update(input={"x": ["${ $.steps.ghost }"]}), SIX_STEPS), "steps[1].input.x[0]",
     "there is no step 'ghost'"),
    (on(0, lambda s: s.update(input={"x": "${ $.item }"})), "steps[0].input.x",
     "$.item and $.index exist only in a fanout's step template"),
    (on(1, lambda s: s.update(over="${ $.index }")), "steps[1].over", "exist only in a fanout's step template"),
    (on(5, lambda s: s.update(when="${ $.steps.review.output.ok }")), "steps[5].when",
     "step 'review' is not upstream of 'passed'"),
    (on(1, lambda s: s["step"].update(input={"x": "${ $.steps.gate.output }"})), "steps[1].step.input.x",
     "step 'gate' is not upstream of 'pages'"),
], ids=["parallel", "later", "itself", "unknown", "item-outside", "index-in-over", "when", "fanout-template"])
def test_a_reference_to_a_step_that_is_not_upstream_is_unbound(raw: dict[str, Any], param: str, problem: str) -> None:
    error = refusal(raw)
    assert error.param == param
    assert "unbound reference $." in error.message and problem in error.message, error.message


def test_an_unbound_reference_names_the_reference() -> None:
    error = refusal(on(0, lambda s: s.update(input={"x": '${ $.steps["x.y"].output.list[2] }'}), SIX_STEPS))
    assert 'unbound reference $.steps["x.y"].output.list[2]: there is no step \'x.y\'' in error.message


def test_a_step_downstream_of_a_loop_reads_its_body_and_the_until_sees_it_too() -> None:
    defn = valid(on(9, lambda s: s.update(input={"plan": "${ $.steps.gate.output }"})))
    assert {"generate", "gate", "regenerate"} <= upstream(defn, "persist")


# --- the graph ------------------------------------------------------------------------------------------


def test_topological_order_takes_the_earliest_declared_ready_step() -> None:
    defn = valid(definition(task("z", "y"), task("y"), task("x")))
    assert topological_order(defn) == ["y", "z", "x"]
    assert topological_order(valid(definition(task("c"), task("a"), task("b")))) == ["c", "a", "b"]


def test_edges_include_branches_error_paths_and_loop_bodies() -> None:
    found = {(e.source, e.target, e.kind) for e in edges(valid(ALL_KINDS))}
    assert {("passed", "review", "then"), ("passed", "alert", "else"), ("review", "alert", "on_timeout"),
            ("persist", "alert", "on_error"), ("generate", "regenerate", "body"), ("gate", "regenerate", "body"),
            ("generate", "gate", "needs")} <= found
    assert Edge("analyse", "pages", "needs", "steps[1].needs[0]") in edges(valid(ALL_KINDS))


def test_downstream_is_what_a_rerun_must_run_again() -> None:
    defn = valid(ALL_KINDS)
    assert downstream(defn, "gate") == {"regenerate", "passed", "review", "alert", "cool-off", "persist", "ack"}
    assert downstream(defn, "persist") == {"alert", "ack"}
    assert downstream(defn, "ack") == set()
    assert downstream(defn, "alert") == set()


def test_upstream_and_downstream_refuse_an_unknown_step() -> None:
    defn = valid(SIX_STEPS)
    with pytest.raises(KeyError):
        downstream(defn, "ghost")
    with pytest.raises(KeyError):
        upstream(defn, "ghost")


# --- property: any input is a definition or a 400 -----------------------------------------------------------

IDS = st.sampled_from(["a", "b", "c", "fail", "x y"])
FIELDS = ["id", "kind", "needs", "join", "on_error", "timeout_s", "task_type", "input", "form", "on_timeout",
          "seconds", "event", "when", "then", "else", "over", "max_items", "step", "body", "max_iterations", "until",
          "workflow", "version", "bogus"]
VALUES = st.one_of(
    IDS, st.sampled_from([*STEP_KINDS, "all", "any", "continue", "summarize", "ocr", "${ $.input.x }",
                          "${ $.steps.a.output }", "${ $.item }", "${ bad(", "x ${ $.steps.b }"]),
    st.lists(IDS, max_size=3), st.integers(-2, 2000), st.floats(allow_nan=True), st.none(), st.booleans(),
    st.dictionaries(st.sampled_from(["kind", "task_type", "input", "x"]),
                    st.sampled_from(["task", "summarize", "${ $.item }", "${ $.steps.c.output }"]), max_size=3),
)
STEPS = st.lists(st.dictionaries(st.sampled_from(FIELDS), VALUES, max_size=8), max_size=5)


@settings(max_examples=examples(200), deadline=None)
@given(STEPS, st.sampled_from(["flow", "bad name", 7]))
def test_any_input_is_either_a_definition_or_a_400_with_a_path(steps: list[dict[str, Any]], name: Any) -> None:
    try:
        defn = valid({"name": name, "steps": steps})
    except HearthError as exc:
        assert exc.code == "invalid_request"
        assert exc.param is None or exc.message.startswith(f"{exc.param}: ")
    else:
        order = topological_order(defn)
        assert sorted(order) == sorted(step.id for step in defn.steps)
        assert valid(defn.model_dump(mode="json", exclude_none=True)) == defn


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.lists(st.integers(0, 7), max_size=3), min_size=1, max_size=8))
def test_topological_order_puts_every_source_before_its_target(needs: list[list[int]]) -> None:
    steps = [task(f"s{i}", *sorted({f"s{j}" for j in wanted if j < i})) for i, wanted in enumerate(needs)]
    defn = valid(definition(*steps))
    order = topological_order(defn)
    assert all(order.index(e.source) < order.index(e.target) for e in edges(defn))
    for step in defn.steps:
        assert all(step.id in downstream(defn, source) for source in upstream(defn, step.id))
