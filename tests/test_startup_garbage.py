"""After start-up, the program that owns the process returns its garbage to the OS and freezes its objects out of
the collector's reach (``hearth serve`` on its main thread, ``hearth worker``). A runtime started inside another
program — a server in a thread, a runtime in a test — leaves the collector alone: what it would freeze is not its
own, and would never be collected."""

from __future__ import annotations

import gc
import subprocess
import sys
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


_SERVE_START_UP = """
import asyncio, gc, sys
from hearth.cli import pause_collector_for_startup
from hearth.settings import Settings

pause_collector_for_startup()  # as `hearth serve` does before importing the app
from hearth.app import create_app

app = create_app(Settings(config=sys.argv[1], database_url=sys.argv[2], master_key=sys.argv[3]))

async def main() -> None:
    print("paused", not gc.isenabled())
    async with app.router.lifespan_context(app):
        print("collecting", gc.isenabled(), "frozen", gc.get_freeze_count())

asyncio.run(main())
"""


def test_a_server_owning_its_process_collects_again_once_started(tmp_path: Path, fake: Any) -> None:
    """``hearth serve`` pauses the collector for its imports; the app's lifespan (on the main thread) must turn it
    back on, or the process would never free a reference cycle."""
    config = write_config(tmp_path / "hearth.yaml", _registry(fake))
    done = subprocess.run([sys.executable, "-c", _SERVE_START_UP, str(config),
                           f"sqlite+aiosqlite:///{tmp_path}/h.db", MASTER_KEY],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    assert words[:2] == ["paused", "True"]
    assert words[2:4] == ["collecting", "True"] and int(words[5]) > 10_000  # start-up's objects frozen
