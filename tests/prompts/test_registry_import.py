"""`hearth prompts import` (SQLite and PostgreSQL): the starter registry is created as version 1, an
unchanged import skips, a changed file makes a new active version, status and display fields change in
place (audited as `import`), `--prompt-code` selects, a dry run writes nothing, and a bad file is refused
whole before anything is written."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from hearth.cli import app
from hearth.prompts import store
from hearth.prompts.registry_import import ImportPlan, RegistryError, apply_plan, load_registry, plan_import
from hearth.prompts.rendering import render_messages
from hearth.prompts.spec import version_from_row
from hearth.store.db import create_engine, migrate
from tests.support import REPO_ROOT

STARTER = REPO_ROOT / "examples" / "prompts"
CODES = ["bill_extraction", "chat_assistant", "extraction", "question_generation", "summary"]


@pytest.fixture
def registry_dir(tmp_path: Path) -> Path:
    """A copy of the starter registry the test may change."""
    return Path(shutil.copytree(STARTER, tmp_path / "prompts"))


def _edit(directory: Path, code: str, **fields: Any) -> Path:
    path = directory / "registry.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    entry = next(e for e in document["prompts"] if e["code"] == code)
    entry.update(fields)
    path.write_text(yaml.safe_dump(document, allow_unicode=True), encoding="utf-8")
    return path


async def _import(engine: AsyncEngine, path: Path, *, dry_run: bool = False, **options: Any) -> dict[str, tuple[
        str, int, tuple[str, ...]]]:
    activate = options.pop("activate", True)
    plan = await plan_import(engine, load_registry(path, **options), activate=activate)
    done: ImportPlan = plan if dry_run else await apply_plan(engine, plan)
    return {item.code: (item.action, item.version, item.changes) for item in done.items}


def _actions(result: dict[str, tuple[str, int, tuple[str, ...]]]) -> dict[str, tuple[str, int]]:
    return {code: (action, version) for code, (action, version, _) in result.items()}


async def test_the_first_import_creates_version_1_active_for_every_starter_prompt(engine: AsyncEngine) -> None:
    result = await _import(engine, STARTER / "registry.yaml")
    assert _actions(result) == {code: ("create", 1) for code in CODES}
    listed = {p["code"]: p for p in await store.list_prompts(engine)}
    assert sorted(listed) == CODES
    assert {code: (p["versions"], p["active_version"]) for code, p in listed.items()} == {c: (1, 1) for c in CODES}
    summary = await store.get_prompt(engine, "summary")
    assert summary["display_name"] == "Summary"
    assert sorted(summary["active"]["contents"]) == ["en", "zh"]
    assert summary["active"]["params"] == {"temperature": 0.2}
    assert summary["active"]["contents"]["en"]["user"].endswith("{{ text }}")  # the file's final newline dropped
    assert {(e["action"], e["operator"]) for e in summary["history"]} == {("created", "import"),
                                                                          ("activated", "import")}
    assert summary["history"][0]["reason"] == f"hearth prompts import {STARTER / 'registry.yaml'}"


async def test_every_starter_prompt_renders_in_english_and_chinese(engine: AsyncEngine) -> None:
    await _import(engine, STARTER / "registry.yaml")
    builtins = {"text": "The meeting moved to Friday.", "schema": '{"type": "object"}', "today": "2025-01-01",
                "role": None}
    for code in CODES:
        version = version_from_row((await store.get_prompt(engine, code))["active"])
        given = {"topic": "photosynthesis"} if code == "question_generation" else {}
        for locale in ("en", "zh-CN"):
            chosen, messages = render_messages(version, locale, given, builtins=builtins)
            assert chosen == locale[:2]
            assert "{{" not in "".join(m["content"] for m in messages)
    chat = version_from_row((await store.get_prompt(engine, "chat_assistant"))["active"])
    assert chat.contents["zh"]["user"] == "" and "2025-01-01" in render_messages(
        chat, "zh", {}, builtins=builtins)[1][0]["content"]


async def test_importing_an_unchanged_registry_again_skips_every_prompt(engine: AsyncEngine) -> None:
    await _import(engine, STARTER / "registry.yaml")
    assert _actions(await _import(engine, STARTER / "registry.yaml")) == {code: ("skip", 1) for code in CODES}
    assert all(p["versions"] == 1 for p in await store.list_prompts(engine))


async def test_a_json_registry_with_the_same_content_is_the_same_prompts(engine: AsyncEngine,
                                                                         registry_dir: Path) -> None:
    await _import(engine, registry_dir / "registry.yaml")
    as_json = registry_dir / "registry.json"
    as_json.write_text(json.dumps(yaml.safe_load((registry_dir / "registry.yaml").read_text(encoding="utf-8"))))
    assert {a for a, _ in _actions(await _import(engine, as_json)).values()} == {"skip"}


async def test_windows_line_endings_are_not_a_change(engine: AsyncEngine, registry_dir: Path) -> None:
    await _import(engine, registry_dir / "registry.yaml")
    path = registry_dir / "summary.zh.md"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes().replace(b"\n", b"\r\n"))
    assert _actions(await _import(engine, registry_dir / "registry.yaml"))["summary"] == ("skip", 1)


async def test_changing_a_file_makes_version_2_active_and_skips_the_others(engine: AsyncEngine,
                                                                           registry_dir: Path) -> None:
    await _import(engine, registry_dir / "registry.yaml")
    path = registry_dir / "summary.en.md"
    path.write_text(path.read_text(encoding="utf-8").replace("at most", "no more than"), encoding="utf-8")
    result = await _import(engine, registry_dir / "registry.yaml")
    assert result["summary"] == ("new_version", 2, ("contents.en.user",))
    assert {code: a for code, a in _actions(result).items() if code != "summary"} == {
        code: ("skip", 1) for code in CODES if code != "summary"}
    summary = await store.get_prompt(engine, "summary")
    assert [(v["version"], v["status"]) for v in summary["versions"]] == [(1, "inactive"), (2, "active")]
    assert "no more than" in summary["active"]["contents"]["en"]["user"]
    activated = summary["history"][0]
    assert (activated["action"], activated["version"], activated["operator"], activated["previous_active"]) == (
        "activated", 2, "import", 1)


async def test_a_changed_runtime_field_is_a_new_version_naming_the_field(engine: AsyncEngine,
                                                                         registry_dir: Path) -> None:
    await _import(engine, registry_dir / "registry.yaml")
    (registry_dir / "invoice.json").write_text(json.dumps({"type": "object", "required": ["total"]}))
    _edit(registry_dir, "extraction", params={"temperature": 0.1}, output_schema_file="invoice.json")
    result = await _import(engine, registry_dir / "registry.yaml")
    assert result["extraction"] == ("new_version", 2, ("output_schema", "params"))
    active = (await store.get_prompt(engine, "extraction"))["active"]
    assert active["output_schema"] == {"type": "object", "required": ["total"]}


async def test_no_activate_keeps_the_new_version_inactive_until_an_import_without_it(
        engine: AsyncEngine, registry_dir: Path) -> None:
    await _import(engine, registry_dir / "registry.yaml")
    _edit(registry_dir, "summary", params={"temperature": 0.5})
    staged = await _import(engine, registry_dir / "registry.yaml", activate=False)
    assert staged["summary"] == ("new_version", 2, ("params", "inactive (--no-activate)"))
    assert (await store.get_prompt(engine, "summary"))["active_version"] == 1
    assert _actions(await _import(engine, registry_dir / "registry.yaml", activate=False))["summary"] == ("skip", 2)
    promoted = await _import(engine, registry_dir / "registry.yaml")
    assert promoted["summary"] == ("update", 2, ("status inactive → active",))
    assert (await store.get_prompt(engine, "summary"))["active_version"] == 2


async def test_changing_only_the_display_name_updates_in_place_without_a_new_version(
        engine: AsyncEngine, registry_dir: Path) -> None:
    await _import(engine, registry_dir / "registry.yaml")
    _edit(registry_dir, "summary", display_name="Short summary", description="Three sentences at most.")
    result = await _import(engine, registry_dir / "registry.yaml")
    assert result["summary"] == ("update", 1, ("display_name", "description"))
    summary = await store.get_prompt(engine, "summary")
    assert (summary["display_name"], summary["description"]) == ("Short summary", "Three sentences at most.")
    assert [(v["version"], v["status"]) for v in summary["versions"]] == [(1, "active")]
    assert _actions(await _import(engine, registry_dir / "registry.yaml"))["summary"] == ("skip", 1)


async def test_status_disabled_disables_the_newest_version_audited_as_import(engine: AsyncEngine,
                                                                            registry_dir: Path) -> None:
    await _import(engine, registry_dir / "registry.yaml")
    path = _edit(registry_dir, "chat_assistant", status="disabled")
    result = await _import(engine, path)
    assert result["chat_assistant"] == ("update", 1, ("status active → disabled",))
    chat = await store.get_prompt(engine, "chat_assistant")
    assert (chat["active_version"], chat["versions"][0]["status"]) == (None, "disabled")
    event = chat["history"][0]
    assert (event["action"], event["version"], event["operator"], event["reason"]) == (
        "disabled", 1, "import", f"hearth prompts import {path}")
    assert _actions(await _import(engine, path))["chat_assistant"] == ("skip", 1)
    _edit(registry_dir, "chat_assistant", status="active")
    assert _actions(await _import(engine, path))["chat_assistant"] == ("update", 1)
    assert (await store.get_prompt(engine, "chat_assistant"))["active_version"] == 1


async def test_a_changed_and_disabled_entry_replaces_the_active_version_so_nothing_serves(
        engine: AsyncEngine, registry_dir: Path) -> None:
    await _import(engine, registry_dir / "registry.yaml")
    _edit(registry_dir, "summary", params={"temperature": 0.4}, status="disabled")
    _edit(registry_dir, "extraction", params={"temperature": 0.4}, status="disabled")
    staged = await _import(engine, registry_dir / "registry.yaml", activate=False, codes=["extraction"])
    assert staged["extraction"] == ("new_version", 2, ("params", "status disabled", "inactive (--no-activate)"))
    assert (await store.get_prompt(engine, "extraction"))["active_version"] == 1  # --no-activate: v1 still serves
    result = await _import(engine, registry_dir / "registry.yaml", codes=["summary"])
    assert result["summary"] == ("new_version", 2, ("params", "status disabled", "v1 deactivated"))
    summary = await store.get_prompt(engine, "summary")
    assert [(v["version"], v["status"]) for v in summary["versions"]] == [(1, "inactive"), (2, "disabled")]
    assert {(e["action"], e["version"], e["operator"]) for e in summary["history"][:2]} == {
        ("disabled", 2, "import"), ("deactivated", 1, "import")}


async def test_a_new_prompt_listed_as_disabled_is_created_disabled(engine: AsyncEngine, registry_dir: Path) -> None:
    path = _edit(registry_dir, "extraction", status="disabled")
    assert (await _import(engine, path))["extraction"] == ("create", 1, ("new prompt", "status disabled"))
    extraction = await store.get_prompt(engine, "extraction")
    assert (extraction["active_version"], extraction["versions"][0]["status"]) == (None, "disabled")


async def test_prompt_code_imports_only_the_codes_named(engine: AsyncEngine) -> None:
    result = await _import(engine, STARTER / "registry.yaml", codes=["summary", "extraction"])
    assert _actions(result) == {"summary": ("create", 1), "extraction": ("create", 1)}
    assert sorted(p["code"] for p in await store.list_prompts(engine)) == ["extraction", "summary"]
    with pytest.raises(RegistryError) as info:
        load_registry(STARTER / "registry.yaml", codes=["summary", "sumary"])
    assert info.value.problems == ("--prompt-code sumary: not in the registry file",)


async def test_a_dry_run_plans_the_changes_and_writes_nothing(engine: AsyncEngine, registry_dir: Path) -> None:
    planned = await _import(engine, registry_dir / "registry.yaml", dry_run=True)
    assert _actions(planned) == {code: ("create", 1) for code in CODES}
    assert await store.list_prompts(engine) == []
    await _import(engine, registry_dir / "registry.yaml")
    before = await store.catalog_version(engine)
    _edit(registry_dir, "summary", display_name="Renamed")
    (registry_dir / "extraction.zh.md").write_text("只输出 JSON：{{ schema }}\n{{ text }}", encoding="utf-8")
    again = _actions(await _import(engine, registry_dir / "registry.yaml", dry_run=True))
    assert (again["summary"], again["extraction"]) == (("update", 1), ("new_version", 2))
    assert await store.catalog_version(engine) == before
    assert (await store.get_prompt(engine, "summary"))["display_name"] == "Summary"
    assert (await store.get_prompt(engine, "extraction"))["active_version"] == 1


def _break(directory: Path, kind: str) -> str:
    """Make the last entry of the registry bad in one way; returns a fragment of the expected message."""
    if kind == "missing file":
        _edit(directory, "question_generation", files={"en": "nope.en.md"})
        return "question_generation: files.en: file 'nope.en.md' not found"
    if kind == "undeclared variable":
        (directory / "question_generation.zh.md").write_text("出 {{ count }} 道 {{ subject }} 题", encoding="utf-8")
        return "contents.zh.user uses undeclared variables ['subject']"
    if kind == "path outside the root":
        (directory.parent / "outside.md").write_text("{{ text }}", encoding="utf-8")
        _edit(directory, "question_generation", files={"en": "../outside.md"})
        return "'../outside.md' must be a relative path inside the prompt root"
    if kind == "absolute path":
        _edit(directory, "question_generation", files={"en": str(directory / "summary.en.md")})
        return "must be a relative path inside the prompt root"
    if kind == "symbolic link out of the root":
        (directory.parent / "outside.md").write_text("{{ text }}", encoding="utf-8")
        (directory / "link.md").symlink_to(directory.parent / "outside.md")
        _edit(directory, "question_generation", files={"en": "link.md"})
        return "'link.md' leads outside the prompt root"
    if kind == "unknown locale key":
        _edit(directory, "question_generation", files={"en": "question_generation.en.md", "chinese": "x.md"})
        return "files: unknown locale key: 'chinese' is not a locale tag"
    if kind == "unknown field":
        _edit(directory, "question_generation", temprature=0.3)
        return "temprature: Extra inputs are not permitted"
    if kind == "invalid template":
        (directory / "question_generation.en.md").write_text("Write {{ count ", encoding="utf-8")
        return "contents.en.user: line 1"
    assert kind == "yaml error"
    (directory / "registry.yaml").write_text("prompts:\n  - code: a\n   files: [", encoding="utf-8")
    return "not valid YAML: line 3"


BAD = ["missing file", "undeclared variable", "path outside the root", "absolute path",
       "symbolic link out of the root", "unknown locale key", "unknown field", "invalid template", "yaml error"]


@pytest.mark.parametrize("kind", BAD)
async def test_a_bad_entry_is_refused_with_its_reason_and_nothing_is_written(engine: AsyncEngine, registry_dir: Path,
                                                                            kind: str) -> None:
    expected = _break(registry_dir, kind)
    with pytest.raises(RegistryError) as info:
        await _import(engine, registry_dir / "registry.yaml")
    assert any(expected in problem for problem in info.value.problems), info.value.problems
    assert await store.list_prompts(engine) == []


async def test_every_bad_entry_is_reported_at_once(registry_dir: Path) -> None:
    _edit(registry_dir, "summary", files={"en": "gone.md"})
    _edit(registry_dir, "chat_assistant", params={"temp": 1})
    with pytest.raises(RegistryError) as info:
        load_registry(registry_dir / "registry.yaml", codes=["extraction"])  # the whole file is checked
    assert [p.split(":")[0] for p in info.value.problems] == ["summary", "chat_assistant"]


async def test_prompt_files_may_live_under_another_root(engine: AsyncEngine, registry_dir: Path,
                                                        tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.move(registry_dir / "registry.yaml", elsewhere / "registry.yaml")
    with pytest.raises(RegistryError):
        load_registry(elsewhere / "registry.yaml")
    result = await _import(engine, elsewhere / "registry.yaml", prompt_root=registry_dir)
    assert {a for a, _ in _actions(result).values()} == {"create"}


# ---- the command line --------------------------------------------------------------------------------------
def _cli(args: list[str], database_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("HEARTH_DATABASE_URL", database_url)
    monkeypatch.setenv("COLUMNS", "160")
    return CliRunner().invoke(app, ["prompts", "import", *args])


def _prompts_in(database_url: str) -> list[str]:
    async def _read() -> list[str]:
        engine = create_engine(database_url)
        try:
            await migrate(engine)
            return [p["code"] for p in await store.list_prompts(engine)]
        finally:
            await engine.dispose()

    return asyncio.run(_read())


def _rows(output: str) -> dict[str, list[str]]:
    """The plan table's rows by code: [action, version, changes]."""
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if line.count("│") == 5]
    return {row[0]: row[1:] for row in cells if row[0] in CODES}


def test_the_command_prints_the_plan_table_and_exits_0(database_url: str, registry_dir: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(registry_dir / "registry.yaml")
    dry = _cli([path, "--dry-run"], database_url, monkeypatch)
    assert dry.exit_code == 0, dry.output
    assert {code: row[:2] for code, row in _rows(dry.stdout).items()} == {code: ["create", "1"] for code in CODES}
    assert "dry run, nothing was written: 5 create, 0 new_version, 0 update, 0 skip" in dry.stdout
    assert _prompts_in(database_url) == []
    first = _cli([path], database_url, monkeypatch)
    assert first.exit_code == 0, first.output
    assert "imported: 5 create" in first.stdout
    _edit(registry_dir, "summary", display_name="Brief")
    second = _cli([path, "--prompt-code", "summary", "--prompt-code", "extraction"], database_url, monkeypatch)
    assert second.exit_code == 0, second.output
    assert _rows(second.stdout) == {"summary": ["update", "1", "display_name"], "extraction": ["skip", "1", "-"]}


def test_the_command_refuses_a_bad_file_with_exit_1_and_writes_nothing(database_url: str, registry_dir: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    expected = _break(registry_dir, "missing file")
    path = str(registry_dir / "registry.yaml")
    out = _cli([path], database_url, monkeypatch)
    assert out.exit_code == 1
    assert f"error: {path}: {expected} in" in out.stderr and "nothing was written" in out.stderr
    assert "Traceback" not in out.output and out.stdout == ""
    assert _prompts_in(database_url) == []
    unknown = _cli([str(STARTER / "registry.yaml"), "--prompt-code", "nope"], database_url, monkeypatch)
    assert unknown.exit_code == 1 and "--prompt-code nope: not in the registry file" in unknown.stderr
    missing = _cli([str(registry_dir / "absent.yaml")], database_url, monkeypatch)
    assert missing.exit_code == 1 and "the registry file does not exist" in missing.stderr


async def test_apply_plan_reports_each_written_item_in_plan_order(engine: AsyncEngine) -> None:
    plan = await plan_import(engine, load_registry(STARTER / "registry.yaml"), activate=True)
    seen: list[tuple[str, int | None]] = []
    done = await apply_plan(engine, plan, on_item=lambda item: seen.append((item.code, item.version)))
    assert seen == [(item.code, item.version) for item in done.items]
    assert sorted(code for code, _ in seen) == CODES


def test_the_command_shows_a_progress_bar_on_a_terminal_only(database_url: str, registry_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = str(registry_dir / "registry.yaml")
    piped = _cli([path], database_url, monkeypatch)
    assert piped.exit_code == 0, piped.output
    assert "import" not in piped.stderr  # a pipe or a script sees no bar
    _edit(registry_dir, "summary", display_name="Brief")
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: treat the output as a terminal
    monkeypatch.setenv("NO_COLOR", "1")
    shown = _cli([path], database_url, monkeypatch)
    assert shown.exit_code == 0, shown.output
    assert "import" in shown.stderr and f"{len(CODES)}/{len(CODES)}" in shown.stderr
