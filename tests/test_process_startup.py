"""Process-level start-up work happens once per process: the first runtime started in it returns the start-up
garbage to the OS and freezes what is left (``gc.freeze``); a second runtime in the same process (a test
process's in-thread servers, an embedded use) does not collect and freeze the whole process again."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from hearth import runtime


def test_only_the_first_runtime_of_a_process_collects_and_freezes(
        monkeypatch: pytest.MonkeyPatch, hearth_server: Any, fake: Any, tmp_path: Path) -> None:
    freezes: list[int] = []
    real_freeze = gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: (freezes.append(1), real_freeze())[1])
    monkeypatch.setattr(runtime, "_startup_garbage_returned", False)  # as in a new process
    registry = {"providers": [{"name": "openai-like", "kind": "openai"}],
                "endpoints": [{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                               "upstream_model": "up"}],
                "models": [{"name": "m", "endpoints": ["a"]}],
                "callers": [{"name": "tester", "key": "test-key-123"}]}
    hearth_server(registry)
    assert freezes == [1]
    second = hearth_server(registry, database_url=f"sqlite+aiosqlite:///{tmp_path}/second.db")
    assert second.runtime is not None  # started, and served by its own runtime
    assert freezes == [1]
