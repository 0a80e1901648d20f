"""After start-up, the program that owns the process returns its garbage to the OS and freezes its objects out of
the collector's reach (``hearth serve`` on its main thread, ``hearth worker``). A runtime started inside another
program — a server in a thread, a runtime in a test — leaves the collector alone: what it would freeze is not its
own, and would never be collected."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from hearth.runtime import start_runtime
from hearth.settings import Settings
from tests.support import MASTER_KEY, gateway_registry, write_config


def _registry(fake: Any) -> dict[str, Any]:
    return gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                              "upstream_model": "up"}])


def test_a_server_started_in_a_thread_freezes_nothing(hearth_server: Any, fake: Any) -> None:
    gc.collect()
    before = gc.get_freeze_count()
    server = hearth_server(_registry(fake))
    assert server.base_url
    assert gc.get_freeze_count() <= before  # frozen objects freed meanwhile lower it; a freeze would raise it


async def test_a_runtime_started_on_this_thread_freezes_nothing(tmp_path: Path, database_url: str, fake: Any) -> None:
    gc.collect()
    before = gc.get_freeze_count()
    rt = await start_runtime(Settings(config=write_config(tmp_path / "hearth.yaml", _registry(fake)),
                                      database_url=database_url, master_key=MASTER_KEY))
    try:
        assert rt.gateway.registry.models
        assert gc.get_freeze_count() <= before
    finally:
        await rt.stop()
