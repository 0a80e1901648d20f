"""Workflow input mappings: a small expression language, parsed by hand and evaluated without ``eval``.

A workflow step's ``input`` maps values from the workflow's input and from upstream steps' outputs.
Definitions come from callers (YAML or JSON registered over the API), so the language is deliberately
tiny: references into a JSON scope, JSON literals and a dozen pure functions. There are no variables,
no operators, no loops and no attribute access on Python objects, so an expression can only read the
scope it is given, and its cost is bounded by its length.

Grammar (EBNF; whitespace is allowed between tokens, not inside a reference)
---------------------------------------------------------------------------
::

    expression = reference | literal | call ;
    call       = function "(" [ expression { "," expression } ] ")" ;
    function   = "len" | "default" | "concat" | "eq" | "not" | "and" | "or"
               | "gt" | "ge" | "lt" | "le" | "contains" ;
    literal    = json-string | json-number | "true" | "false" | "null" ;
    reference  = "$" "." root { "." key | "[" index "]" | "[" json-string "]" } ;
    root       = "input" | "steps" "." step | "item" | "index" ;   (* $.steps must name a step *)
    key        = ( letter | digit | "_" | "-" ) { letter | digit | "_" | "-" } ;
    index      = [ "-" ] digit { digit } ;                          (* negative counts from the end *)

A key that holds other characters (a step id with ``.`` or ``:``, say) is written in brackets:
``$.steps["extract.v2"].output``. ``$.item`` and ``$.index`` are the element and its position inside a
fan-out's step template; the definition validator refuses them anywhere else.

Semantics
---------
* A reference walks the scope ``{"input": ..., "steps": {id: {"output": ...}}, ...}``. Anything that
  does not resolve (a missing key, an index out of range, a key on a list) is **null**, so
  ``default($.input.lang, "en")`` works. References never fail.
* ``len(x)``: length of a string, list or object. ``default(x, y)``: ``y`` when ``x`` is null (``y`` is
  evaluated only then). ``concat(a, b, ...)``: two or more strings, or two or more lists (no implicit
  conversion: use interpolation to build a string from a number). ``eq(a, b)``: JSON equality
  (``1 == 1.0``; ``true`` is not ``1``). ``not(a)``, ``and(a, b)``, ``or(a, b)``: booleans only;
  ``and``/``or`` short-circuit, so ``and(not(eq($.input.n, null)), gt($.input.n, 3))`` is safe.
  ``gt/ge/lt/le(a, b)``: two numbers or two strings. ``contains(c, x)``: substring of a string, element
  of a list (JSON equality), or key of an object.
* A function given a value of the wrong type raises :class:`ExpressionError` at the call's position;
  nothing is coerced silently (``gt("a", 1)`` is an error, not ``false``).

Templates (a mapping value)
---------------------------
A mapping value is any JSON value. Strings are templates: a string that is exactly ``"${ expr }"``
becomes the expression's value, whatever its JSON type; ``${ expr }`` inside other text is replaced by
the value's string form (a string as is, null as the empty string, anything else as compact JSON), so
``"Page ${ $.input.n }"`` gives ``"Page 3"``. ``$${`` writes a literal ``${``. Objects and lists are
mapped element by element (object keys are not templates). Other values are returned unchanged.

Bounds: an expression is at most :data:`MAX_EXPRESSION_LENGTH` characters with at most
:data:`MAX_NESTING_DEPTH` calls nested in one another, and a mapping value at most
:data:`MAX_VALUE_DEPTH` containers deep; beyond that, :class:`ExpressionError`. Every failure of
:func:`parse`, :func:`evaluate`, :func:`render` and :func:`template_references` on any input is an
:class:`ExpressionError`, whose ``position`` is an offset into the expression (or the template
string) and whose message says what is wrong there.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

__all__ = [
    "FUNCTIONS",
    "MAX_EXPRESSION_LENGTH",
    "MAX_NESTING_DEPTH",
    "MAX_VALUE_DEPTH",
    "ROOTS",
    "Call",
    "Constant",
    "Expr",
    "ExpressionError",
    "Reference",
    "evaluate",
    "exact_expression",
    "parse",
    "references",
    "render",
    "template_references",
]

MAX_EXPRESSION_LENGTH = 2_000
MAX_NESTING_DEPTH = 32
MAX_VALUE_DEPTH = 64
ROOTS = frozenset({"input", "steps", "item", "index"})


class ExpressionError(ValueError):
    """An expression or template that cannot be parsed or evaluated.

    ``position`` is the offset (0-based) in the text given to :func:`parse`, or in the template string
    for :func:`render` and :func:`template_references` (0 for a mapping value nested too deeply);
    ``message`` says what is wrong, and ``str()`` adds where.
    """

    def __init__(self, message: str, position: int) -> None:
        super().__init__(f"{message} at position {position}")
        self.message = message
        self.position = position


# --- the syntax tree ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Constant:
    """A JSON literal: a string, a number, true, false or null."""

    value: str | int | float | bool | None
    position: int


@dataclass(frozen=True, slots=True)
class Reference:
    """A path into the scope: keys (``str``) and list indexes (``int``), the root first."""

    path: tuple[str | int, ...]
    position: int


@dataclass(frozen=True, slots=True)
class Call:
    """A call of one of :data:`FUNCTIONS`; the arity was checked when it was parsed."""

    function: str
    args: tuple[Expr, ...]
    position: int


Expr: TypeAlias = Constant | Reference | Call


# --- tokenizer ------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_KEY = re.compile(r"[A-Za-z0-9_-]+")
_INDEX = re.compile(r"-?[0-9]+")
_WHITESPACE = " \t\r\n"
_PUNCTUATION = "(),"
_KEYWORDS: dict[str, bool | None] = {"true": True, "false": False, "null": None}


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "ref", "string", "number", "name", "(", ")", ",", "end"
    value: Any
    start: int
    text: str


class _Lexer:
    """Turns ``text[start:end]`` into tokens; positions are offsets into the whole ``text``."""

    def __init__(self, text: str, start: int, end: int) -> None:
        self.text = text
        self.pos = start
        self.end = end

    def next(self) -> _Token:
        """The next token (``end`` at the end, again and again)."""
        text, end = self.text, self.end
        while self.pos < end and text[self.pos] in _WHITESPACE:
            self.pos += 1
        start = self.pos
        if start >= end:
            return _Token("end", None, start, "end of expression")
        char = text[start]
        if char in _PUNCTUATION:
            self.pos += 1
            return _Token(char, None, start, repr(char))
        if char == '"':
            value = self._string()
        elif char == "-" or char.isdigit():
            return self._number()
        elif char == "$":
            return _Token("ref", self._reference(), start, text[start:self.pos])
        elif (match := _NAME.match(text, start, end)) is not None:
            self.pos = match.end()
            return _Token("name", match.group(), start, repr(match.group()))
        else:
            raise ExpressionError(f"unexpected character {char!r}", start)
        return _Token("string", value, start, text[start:self.pos])

    def _string(self) -> str:
        """A JSON string starting at ``self.pos``; decoding is :func:`json.loads` (strict)."""
        text, start = self.text, self.pos
        i = start + 1
        while i < self.end and text[i] != '"':
            i += 2 if text[i] == "\\" else 1
        if i >= self.end:
            raise ExpressionError("unterminated string", start)
        self.pos = i + 1
        try:
            value = json.loads(text[start:self.pos])
        except json.JSONDecodeError as exc:
            raise ExpressionError(f"invalid string ({exc.msg})", start + exc.pos) from None
        assert isinstance(value, str)
        return value

    def _number(self) -> _Token:
        start = self.pos
        match = _NUMBER.match(self.text, start, self.end)
        stop = match.end() if match else start
        if match is None or (stop < self.end and (self.text[stop].isalnum() or self.text[stop] in "._")):
            raise ExpressionError("invalid number", start)
        literal = match.group()
        value: int | float = float(literal) if any(c in literal for c in ".eE") else int(literal)
        if not math.isfinite(value):
            raise ExpressionError("number out of range", start)
        self.pos = stop
        return _Token("number", value, start, repr(literal))

    def _reference(self) -> tuple[str | int, ...]:
        self.pos += 1  # the "$"
        path: list[str | int] = []
        while self.pos < self.end and self.text[self.pos] in ".[":
            if self.text[self.pos] == ".":
                path.append(self._dotted_key())
            else:
                path.append(self._bracket())
        return tuple(path)

    def _dotted_key(self) -> str:
        match = _KEY.match(self.text, self.pos + 1, self.end)
        if match is None:
            raise ExpressionError("expected a key after '.' (letters, digits, '_' or '-'; use [\"...\"] for "
                                  "other characters)", self.pos + 1)
        self.pos = match.end()
        return match.group()

    def _bracket(self) -> str | int:
        open_at = self.pos
        self.pos += 1
        segment: str | int
        if self.pos < self.end and self.text[self.pos] == '"':
            segment = self._string()
        elif (match := _INDEX.match(self.text, self.pos, self.end)) is not None:
            segment = int(match.group())
            self.pos = match.end()
        else:
            raise ExpressionError("expected an index or a quoted key after '['", self.pos)
        if self.pos >= self.end or self.text[self.pos] != "]":
            raise ExpressionError(f"expected ']' to close the '[' at position {open_at}", self.pos)
        self.pos += 1
        return segment


# --- parser ---------------------------------------------------------------------------------------------

# name -> (least, most) arguments; None = no upper bound
_ARITY: dict[str, tuple[int, int | None]] = {
    "len": (1, 1), "default": (2, 2), "concat": (2, None), "eq": (2, 2), "not": (1, 1), "and": (2, 2),
    "or": (2, 2), "gt": (2, 2), "ge": (2, 2), "lt": (2, 2), "le": (2, 2), "contains": (2, 2),
}
FUNCTIONS = frozenset(_ARITY)


class _Parser:
    """Recursive descent with one token of lookahead, lexed on demand, so an error is reported before
    anything further on is read; nesting is bounded, so recursion is too."""

    def __init__(self, lexer: _Lexer) -> None:
        self.lexer = lexer
        self.lookahead: _Token | None = None

    def parse(self) -> Expr:
        expr = self._expression(depth=0)
        token = self._peek()
        if token.kind != "end":
            raise ExpressionError(f"unexpected {token.text} after a complete expression", token.start)
        return expr

    def _peek(self) -> _Token:
        if self.lookahead is None:
            self.lookahead = self.lexer.next()
        return self.lookahead

    def _take(self) -> _Token:
        token = self._peek()
        self.lookahead = None
        return token

    def _expression(self, *, depth: int) -> Expr:
        token = self._take()
        if token.kind == "ref":
            return _reference(token)
        if token.kind in ("string", "number"):
            return Constant(token.value, token.start)
        if token.kind == "name":
            if token.value in _KEYWORDS:
                return Constant(_KEYWORDS[token.value], token.start)
            return self._call(token, depth=depth + 1)
        raise ExpressionError(f"expected an expression, found {token.text}", token.start)

    def _call(self, name: _Token, *, depth: int) -> Call:
        if self._peek().kind != "(":
            raise ExpressionError(f"unknown name {name.value!r} (references start with '$.', strings are in "
                                  f"double quotes, functions are called with '(')", name.start)
        if name.value not in _ARITY:
            raise ExpressionError(f"unknown function {name.value!r} (known: {', '.join(sorted(_ARITY))})",
                                  name.start)
        if depth > MAX_NESTING_DEPTH:
            raise ExpressionError(f"calls nested more than {MAX_NESTING_DEPTH} deep", name.start)
        self._take()  # "("
        args = self._arguments(depth=depth)
        _check_arity(name.value, len(args), name.start)
        return Call(name.value, tuple(args), name.start)

    def _arguments(self, *, depth: int) -> list[Expr]:
        args: list[Expr] = []
        if self._peek().kind == ")":
            self._take()
            return args
        while True:
            args.append(self._expression(depth=depth))
            token = self._take()
            if token.kind == ")":
                return args
            if token.kind != ",":
                raise ExpressionError(f"expected ',' or ')', found {token.text}", token.start)


def _reference(token: _Token) -> Reference:
    path: tuple[str | int, ...] = token.value
    if not path or path[0] not in ROOTS:
        found = f"unknown root {path[0]!r}" if path else "'$' alone"
        raise ExpressionError(f"{found}: a reference starts with $.input, $.steps.<id>, $.item or $.index",
                              token.start)
    if path[0] == "steps" and (len(path) < 2 or not isinstance(path[1], str)):
        raise ExpressionError("$.steps must be followed by a step id, as in $.steps.<id>.output", token.start)
    return Reference(path, token.start)


def _check_arity(function: str, count: int, position: int) -> None:
    least, most = _ARITY[function]
    if least <= count and (most is None or count <= most):
        return
    if most is None:
        wanted = f"at least {least} arguments"
    else:
        wanted = f"{least} argument" + ("s" if least != 1 else "")
    raise ExpressionError(f"{function}() takes {wanted}, got {count}", position)


def _parse_span(text: str, start: int, end: int) -> Expr:
    if end - start > MAX_EXPRESSION_LENGTH:
        raise ExpressionError(f"expression longer than {MAX_EXPRESSION_LENGTH} characters",
                              start + MAX_EXPRESSION_LENGTH)
    return _Parser(_Lexer(text, start, end)).parse()


def parse(text: str) -> Expr:
    """Parse one expression (without ``${ }``); raise :class:`ExpressionError` if it is malformed.

    Unknown functions and wrong argument counts are parse errors, so a definition is refused at
    registration rather than failing at run time.
    """
    return _parse_span(text, 0, len(text))


def references(expr: Expr) -> set[tuple[str, ...]]:
    """Every scope path the expression reads, e.g. ``{("input", "a"), ("steps", "s1", "output", "x")}``.

    An index appears as ``"[0]"`` (a key is never written that way in dotted form), so a caller can
    tell ``$.input.items[0]`` (``("input", "items", "[0]")``) from a key.
    """
    if isinstance(expr, Reference):
        return {tuple(f"[{part}]" if isinstance(part, int) else part for part in expr.path)}
    if isinstance(expr, Call):
        return set().union(*(references(arg) for arg in expr.args))
    return set()


# --- evaluation -----------------------------------------------------------------------------------------


def evaluate(expr: Expr, scope: Mapping[str, Any]) -> Any:
    """The value of ``expr`` in ``scope`` (``{"input": ..., "steps": {id: {"output": ...}}}``).

    Missing references are None; a type error in a function raises :class:`ExpressionError` at the
    call. The value may be an object from ``scope`` itself (not a copy): :func:`render` copies it.
    """
    try:
        return _evaluate(expr, scope)
    except RecursionError:  # a value from the scope nested too deeply for eq/contains
        raise ExpressionError("value nested too deeply to compare", expr.position) from None


def _evaluate(expr: Expr, scope: Mapping[str, Any]) -> Any:
    if isinstance(expr, Constant):
        return expr.value
    if isinstance(expr, Reference):
        return _resolve(scope, expr.path)
    return _IMPLEMENTATIONS[expr.function](expr, scope)


def _resolve(value: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        if isinstance(part, str) and isinstance(value, Mapping):
            value = value.get(part)
        elif isinstance(part, int) and isinstance(value, list | tuple) and -len(value) <= part < len(value):
            value = value[part]
        else:
            return None
    return value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _type_error(call: Call, wanted: str, *values: Any) -> ExpressionError:
    got = " and ".join(_type_name(v) for v in values)
    return ExpressionError(f"{call.function}() needs {wanted}, got {got}", call.position)


def _args(call: Call, scope: Mapping[str, Any]) -> list[Any]:
    return [_evaluate(arg, scope) for arg in call.args]


def _json_equal(a: Any, b: Any) -> bool:
    kind = _type_name(a)
    if kind != _type_name(b):
        return False
    if kind == "list":
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    if kind == "object":
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _len(call: Call, scope: Mapping[str, Any]) -> int:
    (value,) = _args(call, scope)
    if _type_name(value) not in ("string", "list", "object"):
        raise _type_error(call, "a string, list or object", value)
    return len(value)


def _default(call: Call, scope: Mapping[str, Any]) -> Any:
    value = _evaluate(call.args[0], scope)
    return _evaluate(call.args[1], scope) if value is None else value


def _concat(call: Call, scope: Mapping[str, Any]) -> Any:
    values = _args(call, scope)
    kinds = {_type_name(v) for v in values}
    if kinds == {"string"}:
        return "".join(values)
    if kinds == {"list"}:
        return [item for value in values for item in value]
    raise _type_error(call, "all strings or all lists", *values)


def _eq(call: Call, scope: Mapping[str, Any]) -> bool:
    a, b = _args(call, scope)
    return _json_equal(a, b)


def _boolean(call: Call, arg: Expr, scope: Mapping[str, Any]) -> bool:
    value = _evaluate(arg, scope)
    if not isinstance(value, bool):
        raise _type_error(call, "booleans", value)
    return value


def _not(call: Call, scope: Mapping[str, Any]) -> bool:
    return not _boolean(call, call.args[0], scope)


def _and(call: Call, scope: Mapping[str, Any]) -> bool:
    return _boolean(call, call.args[0], scope) and _boolean(call, call.args[1], scope)


def _or(call: Call, scope: Mapping[str, Any]) -> bool:
    return _boolean(call, call.args[0], scope) or _boolean(call, call.args[1], scope)


def _comparison(test: Callable[[Any, Any], bool]) -> Callable[[Call, Mapping[str, Any]], bool]:
    def compare(call: Call, scope: Mapping[str, Any]) -> bool:
        a, b = _args(call, scope)
        kinds = (_type_name(a), _type_name(b))
        if kinds not in (("number", "number"), ("string", "string")):
            raise _type_error(call, "two numbers or two strings", a, b)
        return test(a, b)

    return compare


def _contains(call: Call, scope: Mapping[str, Any]) -> bool:
    container, item = _args(call, scope)
    kind = _type_name(container)
    if kind == "list":
        return any(_json_equal(element, item) for element in container)
    if kind in ("string", "object") and isinstance(item, str):
        return item in container
    raise _type_error(call, "a list, or a string or object and a string", container, item)


_IMPLEMENTATIONS: dict[str, Callable[[Call, Mapping[str, Any]], Any]] = {
    "len": _len, "default": _default, "concat": _concat, "eq": _eq, "not": _not, "and": _and, "or": _or,
    "gt": _comparison(lambda a, b: a > b), "ge": _comparison(lambda a, b: a >= b),
    "lt": _comparison(lambda a, b: a < b), "le": _comparison(lambda a, b: a <= b), "contains": _contains,
}
assert _IMPLEMENTATIONS.keys() == _ARITY.keys()


# --- templates ------------------------------------------------------------------------------------------

_Part: TypeAlias = str | Expr


_CACHED_TEMPLATE_LENGTH = 4_096  # longer strings are compiled each time, so the cache's memory stays bounded


def _compile(template: str) -> tuple[_Part, ...]:
    """Split a template string into literal text and parsed expressions (cached: definitions repeat)."""
    return _compile_cached(template) if len(template) <= _CACHED_TEMPLATE_LENGTH else _split(template)


@functools.lru_cache(maxsize=4096)
def _compile_cached(template: str) -> tuple[_Part, ...]:
    return _split(template)


def _split(template: str) -> tuple[_Part, ...]:
    parts: list[_Part] = []
    text: list[str] = []
    i = 0
    while (j := template.find("$", i)) >= 0:
        if template.startswith("$${", j):
            text.append(template[i:j] + "${")
            i = j + 3
        elif template.startswith("${", j):
            close = _closing_brace(template, j + 2)
            text.append(template[i:j])
            if "".join(text):
                parts.append("".join(text))
            text = []
            parts.append(_parse_span(template, j + 2, close))
            i = close + 1
        else:
            text.append(template[i:j + 1])
            i = j + 1
    text.append(template[i:])
    if "".join(text):
        parts.append("".join(text))
    return tuple(parts)


def _closing_brace(template: str, start: int) -> int:
    """The ``}`` that ends the ``${`` before ``start``; braces inside string literals do not count."""
    i = start
    while i < len(template):
        char = template[i]
        if char == "}":
            return i
        if char == '"':
            i += 1
            while i < len(template) and template[i] != '"':
                i += 2 if template[i] == "\\" else 1
        i += 1
    raise ExpressionError("'${' is not closed by '}'", start - 2)


def exact_expression(template: str) -> Expr | None:
    """The expression if ``template`` is exactly one ``${ expr }`` (no other text), else None.

    Fields that must hold one expression (a condition's ``when``, a fan-out's ``over``) use this.
    """
    parts = _compile(template)
    return parts[0] if len(parts) == 1 and not isinstance(parts[0], str) else None


def _walk(value: Any, depth: int = 0) -> Iterator[Expr]:
    """Every template string's parts inside ``value``, depth-first (strings without ``$`` skipped)."""
    if depth > MAX_VALUE_DEPTH:
        raise ExpressionError(f"value nested more than {MAX_VALUE_DEPTH} deep", 0)
    if isinstance(value, str):
        if "$" in value:
            for part in _compile(value):
                if not isinstance(part, str):
                    yield part
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _walk(item, depth + 1)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _walk(item, depth + 1)


def template_references(value: Any) -> set[tuple[str, ...]]:
    """Every reference inside a mapping value (strings, objects and lists, recursively), as in
    :func:`references`; raises :class:`ExpressionError` for a malformed template."""
    found: set[tuple[str, ...]] = set()
    for expr in _walk(value):
        found |= references(expr)
    return found


def render(value: Any, scope: Mapping[str, Any]) -> Any:
    """The mapping value with every template evaluated in ``scope`` (see the module's docstring).

    The result shares nothing mutable with ``scope``, so a task may change its input freely.
    """
    return _render(value, scope, 0)


def _render(value: Any, scope: Mapping[str, Any], depth: int) -> Any:
    if depth > MAX_VALUE_DEPTH:
        raise ExpressionError(f"value nested more than {MAX_VALUE_DEPTH} deep", 0)
    if isinstance(value, str):
        return _render_string(value, scope) if "$" in value else value
    if isinstance(value, Mapping):
        return {key: _render(item, scope, depth + 1) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_render(item, scope, depth + 1) for item in value]
    return value


def _render_string(template: str, scope: Mapping[str, Any]) -> Any:
    parts = _compile(template)
    if len(parts) == 1 and not isinstance(parts[0], str):
        result = evaluate(parts[0], scope)
        return copy.deepcopy(result) if isinstance(result, list | tuple | Mapping) else result
    return "".join(part if isinstance(part, str) else _string_form(part, scope) for part in parts)


def _string_form(expr: Expr, scope: Mapping[str, Any]) -> str:
    value = evaluate(expr, scope)
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise ExpressionError(f"cannot interpolate a value of type {_type_name(value)}", expr.position) from None
