"""Rendering a prompt version: locale fallback, declared variables, the sandbox."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from hearth.errors import HearthError
from hearth.prompts.rendering import _ENV, _substitution, bind_variables, check_templates, pick_locale, render_messages
from hearth.prompts.spec import PromptVersion, Variable


def _version(contents: dict[str, dict[str, str | None]], *variables: Variable, default: str = "en") -> PromptVersion:
    return PromptVersion(code="p", version=3, status="active", default_locale=default, contents=contents,
                         variables=variables, model=None, scene=None, output_schema=None, params={},
                         quality_gate=None, canary_share=0.0, content_hash="x")


@pytest.mark.parametrize(("requested", "expected"), [
    ("zh-CN", "zh-CN"), ("zh-cn", "zh-CN"), ("zh-TW", "zh"), ("zh", "zh"), ("zh_Hant_TW", "zh"),
    ("fr-FR", "en"), (None, "en"), ("", "en"),
])
def test_the_locale_falls_back_by_dropping_subtags_then_to_the_default(requested: str | None, expected: str) -> None:
    assert pick_locale(requested, ["en", "zh", "zh-CN"], "en") == expected


def test_render_uses_the_chosen_locale_and_the_persona_before_the_system_template() -> None:
    version = _version({"en": {"system": "Be brief.", "user": "Hi {{ name }}"},
                        "zh": {"system": "简短。", "user": "你好 {{ name }}"}},
                       Variable("name", True, None, None, None))
    locale, messages = render_messages(version, "zh-CN", {"name": "李雷"}, system_prefix="You are a tutor.")
    assert locale == "zh"
    assert messages == [{"role": "system", "content": "You are a tutor.\n\n简短。"},
                        {"role": "user", "content": "你好 李雷"}]


@pytest.mark.parametrize(("given", "code"), [
    ({}, "prompt_variable_missing"),
    ({"tone": "angry", "name": "x"}, "prompt_variable_invalid"),
    ({"name": "x", "typo": 1}, "prompt_variable_invalid"),
])
def test_variables_are_checked_against_their_declaration(given: dict[str, Any], code: str) -> None:
    version = _version({"en": {"system": None, "user": "{{ name }} {{ tone }}"}},
                       Variable("name", True, None, None, None),
                       Variable("tone", False, ("calm", "warm"), "calm", None))
    with pytest.raises(HearthError) as info:
        bind_variables(version, given)
    assert info.value.code == code


def test_defaults_fill_variables_the_request_leaves_out() -> None:
    version = _version({"en": {"system": None, "user": "{{ tone }}"}},
                       Variable("tone", False, ("calm", "warm"), "calm", None))
    assert bind_variables(version, {}) == {"tone": "calm"}


def test_the_sandbox_refuses_reaching_python_internals() -> None:
    version = _version({"en": {"system": None, "user": "{{ text.__class__.__mro__[1].__subclasses__() }}"}})
    with pytest.raises(HearthError) as info:
        render_messages(version, None, {}, builtins={"text": "x"})
    assert info.value.code in ("prompt_template_invalid", "prompt_variable_missing")
    assert "subclasses" not in info.value.message


def test_templates_that_do_not_parse_or_use_undeclared_names_are_refused() -> None:
    with pytest.raises(HearthError) as syntax:
        check_templates({"en": {"system": None, "user": "{% if %}"}}, [])
    assert syntax.value.code == "prompt_template_invalid"
    with pytest.raises(HearthError) as undeclared:
        check_templates({"en": {"system": "{{ who }}", "user": "{{ text }}"}}, [])
    assert undeclared.value.details == {"locale": "en", "part": "system", "undeclared": ["who"]}
    check_templates({"en": {"system": None, "user": "{{ text }} {{ who }}"}}, ["who"])  # builtins are allowed


_TEXT = st.text(alphabet=st.characters(blacklist_characters="{}%#"), max_size=40)
_VALUE = st.one_of(st.text(max_size=20), st.integers(), st.none(), st.booleans(), st.lists(st.integers(), max_size=3))


@given(pieces=st.lists(st.tuples(_TEXT, st.sampled_from(["a", "b", "text"])), min_size=1, max_size=5), tail=_TEXT,
       a=_VALUE, b=_VALUE, text=_VALUE)
@example(pieces=[("\x0cW", "a")], tail="\r", a=None, b=None, text=None)  # Jinja turns "\r" into "\n"
@example(pieces=[("x\r\n", "b")], tail="\r\n", a=None, b=1.5, text=None)
def test_bare_placeholder_templates_render_exactly_as_jinja_does(pieces: list[tuple[str, str]], tail: str,
                                                                 a: Any, b: Any, text: Any) -> None:
    source = "".join(f"{lit}{{{{ {name} }}}}" for lit, name in pieces) + tail
    fast = _substitution(source)
    assert fast is not None
    context = {"a": a, "b": b, "text": text}
    assert fast.render(context) == _ENV.from_string(source).render(context)


@pytest.mark.parametrize("source", ["{% if a %}x{% endif %}", "{{ a.b }}", "{{ a | upper }}", "{# note #}{{ a }}",
                                    "{{ a }} }}", "{{ 'x' }}"])
def test_anything_but_bare_placeholders_goes_to_jinja(source: str) -> None:
    assert _substitution(source) is None


def test_a_missing_name_in_a_fast_template_is_a_missing_variable() -> None:
    version = _version({"en": {"system": None, "user": "Hi {{ who }}"}})
    with pytest.raises(HearthError) as info:
        render_messages(version, None, {})
    assert info.value.code == "prompt_variable_missing"
