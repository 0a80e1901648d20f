"""The workflow input-mapping language: every construct, error positions, references, templates, bounds.

The property tests feed random text (and random token soup, which gets further into the parser) to
every entry point: whatever the input, the only exception allowed out is :class:`ExpressionError`.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearth.workflows.expressions import (
    MAX_EXPRESSION_LENGTH,
    MAX_NESTING_DEPTH,
    MAX_VALUE_DEPTH,
    Call,
    Constant,
    ExpressionError,
    Reference,
    evaluate,
    exact_expression,
    parse,
    references,
    render,
    template_references,
)
from tests.support import examples

SCOPE: dict[str, Any] = {
    "input": {
        "text": "hello world",
        "lang": None,
        "n": 3,
        "ratio": 0.5,
        "flag": True,
        "items": [10, 20, 30],
        "doc": {"title": "Q3", "tags": ["a", "b"], "odd key": 1},
    },
    "steps": {
        "analyse": {"output": {"score": 0.9, "topics": ["x", "y"]}},
        "extract.v2": {"output": {"total": 42}},
    },
    "item": {"id": 7},
    "index": 2,
}


def value(text: str, scope: dict[str, Any] | None = None) -> Any:
    return evaluate(parse(text), SCOPE if scope is None else scope)


def error(text: str) -> ExpressionError:
    with pytest.raises(ExpressionError) as caught:
        value(text)
    return caught.value


# --- literals and references ------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ('"plain"', "plain"),
    (r'"esc \" \\ \n \u00e9 \ud83d\ude00"', 'esc " \\ \n é 😀'),
    ('"中文"', "中文"),
    ("0", 0),
    ("-12", -12),
    ("3.25", 3.25),
    ("1e3", 1000.0),
    ("-2.5E-1", -0.25),
    ("true", True),
    ("false", False),
    ("null", None),
    ("  42  ", 42),
])
def test_json_literals_evaluate_to_their_json_value(text: str, expected: Any) -> None:
    assert value(text) == expected
    assert type(value(text)) is type(expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("$.input.text", "hello world"),
    ("$.input.doc.title", "Q3"),
    ("$.input.doc.tags[1]", "b"),
    ("$.input.items[0]", 10),
    ("$.input.items[-1]", 30),
    ('$.input.doc["odd key"]', 1),
    ('$.input["doc"]["tags"][0]', "a"),
    ("$.steps.analyse.output.score", 0.9),
    ('$.steps["extract.v2"].output.total', 42),
    ("$.item.id", 7),
    ("$.index", 2),
    ("$.input", SCOPE["input"]),
])
def test_references_walk_keys_indexes_and_quoted_keys(text: str, expected: Any) -> None:
    assert value(text) == expected


@pytest.mark.parametrize("text", [
    "$.input.missing",
    "$.input.missing.deeper",
    "$.input.lang.x",  # through null
    "$.input.items[3]",
    "$.input.items[-4]",
    "$.input.items[99999999999999999999999]",
    "$.input.items.first",  # a key on a list
    "$.input.doc[0]",  # an index on an object
    "$.input.text[0]",  # strings are not indexable
    "$.steps.nope.output",
])
def test_a_reference_that_does_not_resolve_is_null(text: str) -> None:
    assert value(text) is None


def test_a_reference_with_no_scope_at_all_is_null() -> None:
    assert value("$.steps.analyse.output", {}) is None


def test_parse_builds_a_small_frozen_tree() -> None:
    assert parse('default($.input.items[0], "x")') == Call(
        "default", (Reference(("input", "items", 0), 8), Constant("x", 26)), 0)
    constant = parse("1")
    assert isinstance(constant, Constant)
    with pytest.raises(FrozenInstanceError):
        constant.value = 2  # type: ignore[misc]


# --- functions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), [
    ("len($.input.text)", 11),
    ("len($.input.items)", 3),
    ("len($.input.doc)", 3),
    ('len("")', 0),
    ('default($.input.lang, "en")', "en"),
    ('default($.input.missing, "en")', "en"),
    ('default($.input.text, "en")', "hello world"),
    ("default($.input.flag, false)", True),
    ('concat("a", "b", "c")', "abc"),
    ("concat($.input.items, $.input.doc.tags)", [10, 20, 30, "a", "b"]),
    ("eq(1, 1.0)", True),
    ("eq(true, 1)", False),
    ("eq(null, $.input.missing)", True),
    ("eq($.input.doc.tags, $.input.items)", False),
    ("eq($.input.doc, $.input.doc)", True),
    ('eq("1", 1)', False),
    ("not(false)", True),
    ("and(true, false)", False),
    ("and(true, true)", True),
    ("or(false, true)", True),
    ("or(false, false)", False),
    ("gt(2, 1)", True),
    ("gt(1, 1)", False),
    ("ge(1, 1.0)", True),
    ("lt(-1, 0.5)", True),
    ("le(2, 1)", False),
    ('gt("b", "a")', True),
    ('lt("A", "a")', True),
    ('contains($.input.text, "world")', True),
    ('contains($.input.text, "moon")', False),
    ("contains($.input.items, 20.0)", True),
    ("contains($.input.items, true)", False),
    ('contains($.input.doc, "title")', True),
    ('contains($.input.doc, "Q3")', False),
    ("gt(len($.steps.analyse.output.topics), 1)", True),
])
def test_each_function_computes_its_documented_value(text: str, expected: Any) -> None:
    assert value(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("len(1)", "len() needs a string, list or object, got number"),
    ("len($.input.missing)", "len() needs a string, list or object, got null"),
    ('concat("a", 1)', "concat() needs all strings or all lists, got string and number"),
    ('concat("a", $.input.items)', "got string and list"),
    ("not(1)", "not() needs booleans, got number"),
    ("not($.input.missing)", "not() needs booleans, got null"),
    ("and(true, 0)", "and() needs booleans, got number"),
    ('or(false, "yes")', "or() needs booleans, got string"),
    ('gt("a", 1)', "gt() needs two numbers or two strings, got string and number"),
    ("ge(true, 1)", "got boolean and number"),
    ("lt(null, 1)", "got null and number"),
    ("le($.input.items, 1)", "got list and number"),
    ("contains(1, 1)", "contains() needs a list, or a string or object and a string, got number and number"),
    ("contains($.input.text, 1)", "got string and number"),
    ("contains($.input.doc, 1)", "got object and number"),
])
def test_a_function_given_the_wrong_types_raises_at_the_call(text: str, message: str) -> None:
    caught = error(text)
    assert message in caught.message
    assert caught.position == 0


def test_a_type_error_points_at_the_inner_call_that_failed() -> None:
    caught = error('not(gt("a", 1))')
    assert caught.position == 4
    assert str(caught) == "gt() needs two numbers or two strings, got string and number at position 4"


def test_and_or_and_default_do_not_evaluate_what_they_do_not_need() -> None:
    assert value('and(false, gt("a", 1))') is False
    assert value('or(true, gt("a", 1))') is True
    assert value('default(1, gt("a", 1))') == 1
    assert value("and(not(eq($.input.missing, null)), gt($.input.missing, 3))") is False


def test_evaluate_never_changes_the_scope() -> None:
    scope = {"input": {"a": [1, 2]}}
    value("concat($.input.a, $.input.a)", scope)
    assert scope == {"input": {"a": [1, 2]}}


# --- syntax errors and their positions --------------------------------------------------------------------


@pytest.mark.parametrize(("text", "position", "message"), [
    ("", 0, "expected an expression, found end of expression"),
    ("   ", 3, "expected an expression, found end of expression"),
    ("foo", 0, "unknown name 'foo'"),
    ("lenn(1)", 0, "unknown function 'lenn'"),
    ("eq(1, len(2, 3))", 6, "len() takes 1 argument, got 2"),
    ("concat(\"a\")", 0, "concat() takes at least 2 arguments, got 1"),
    ("eq(1)", 0, "eq() takes 2 arguments, got 1"),
    ("not()", 0, "not() takes 1 argument, got 0"),
    ("eq(1 2)", 5, "expected ',' or ')', found '2'"),
    ("eq(1,", 5, "expected an expression, found end of expression"),
    ("eq(1, 2", 7, "expected ',' or ')', found end of expression"),
    ("eq(1, 2))", 8, "unexpected ')' after a complete expression"),
    ("1 2", 2, "unexpected '2' after a complete expression"),
    ("eq(,1)", 3, "expected an expression, found ','"),
    ('"abc', 0, "unterminated string"),
    ('"a\\q"', 2, "invalid string (Invalid \\escape)"),
    ('"tab\there"', 4, "invalid string (Invalid control character"),
    ("01", 0, "invalid number"),
    ("1.", 0, "invalid number"),
    ("-", 0, "invalid number"),
    ("1abc", 0, "invalid number"),
    ("1e999", 0, "number out of range"),
    ("$", 0, "'$' alone: a reference starts with $.input"),
    ("$.secrets.key", 0, "unknown root 'secrets'"),
    ("$.steps", 0, "$.steps must be followed by a step id"),
    ("$.steps[0].output", 0, "$.steps must be followed by a step id"),
    ("$.input.", 8, "expected a key after '.'"),
    ("$.input..a", 8, "expected a key after '.'"),
    ("$.input[", 8, "expected an index or a quoted key after '['"),
    ("$.input[x]", 8, "expected an index or a quoted key after '['"),
    ("$.input[0", 9, "expected ']' to close the '[' at position 7"),
    ('$.input["a"', 11, "expected ']' to close the '['"),
    ("@", 0, "unexpected character '@'"),
    ("eq(1, 2) + 1", 9, "unexpected character '+'"),
    ("${ $.input.a }", 0, "'$' alone"),  # parse() takes the expression without its template braces
    ("$.input. a", 8, "expected a key after '.'"),
    ("__import__('os')", 0, "unknown function '__import__'"),
    ("len($.input.text).upper()", 17, "unexpected character '.'"),
])
def test_a_syntax_error_says_what_is_wrong_and_where(text: str, position: int, message: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        parse(text)
    assert caught.value.position == position
    assert caught.value.message.startswith(message)
    assert str(caught.value).endswith(f" at position {position}")


def test_expression_error_is_a_value_error() -> None:
    assert issubclass(ExpressionError, ValueError)


# --- references() ---------------------------------------------------------------------------------------


def test_references_lists_every_path_an_expression_reads() -> None:
    expr = parse('default($.input.a.b, concat($.steps.s1.output.x, $.steps["s.2"].output[0]))')
    assert references(expr) == {("input", "a", "b"), ("steps", "s1", "output", "x"), ("steps", "s.2", "output", "[0]")}


def test_references_of_a_literal_is_empty_and_indexes_are_bracketed() -> None:
    assert references(parse('"$.input.a"')) == set()
    assert references(parse("$.input.items[-1]")) == {("input", "items", "[-1]")}
    assert references(parse("eq($.input.a, $.input.a)")) == {("input", "a")}


# --- templates ------------------------------------------------------------------------------------------


def test_a_string_that_is_exactly_one_expression_keeps_the_value_type() -> None:
    assert render("${ $.input.items }", SCOPE) == [10, 20, 30]
    assert render("${$.input.n}", SCOPE) == 3
    assert render("${ $.input.flag }", SCOPE) is True
    assert render("${ $.input.missing }", SCOPE) is None
    assert render("${ $.input.doc }", SCOPE) == SCOPE["input"]["doc"]


def test_embedded_expressions_interpolate_their_string_forms() -> None:
    template = ("n=${ $.input.n } r=${ $.input.ratio } f=${ $.input.flag } s=${ $.input.text } "
                "l=${ $.input.doc.tags } o=${ $.steps[\"extract.v2\"].output } none=[${ $.input.missing }]")
    assert render(template, SCOPE) == ('n=3 r=0.5 f=true s=hello world l=["a","b"] o={"total":42} none=[]')


def test_long_template_strings_render_like_short_ones() -> None:
    assert render("x" * 5000 + "${ $.input.n }", SCOPE) == "x" * 5000 + "3"


def test_whitespace_around_an_exact_expression_makes_it_interpolation() -> None:
    assert render(" ${ $.input.n }", SCOPE) == " 3"
    assert render("${ $.input.n }${ $.input.n }", SCOPE) == "33"


def test_double_dollar_writes_a_literal_template_opening() -> None:
    assert render("cost $$5 and $${ not a template }", SCOPE) == "cost $$5 and ${ not a template }"
    assert template_references("$${ $.input.x }") == set()


def test_strings_without_templates_are_returned_unchanged() -> None:
    for text in ("", "plain", "$5", "a } b", "{ }", "$ {x}"):
        assert render(text, SCOPE) == text


def test_a_closing_brace_inside_a_string_literal_does_not_end_the_template() -> None:
    assert render('${ concat("}", $.input.text) }', SCOPE) == "}hello world"
    assert render('x${ default($.input.missing, "a\\"}b") }', SCOPE) == 'xa"}b'


def test_objects_and_lists_are_mapped_recursively_and_keys_are_not_templates() -> None:
    mapping = {"${ key }": {"deep": ["${ $.input.n }", 1, None, True, {"t": "id=${ $.item.id }"}]}, "k": 2.5}
    assert render(mapping, SCOPE) == {"${ key }": {"deep": [3, 1, None, True, {"t": "id=7"}]}, "k": 2.5}


def test_a_rendered_value_shares_nothing_mutable_with_the_scope() -> None:
    rendered = render({"items": "${ $.input.items }"}, SCOPE)
    rendered["items"].append(99)
    assert SCOPE["input"]["items"] == [10, 20, 30]


def test_template_errors_carry_positions_in_the_template_string() -> None:
    with pytest.raises(ExpressionError) as caught:
        render("Hello ${ $.input.name } and ${ foo }", SCOPE)
    assert caught.value.position == 31
    with pytest.raises(ExpressionError) as caught:
        render("Hello ${ $.input.name", SCOPE)
    assert (caught.value.position, caught.value.message) == (6, "'${' is not closed by '}'")
    with pytest.raises(ExpressionError) as caught:
        template_references('ab ${ "unterminated }')
    assert caught.value.position == 3
    with pytest.raises(ExpressionError) as caught:
        render("${}", SCOPE)
    assert (caught.value.position, caught.value.message) == (2, "expected an expression, found end of expression")


def test_a_runtime_type_error_in_a_template_is_an_expression_error_at_the_call() -> None:
    with pytest.raises(ExpressionError) as caught:
        render({"a": ["ok", "x ${ gt($.input.text, 1) }"]}, SCOPE)
    assert caught.value.position == 5


def test_template_references_collects_from_every_nested_string() -> None:
    mapping = {"a": "${ $.input.a.b }", "b": ["x ${ $.steps.s1.output.x } y", {"c": "${ len($.item) }"}], "d": 3}
    assert template_references(mapping) == {("input", "a", "b"), ("steps", "s1", "output", "x"), ("item",)}
    assert template_references("no templates here") == set()
    assert template_references(None) == set()


def test_exact_expression_recognises_only_a_whole_single_template() -> None:
    assert isinstance(exact_expression("${ gt($.input.n, 1) }"), Call)
    assert exact_expression("x ${ $.input.n }") is None
    assert exact_expression("${ $.input.n }${ $.input.n }") is None
    assert exact_expression("plain") is None
    assert exact_expression("$${ $.input.n }") is None


# --- bounds ---------------------------------------------------------------------------------------------


def test_an_expression_of_the_maximum_length_parses_and_one_longer_does_not() -> None:
    longest = '"' + "a" * (MAX_EXPRESSION_LENGTH - 2) + '"'
    assert value(longest) == "a" * (MAX_EXPRESSION_LENGTH - 2)
    with pytest.raises(ExpressionError) as caught:
        parse(longest + " ")
    assert caught.value.position == MAX_EXPRESSION_LENGTH
    assert "longer than 2000 characters" in caught.value.message


def test_the_length_bound_applies_to_each_template_expression() -> None:
    inner = '"' + "a" * MAX_EXPRESSION_LENGTH + '"'
    with pytest.raises(ExpressionError) as caught:
        render("prefix ${" + inner + "}", SCOPE)
    assert caught.value.position == len("prefix ${") + MAX_EXPRESSION_LENGTH


def nested(depth: int) -> str:
    return "not(" * depth + "true" + ")" * depth


def test_calls_nested_to_the_maximum_depth_parse_and_one_deeper_do_not() -> None:
    assert value(nested(MAX_NESTING_DEPTH)) is True
    with pytest.raises(ExpressionError) as caught:
        parse(nested(MAX_NESTING_DEPTH + 1))
    assert caught.value.position == 4 * MAX_NESTING_DEPTH
    assert caught.value.message == "calls nested more than 32 deep"


def test_mapping_values_nested_too_deeply_are_refused() -> None:
    deep: Any = "${ $.input.n }"
    for _ in range(MAX_VALUE_DEPTH):
        deep = [deep]
    assert template_references(deep) == {("input", "n")}
    with pytest.raises(ExpressionError):
        render([deep], SCOPE)
    with pytest.raises(ExpressionError):
        template_references({"a": deep})


def test_comparing_values_nested_beyond_the_recursion_limit_is_an_expression_error() -> None:
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(ExpressionError):
        value("eq($.input.a, $.input.a)", {"input": {"a": deep}})


def test_a_value_that_cannot_be_written_as_json_cannot_be_interpolated() -> None:
    with pytest.raises(ExpressionError) as caught:
        render("x=${ $.input.a }", {"input": {"a": {1, 2}}})
    assert caught.value.message == "cannot interpolate a value of type set"


# --- properties -----------------------------------------------------------------------------------------

TOKENS = ["$.input.a", "$.steps.s1.output", "$.input.items[0]", '$.x["k"]', "$", ".", "[", "]", "(", ")", ",",
          "len", "default", "concat", "eq", "not", "and", "or", "gt", "contains", "true", "null", '"s"', '"',
          "1", "-2.5e3", "0x", "${", "}", "$${", " ", "\\", "é", "\x00"]
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
                    | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("ab"), inner,
                                                                                  max_size=2),
                    max_leaves=8)
SCOPES = st.fixed_dictionaries({"input": st.dictionaries(st.sampled_from(["a", "items"]), JSON, max_size=2),
                                "steps": st.dictionaries(st.just("s1"), st.fixed_dictionaries({"output": JSON}))})


def exercise(text: str, scope: dict[str, Any]) -> None:
    """Every entry point on ``text``: anything but ExpressionError escaping is a bug."""
    try:
        expr = parse(text)
    except ExpressionError as exc:
        assert 0 <= exc.position <= len(text)
    else:
        references(expr)
        try:
            evaluate(expr, scope)
        except ExpressionError:
            pass
    for template in (text, "${" + text + "}", "a ${ " + text + " } b"):
        try:
            template_references(template)
            render({"k": [template]}, scope)
        except ExpressionError as exc:
            assert 0 <= exc.position <= len(template)


@settings(max_examples=examples(150), deadline=None)
@given(st.text(max_size=60), SCOPES)
def test_random_text_never_raises_anything_but_expression_error(text: str, scope: dict[str, Any]) -> None:
    exercise(text, scope)


@settings(max_examples=examples(150), deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=20).map("".join), SCOPES)
def test_random_token_soup_never_raises_anything_but_expression_error(text: str, scope: dict[str, Any]) -> None:
    exercise(text, scope)


FUNCTION_CALLS = st.recursive(
    st.sampled_from(["$.input.a", "$.input.items", "$.input.items[1]", "$.steps.s1.output", "$.steps.s1.output.a",
                     '"x"', "1", "2.5", "true", "false", "null"]),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["len", "not"]), inner).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(st.sampled_from(["default", "eq", "and", "or", "gt", "ge", "lt", "le", "contains", "concat"]),
                  inner, inner).map(lambda t: f"{t[0]}({t[1]}, {t[2]})")),
    max_leaves=12)


@settings(max_examples=examples(150), deadline=None)
@given(FUNCTION_CALLS, SCOPES)
def test_well_formed_expressions_evaluate_or_raise_expression_error_only(text: str, scope: dict[str, Any]) -> None:
    expr = parse(text)
    try:
        result = evaluate(expr, scope)
    except ExpressionError as exc:
        assert exc.position >= 0
    else:
        assert render("${ " + text + " }", scope) == result
