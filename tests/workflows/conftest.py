"""Fixtures of the workflow API tests: a Hearth server with the test task types and caller ``tester``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import gateway_registry


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str) -> Any:
    """No embedded worker: the API tests look at what is decided and submitted, not at tasks running."""
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    return hearth_server(registry, database_url=database_url, task_modules=["hearth.testing.task_types:register"],
                         embedded_worker=False)
