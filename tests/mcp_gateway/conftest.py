"""Fixtures of the MCP gateway tests: two real upstream MCP servers (Streamable HTTP, the official SDK)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hearth.testing.mcp_upstream import McpUpstream
from tests.mcp_gateway.support import TOKEN_A, TOKEN_B


@pytest.fixture
def upstream_a() -> Iterator[McpUpstream]:
    server = McpUpstream("A", token=TOKEN_A).start()
    yield server
    server.stop()


@pytest.fixture
def upstream_b() -> Iterator[McpUpstream]:
    server = McpUpstream("B", token=TOKEN_B).start()
    yield server
    server.stop()
