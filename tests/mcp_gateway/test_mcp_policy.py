"""The tool policy on its own: deny by default, explicit deny wins, argument conditions, list vs call."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hearth.mcp.policy import build_policy
from hearth.registry.config import RegistrySpec
from hearth.registry.mcp_config import McpRuleSpec


def _policy(*rules: dict[str, Any]) -> Any:
    return build_policy([McpRuleSpec.model_validate(r) for r in rules])


def test_nothing_is_allowed_without_an_allow_rule() -> None:
    policy = _policy({"effect": "allow", "callers": ["app"], "tools": ["read_*"]})
    assert not policy.decide("other", "read_file", {}).allowed
    assert not policy.decide("app", "write_file", {}).allowed
    assert not _policy().decide("app", "read_file", {}).allowed
    assert policy.decide("app", "read_file", {}).allowed


def test_an_explicit_deny_wins_over_any_allow() -> None:
    policy = _policy({"effect": "allow", "callers": ["*"], "tools": ["*"]},
                     {"effect": "deny", "callers": ["app"], "tools": ["drop_*"]})
    assert not policy.decide("app", "drop_table", {}).allowed
    assert not policy.lists("app", "drop_table")
    assert policy.decide("other", "drop_table", {}).allowed
    assert policy.lists("app", "select")


def test_a_deny_with_conditions_refuses_only_matching_values_and_keeps_the_tool_listed() -> None:
    policy = _policy({"effect": "allow", "callers": ["app"], "tools": ["transfer"]},
                     {"effect": "deny", "callers": ["*"], "tools": ["transfer"], "arguments": {"to": {"equals": "x"}}})
    assert policy.lists("app", "transfer")
    assert policy.decide("app", "transfer", {"to": "y"}).allowed
    decision = policy.decide("app", "transfer", {"to": "x"})
    assert not decision.allowed and decision.reason == "denied by rule 2"


@pytest.mark.parametrize(("condition", "value", "holds"), [
    ({"prefix": "/srv/public/"}, "/srv/public/a/b.txt", True),
    ({"prefix": "/srv/public/"}, "/srv/public/../private/k", False),
    ({"prefix": "/srv/public/"}, "/srv/public//./x", True),
    ({"prefix": "/srv/public/"}, "/srv/publicity", False),
    ({"prefix": "/srv/public/"}, "/srv/public/x\x00", False),
    ({"prefix": "/srv/public/"}, 5, False),
    ({"max": 100}, 100, True),
    ({"max": 100}, 100.01, False),
    ({"max": 100}, "1", False),
    ({"max": 100}, True, False),
    ({"max": 100}, float("nan"), False),
    ({"min": 0, "max": 10}, -1, False),
    ({"one_of": ["a", 1]}, 1, True),
    ({"one_of": ["a", 1]}, True, False),
    ({"equals": False}, 0, False),
    ({"pattern": "[a-z]+"}, "abc", True),
    ({"pattern": "[a-z]+"}, "abc1", False),
    ({"max_length": 3}, "abcd", False),
])
def test_argument_conditions(condition: dict[str, Any], value: Any, holds: bool) -> None:
    policy = _policy({"effect": "allow", "callers": ["app"], "tools": ["t"], "arguments": {"v": condition}})
    assert policy.decide("app", "t", {"v": value}).allowed is holds
    assert not policy.decide("app", "t", {}).allowed  # a condition on an absent argument never holds


@pytest.mark.parametrize("server", [
    {"name": "a__b", "url": "http://x/mcp"},  # the separator callers see
    {"name": "a", "url": "ftp://x/mcp"},
    {"name": "a", "url": "http://x/mcp", "rules": [{"effect": "allow", "callers": [], "tools": ["*"]}]},
    {"name": "a", "url": "http://x/mcp", "rules": [{"effect": "maybe", "callers": ["*"]}]},
    {"name": "a", "url": "http://x/mcp", "rules": [{"effect": "allow", "callers": ["*"], "arguments": {"p": {}}}]},
    {"name": "a", "url": "http://x/mcp", "rules": [{"effect": "allow", "callers": ["*"],
                                                    "arguments": {"p": {"pattern": "("}}}]},
    {"name": "a", "url": "http://x/mcp", "credential_header": "bad header"},
    {"name": "a", "url": "http://x/mcp", "typo": 1},
])
def test_a_bad_mcp_server_entry_refuses_the_whole_file(server: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        RegistrySpec.model_validate({"mcp_servers": [server]})


def test_duplicate_server_names_are_refused() -> None:
    with pytest.raises(ValidationError, match="duplicate MCP server"):
        RegistrySpec.model_validate({"mcp_servers": [{"name": "a", "url": "http://x/mcp"},
                                                     {"name": "a", "url": "http://y/mcp"}]})
