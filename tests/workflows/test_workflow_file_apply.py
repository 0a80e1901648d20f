"""Workflow definitions in the registry file's ``workflows:`` section: ``hearth apply`` and the start-up apply
register them through the same store and validation as ``POST /api/v1/workflows``.

* applied: each becomes version 1; applied again unchanged: no new version; changed: the next version;
* a bad definition refuses the whole file — exit 2, a message naming the file and the path at fault
  (``workflows[1].steps[0].task_type``) — and nothing of it is written, neither the registry nor the other
  workflows;
* a sub-workflow listed earlier in the file may be run by a later one; a name listed twice is refused;
* ``hearth serve`` (the runtime's start) applies the section too, and a bad definition refuses the start.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from hearth.runtime import start_runtime
from hearth.settings import Settings
from hearth.store.db import create_engine
from hearth.store.tables import providers, workflow_definitions
from hearth.workflows.definition_store import DefinitionStore
from tests.support import MASTER_KEY, hearth_in_process, write_config

REGISTRY: dict[str, Any] = {
    "providers": [{"name": "sim", "kind": "simulated"}],
    "endpoints": [{"name": "e", "provider": "sim", "upstream_model": "sim-1"}],
    "models": [{"name": "m", "endpoints": ["e"]}],
}


def _summary(name: str, *, text: str = "${ $.input.text }") -> dict[str, Any]:
    return {"name": name, "steps": [{"id": "sum", "kind": "task", "task_type": "summarize_async",
                                     "input": {"text": text}}]}


def _file(tmp_path: Path, workflows: list[Any]) -> Path:
    return write_config(tmp_path / "hearth.yaml", {**REGISTRY, "workflows": workflows})


async def _apply(tmp_path: Path, database_url: str, path: Path) -> Any:
    env = {"HEARTH_DATABASE_URL": database_url, "HEARTH_MASTER_KEY": MASTER_KEY}
    return await asyncio.to_thread(hearth_in_process, ["apply", str(path)], cwd=tmp_path, env=env)


async def _versions(database_url: str) -> dict[str, list[int]]:
    engine = create_engine(database_url)
    try:
        c = workflow_definitions.c
        async with engine.connect() as conn:
            rows = (await conn.execute(select(c.name, c.version).order_by(c.name, c.version))).all()
    finally:
        await engine.dispose()
    out: dict[str, list[int]] = {}
    for name, version in rows:
        out.setdefault(name, []).append(version)
    return out


async def _provider_rows(database_url: str) -> int:
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            return int((await conn.execute(select(func.count()).select_from(providers))).scalar_one())
    finally:
        await engine.dispose()


async def test_apply_registers_each_workflow_once_and_a_changed_one_as_its_next_version(
        tmp_path: Path, database_url: str) -> None:
    path = _file(tmp_path, [_summary("daily"), _summary("weekly")])
    first = await _apply(tmp_path, database_url, path)
    assert first.returncode == 0, first.stderr
    assert "workflows created: daily v1, weekly v1" in first.stdout
    assert await _versions(database_url) == {"daily": [1], "weekly": [1]}

    again = await _apply(tmp_path, database_url, path)
    assert again.returncode == 0, again.stderr
    assert "workflows created: -" in again.stdout and "workflows unchanged: daily v1, weekly v1" in again.stdout
    assert await _versions(database_url) == {"daily": [1], "weekly": [1]}

    path = _file(tmp_path, [_summary("daily", text="Today: ${ $.input.text }"), _summary("weekly")])
    changed = await _apply(tmp_path, database_url, path)
    assert "workflows created: daily v2" in changed.stdout and "workflows unchanged: weekly v1" in changed.stdout
    assert await _versions(database_url) == {"daily": [1, 2], "weekly": [1]}
    engine = create_engine(database_url)
    try:
        stored = await DefinitionStore(engine).get("daily")
    finally:
        await engine.dispose()
    assert stored["spec"]["steps"][0]["input"] == {"text": "Today: ${ $.input.text }"}


@pytest.mark.parametrize(("bad", "path_at_fault"), [
    ({"name": "broken", "steps": [{"id": "a", "kind": "task", "task_type": "no_such_type"}]},
     "workflows[1].steps[0].task_type"),
    ({"name": "cyclic", "steps": [{"id": "a", "kind": "task", "task_type": "summarize_async", "needs": ["b"]},
                                  {"id": "b", "kind": "task", "task_type": "summarize_async", "needs": ["a"]}]},
     "workflows[1]"),
    ({"name": "unbound", "steps": [{"id": "a", "kind": "task", "task_type": "summarize_async",
                                    "input": {"text": "${ $.steps.nowhere.output }"}}]},
     "workflows[1].steps[0].input.text"),
    ("not a mapping", "workflows[1]"),
    (_summary("first"), "workflows[1].name"),  # listed twice
], ids=["unknown-task-type", "cycle", "unbound-reference", "not-a-mapping", "duplicate-name"])
async def test_a_bad_definition_refuses_the_whole_file_naming_file_and_path_and_writes_nothing(
        tmp_path: Path, database_url: str, bad: Any, path_at_fault: str) -> None:
    path = _file(tmp_path, [_summary("first"), bad])
    out = await _apply(tmp_path, database_url, path)
    assert out.returncode == 2, out.stdout
    assert out.stderr.startswith(f"{path}: {path_at_fault}"), out.stderr
    assert await _versions(database_url) == {}
    assert await _provider_rows(database_url) == 0


async def test_a_workflow_may_run_a_sub_workflow_listed_before_it_not_one_listed_after(
        tmp_path: Path, database_url: str) -> None:
    parent = {"name": "parent", "steps": [{"id": "child", "kind": "subworkflow", "workflow": "child"}]}
    after = await _apply(tmp_path, database_url, _file(tmp_path, [parent, _summary("child")]))
    assert after.returncode == 2 and "workflows[0].steps[0].workflow" in after.stderr, after.stderr
    before = await _apply(tmp_path, database_url, _file(tmp_path, [_summary("child"), parent]))
    assert before.returncode == 0, before.stderr
    assert await _versions(database_url) == {"child": [1], "parent": [1]}


def _settings(tmp_path: Path, database_url: str, workflows: list[Any]) -> Settings:
    return Settings(config=_file(tmp_path, workflows), database_url=database_url, master_key=MASTER_KEY,
                    embedded_worker=False, scheduler_enabled=False)


async def test_the_start_applies_the_files_workflows_and_a_bad_one_refuses_it(
        tmp_path: Path, database_url: str) -> None:
    with pytest.raises(SystemExit, match=r"hearth\.yaml: workflows\[0\]\.steps\[0\]\.task_type: .*`broken`"):
        await start_runtime(_settings(tmp_path, database_url, [
            {"name": "broken", "steps": [{"id": "a", "kind": "task", "task_type": "no_such_type"}]}]))
    assert await _versions(database_url) == {} and await _provider_rows(database_url) == 0

    rt = await start_runtime(_settings(tmp_path, database_url, [_summary("daily")]))
    try:
        stored = await rt.workflows.get("daily")
    finally:
        await rt.stop()
    assert stored["version"] == 1
    rt = await start_runtime(_settings(tmp_path, database_url, [_summary("daily")]))  # a restart adds nothing
    await rt.stop()
    assert await _versions(database_url) == {"daily": [1], "document-pipeline": [1]}  # and Hearth's own pipeline
