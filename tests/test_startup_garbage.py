"""After start-up a runtime returns its garbage to the OS and freezes its objects out of the collector's reach —
only when it owns its process. A runtime started in another thread (a server in a thread, as in tests) leaves
the collector alone: what it would freeze is not its own, and would never be collected."""

from __future__ import annotations

import gc
from typing import Any

from tests.support import gateway_registry


def test_a_runtime_started_in_a_thread_freezes_nothing(hearth_server: Any, fake: Any) -> None:
    gc.collect()
    before = gc.get_freeze_count()
    server = hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                              "upstream_model": "up"}]))
    assert server.base_url
    assert gc.get_freeze_count() == before
