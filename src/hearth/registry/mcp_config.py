"""The registry file's ``mcp_servers:`` section: upstream MCP servers and who may call which of their tools.

Validated with the rest of the file (:class:`hearth.registry.config.RegistrySpec`), so a bad rule refuses
the whole file before anything is written. Stored by :mod:`hearth.mcp.server_store` (the credential
encrypted like an endpoint key), enforced by :mod:`hearth.mcp.policy` (docs/mcp.md).

A server's tools are offered to callers as ``<server>__<tool>``: a server name therefore never holds
``__``. Policy is deny by default: a call is allowed only when an ``allow`` rule matches it (caller, tool
and every argument condition of that rule) and no ``deny`` rule does; an explicit deny always wins.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hearth.registry.names import RegistryName

TOOL_SEPARATOR = "__"
_TOOL_GLOB = re.compile(r"^[A-Za-z0-9_.*?\[\]/-]{1,128}$")
_HEADER_NAME = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ArgumentConditionSpec(_Strict):
    """What one argument's value must be. Every condition given must hold, and the argument must be there.

    ``prefix`` compares the path after normalisation (``/srv/a/../b`` is ``/srv/b``), so ``..`` cannot leave
    the prefix; ``max``/``min`` take numbers only (a boolean or a numeric string is not a number)."""

    prefix: str | None = Field(default=None, min_length=1)
    equals: str | int | float | bool | None = None
    one_of: list[str | int | float | bool] | None = Field(default=None, min_length=1)
    pattern: str | None = Field(default=None, description="a regular expression the whole (string) value matches")
    max: float | None = None
    min: float | None = None
    max_length: int | None = Field(default=None, ge=0)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"pattern {value!r} is not a regular expression: {exc}") from None
        return value

    @model_validator(mode="after")
    def _says_something(self) -> ArgumentConditionSpec:
        if not self.model_fields_set:
            raise ValueError("an argument condition needs at least one of prefix, equals, one_of, pattern, max, "
                             "min, max_length")
        return self


class McpRuleSpec(_Strict):
    """One policy rule. ``callers`` and ``tools`` are lists of names; ``*`` matches any caller, and tool
    names are globs (``read_*``) on the upstream's own tool name (without the server prefix)."""

    effect: Literal["allow", "deny"]
    callers: list[RegistryName | Literal["*"]] = Field(min_length=1)
    tools: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    arguments: dict[str, ArgumentConditionSpec] = Field(
        default_factory=dict, description="conditions on argument values; an allow rule allows a call only if "
        "all hold, a deny rule refuses a call only if all hold (without conditions it refuses the tool outright)")

    @field_validator("tools")
    @classmethod
    def _globs(cls, tools: list[str]) -> list[str]:
        for tool in tools:
            if not _TOOL_GLOB.fullmatch(tool):
                raise ValueError(f"tools: {tool!r} is not a tool name or glob")
        return tools


class McpServerSpec(_Strict):
    """An upstream MCP server (Streamable HTTP). ``credential`` omitted → the stored one is kept."""

    name: RegistryName
    url: str
    credential: str | None = Field(default=None, min_length=1, repr=False, description="what Hearth sends to "
                                   "this server (never the caller's); encrypted at rest, never shown")
    credential_header: str = Field(default="Authorization", description="the header the credential goes in; "
                                   "for `Authorization` it is sent as `Bearer <credential>`")
    enabled: bool = True
    timeout_s: float = Field(default=30.0, gt=0, le=600, description="the longest wait for one upstream answer")
    caller_rpm: int = Field(default=0, ge=0, description="tool calls per minute per caller on this server "
                            "(0 = unlimited), counted in the state backend like model calls")
    caller_concurrency: int = Field(default=0, ge=0, description="tool calls in flight per caller on this "
                                    "server (0 = unlimited)")
    rules: list[McpRuleSpec] = Field(default_factory=list, description="deny by default: with no allow rule, "
                                     "no caller sees or calls any tool of this server")

    @field_validator("name")
    @classmethod
    def _no_separator(cls, name: str) -> str:
        if TOOL_SEPARATOR in name:
            raise ValueError(f"an MCP server name must not contain {TOOL_SEPARATOR!r} (it separates the server "
                             "from the tool in the names callers see)")
        return name

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("url must start with http:// or https://")
        return url

    @field_validator("credential_header")
    @classmethod
    def _header(cls, name: str) -> str:
        if not _HEADER_NAME.fullmatch(name):
            raise ValueError(f"credential_header: {name!r} is not a header name")
        return name


def check_unique_servers(servers: list[McpServerSpec]) -> None:
    seen: set[str] = set()
    for server in servers:
        if server.name in seen:
            raise ValueError(f"duplicate MCP server name {server.name!r}")
        seen.add(server.name)
