"""Turning a prompt version and a request's variables into chat messages.

Templates are Jinja2 in a **sandboxed** environment (no attribute access to Python internals, ranges
bounded) with ``StrictUndefined``: a template may use only the variables its version declares and the
built-ins the capability supplies (:data:`BUILTINS`) — checked when the version is created
(:func:`check_templates`), so a typo is a 400 at registration, not a broken call later. Compiled templates
are cached per (code, version, locale, part): versions are immutable, so a cached template is never
stale, and an activation simply makes calls ask for another key.

Locale choice (:func:`pick_locale`): the exact tag, then shorter tags by dropping subtags
(``zh-Hant-TW`` → ``zh-Hant`` → ``zh``), case-insensitively, then the version's default locale.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from functools import lru_cache
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError, TemplateSyntaxError, meta
from jinja2.exceptions import SecurityError, UndefinedError
from jinja2.sandbox import SandboxedEnvironment

from hearth.errors import HearthError
from hearth.prompts.spec import PromptVersion

# Variables every capability may supply without the version declaring them.
BUILTINS = frozenset({"text", "locale", "schema", "today", "messages", "role", "source"})
MAX_RENDERED_CHARS = 1_000_000

_ENV = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)


def pick_locale(requested: str | None, available: Collection[str], default: str) -> str:
    if requested:
        by_lower = {a.lower(): a for a in available}
        parts = requested.replace("_", "-").split("-")
        while parts:
            found = by_lower.get("-".join(parts).lower())
            if found is not None:
                return found
            parts.pop()
    return default


def check_templates(contents: Mapping[str, Mapping[str, str | None]], declared: Collection[str]) -> None:
    """Refuse templates that do not parse or use undeclared names (400 ``prompt_template_invalid``)."""
    allowed = set(declared) | BUILTINS
    for locale, parts in contents.items():
        for part, source in parts.items():
            if source is None:
                continue
            try:
                used = meta.find_undeclared_variables(_ENV.parse(source))
            except TemplateSyntaxError as exc:
                raise HearthError("prompt_template_invalid", f"contents.{locale}.{part}: line {exc.lineno}: "
                                  f"{exc.message}", details={"locale": locale, "part": part}) from None
            unknown = sorted(used - allowed)
            if unknown:
                raise HearthError("prompt_template_invalid", f"contents.{locale}.{part} uses undeclared variables "
                                  f"{unknown}; declare them in `variables`",
                                  details={"locale": locale, "part": part, "undeclared": unknown})


def bind_variables(version: PromptVersion, given: Mapping[str, Any]) -> dict[str, Any]:
    """The declared variables' values for one call: given, else the default; checked against the declaration."""
    declared = {v.name: v for v in version.variables}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise HearthError("prompt_variable_invalid", f"Unknown variables {unknown} for prompt `{version.code}`.",
                          details={"unknown": unknown, "declared": sorted(declared)}, param="variables")
    values: dict[str, Any] = {}
    for name, var in declared.items():
        value = given.get(name, var.default)
        if value is None:
            if var.required:
                raise HearthError("prompt_variable_missing", f"The variable `{name}` is required by prompt "
                                  f"`{version.code}`.", details={"variable": name}, param="variables")
        elif var.allowed is not None and value not in var.allowed:
            raise HearthError("prompt_variable_invalid", f"`{name}` must be one of {list(var.allowed)}.",
                              details={"variable": name, "allowed": list(var.allowed)}, param="variables")
        values[name] = value
    return values


def render_messages(version: PromptVersion, locale: str | None, variables: Mapping[str, Any], *,
                    builtins: Mapping[str, Any] | None = None,
                    system_prefix: str | None = None) -> tuple[str, list[dict[str, str]]]:
    """(the locale used, the chat messages): an optional system message (``system_prefix`` — a role's
    persona — then the version's system template) and the user message."""
    chosen = pick_locale(locale, version.contents.keys(), version.default_locale)
    context = {**(builtins or {}), **bind_variables(version, variables), "locale": chosen}
    parts = version.contents[chosen]
    own_system = _render(version, chosen, "system", parts.get("system"), context=context)
    system = [s for s in (system_prefix, own_system) if s]
    messages = [{"role": "system", "content": "\n\n".join(system)}] if system else []
    messages.append({"role": "user", "content": _render(version, chosen, "user", parts.get("user"), context=context)})
    return chosen, messages


def _render(version: PromptVersion, locale: str, part: str, source: str | None, *,
            context: Mapping[str, Any]) -> str:
    if not source:
        return ""
    template = _compiled(version.code, version.version, locale, part, source=source)
    try:
        out = template.render(context)
    except UndefinedError as exc:
        raise HearthError("prompt_variable_missing", f"Prompt `{version.code}` v{version.version}: {exc.message}",
                          param="variables") from None
    except SecurityError:
        raise HearthError("prompt_template_invalid", f"Prompt `{version.code}` v{version.version} tried an "
                          "operation the sandbox forbids.") from None
    except TemplateError as exc:
        raise HearthError("prompt_template_invalid", f"Prompt `{version.code}` v{version.version}: "
                          f"{type(exc).__name__}") from None
    if len(out) > MAX_RENDERED_CHARS:
        raise HearthError("prompt_template_invalid", f"Prompt `{version.code}` rendered more than "
                          f"{MAX_RENDERED_CHARS} characters.")
    return out


class _Substitution:
    """A template that is only text and bare ``{{ name }}`` placeholders, rendered by joining strings:
    what Jinja would produce (``str()`` of each value, a missing name an error), without building a
    Jinja context per call (~25 µs of the capability hot path)."""

    __slots__ = ("_parts",)

    def __init__(self, parts: list[tuple[bool, str]]) -> None:
        self._parts = parts  # (is a name, literal text or the name)

    def render(self, context: Mapping[str, Any]) -> str:
        out = []
        for is_name, item in self._parts:
            if not is_name:
                out.append(item)
                continue
            if item not in context:
                raise UndefinedError(f"'{item}' is undefined")
            out.append(str(context[item]))
        return "".join(out)


_NEWLINES = re.compile(r"\r\n|\r")  # Jinja's lexer turns every line ending in the text into "\n"
_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def _substitution(source: str) -> _Substitution | None:
    """The fast form of ``source``, if it has no Jinja syntax but bare placeholders (else None)."""
    rest = _PLACEHOLDER.sub("", source)
    if "{{" in rest or "{%" in rest or "{#" in rest or "}}" in rest or "%}" in rest or "#}" in rest:
        return None
    parts: list[tuple[bool, str]] = []
    last = 0
    for match in _PLACEHOLDER.finditer(source):
        if match.start() > last:
            parts.append((False, _NEWLINES.sub("\n", source[last:match.start()])))
        parts.append((True, match.group(1)))
        last = match.end()
    if last < len(source):
        parts.append((False, _NEWLINES.sub("\n", source[last:])))
    return _Substitution(parts)


@lru_cache(maxsize=4096)
def _compiled(code: str, version: int, locale: str, part: str, *, source: str) -> Template | _Substitution:
    """One compiled template per immutable (code, version, locale, part); ``source`` completes the key so a
    database rebuilt under the same numbers (tests, restores) can never serve another text."""
    return _substitution(source) or _ENV.from_string(source)
