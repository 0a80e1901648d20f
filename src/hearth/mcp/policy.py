"""Who may call which upstream tool with which arguments (seed 004 §5: authorize subject × tool × arguments).

Deny by default; an explicit deny wins. The same rules decide both ``tools/list`` and ``tools/call``, but
they are *checked again* on every call: a tool listed to a caller is not thereby authorized (a caller may
call a name it was never shown), and an argument condition can only be judged on a call.

* ``tools/list`` shows a tool when an allow rule names the caller and the tool, and no deny rule *without
  argument conditions* does (a deny that depends on arguments leaves the tool listed: other values pass).
* ``tools/call`` runs when an allow rule matches caller, tool and all its argument conditions, and no deny
  rule matches caller, tool and all of its own.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from hearth.registry.mcp_config import ArgumentConditionSpec, McpRuleSpec


@dataclass(slots=True, frozen=True)
class _Condition:
    spec: ArgumentConditionSpec
    pattern: re.Pattern[str] | None

    def holds(self, value: Any) -> bool:
        s = self.spec
        if s.equals is not None and not _same(value, s.equals):
            return False
        if s.one_of is not None and not any(_same(value, choice) for choice in s.one_of):
            return False
        if s.prefix is not None and not (isinstance(value, str) and _within(value, s.prefix)):
            return False
        if self.pattern is not None and not (isinstance(value, str) and self.pattern.fullmatch(value)):
            return False
        if s.max_length is not None and not (isinstance(value, str | list) and len(value) <= s.max_length):
            return False
        if s.max is not None or s.min is not None:
            if not _is_number(value):
                return False
            if s.max is not None and value > s.max:
                return False
            if s.min is not None and value < s.min:
                return False
        return True


def _same(value: Any, expected: Any) -> bool:
    # a boolean is not the number 1, nor 1 a boolean (Python's True == 1 is not the policy's)
    return (type(value) is type(expected) and value == expected) or (
        _is_number(value) and _is_number(expected) and value == expected)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _within(path: str, prefix: str) -> bool:
    """``path`` (normalised: ``..`` and ``.`` resolved, repeated slashes folded) starts with ``prefix``."""
    if "\x00" in path:
        return False
    normal = posixpath.normpath(path)
    if path.endswith("/") and not normal.endswith("/"):
        normal += "/"
    return normal.startswith(prefix) or normal + "/" == prefix


@dataclass(slots=True, frozen=True)
class _Rule:
    allow: bool
    callers: frozenset[str]
    tools: tuple[str, ...]
    conditions: tuple[tuple[str, _Condition], ...]

    def names(self, caller: str, tool: str) -> bool:
        return ("*" in self.callers or caller in self.callers) and any(fnmatchcase(tool, g) for g in self.tools)

    def arguments_hold(self, arguments: Mapping[str, Any]) -> bool:
        return all(name in arguments and cond.holds(arguments[name]) for name, cond in self.conditions)


@dataclass(slots=True, frozen=True)
class Decision:
    allowed: bool
    reason: str  # for the caller and the audit: which rule refused, or why nothing allowed


@dataclass(slots=True, frozen=True)
class Policy:
    rules: tuple[_Rule, ...]

    def may_allow(self, caller: str) -> bool:
        """Whether any allow rule names ``caller`` (else the server need not even be asked for its tools)."""
        return any(rule.allow and ("*" in rule.callers or caller in rule.callers) for rule in self.rules)

    def lists(self, caller: str, tool: str) -> bool:
        """Whether ``tools/list`` shows ``tool`` to ``caller``."""
        allowed = False
        for rule in self.rules:
            if not rule.names(caller, tool):
                continue
            if not rule.allow and not rule.conditions:
                return False
            allowed = allowed or rule.allow
        return allowed

    def decide(self, caller: str, tool: str, arguments: Mapping[str, Any]) -> Decision:
        """Whether ``caller`` may call ``tool`` with ``arguments`` (checked on every call)."""
        allowed_by: int | None = None
        conditions_failed = False
        for index, rule in enumerate(self.rules):
            if not rule.names(caller, tool):
                continue
            if rule.arguments_hold(arguments):
                if not rule.allow:
                    return Decision(False, f"denied by rule {index + 1}")
                if allowed_by is None:
                    allowed_by = index
            elif rule.allow:
                conditions_failed = True
        if allowed_by is not None:
            return Decision(True, f"allowed by rule {allowed_by + 1}")
        if conditions_failed:
            return Decision(False, "an argument is outside what the policy allows")
        return Decision(False, "no rule allows this tool for this caller")


def build_policy(rules: Sequence[McpRuleSpec]) -> Policy:
    return Policy(tuple(
        _Rule(rule.effect == "allow", frozenset(rule.callers), tuple(rule.tools),
              tuple((name, _Condition(cond, re.compile(cond.pattern) if cond.pattern is not None else None))
                    for name, cond in rule.arguments.items()))
        for rule in rules))
