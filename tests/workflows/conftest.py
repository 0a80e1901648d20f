"""Fixtures of the workflow tests: a Hearth server with the test task types and caller ``tester`` (API tests),
and a run service whose worker drains the test task types (engine tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.workflows.runs import RunService
from tests.support import gateway_registry
from tests.workflows.run_support import run_service_with_worker


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    """No embedded worker: the API tests look at what is decided and submitted, not at tasks running."""
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    return hearth_server(registry, database_url=database_url, task_modules=["hearth.testing.task_types:register"],
                         embedded_worker=False)


@pytest.fixture
async def runs(engine: AsyncEngine, database_url: str) -> AsyncIterator[RunService]:
    async with run_service_with_worker(engine, database_url) as service:
        yield service
