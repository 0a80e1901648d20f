"""``hearth prompts import``: a registry file in Git (YAML or JSON) is the source of truth for prompts.

The file lists, per prompt code, its template files per locale and its metadata. An import works in
three steps, so that a bad file never leaves the database half-changed:

1. :func:`load_registry` reads and validates **every** entry (files exist inside the root, are UTF-8,
   locales are tags, templates parse and use only declared variables and built-ins) and raises one
   :class:`RegistryError` listing every problem — before anything touches the database;
2. :func:`plan_import` compares each entry with the newest version of its code: ``create`` (a new code),
   ``new_version`` (the runtime fields' hash differs), ``update`` (only ``status``, ``display_name`` or
   ``description`` differ: changed in place), ``skip``;
3. :func:`apply_plan` writes it through :mod:`hearth.prompts.store`, operator ``import``, reason
   ``hearth prompts import <file>`` (in the audit trail of every status change).

Template files are normalised before hashing (BOM dropped, CRLF → LF, one final newline dropped), so a
checkout with other line endings is not a change.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.prompts.rendering import check_templates
from hearth.prompts.spec import CODE_PATTERN, PromptCreate, Status, VariableSpec, VersionPatch, check_locale
from hearth.prompts.store import change_version, create_version, get_prompt, latest_hashes, list_versions
from hearth.yaml_documents import load_yaml

Action = Literal["create", "new_version", "update", "skip"]
OPERATOR = "import"
_RUNTIME_FIELDS = ("default_locale", "variables", "model", "scene", "output_schema", "params", "quality_gate")


class RegistryError(Exception):
    """A registry file that cannot be imported; ``problems`` holds every reason, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = tuple(problems)


class RegistryEntry(BaseModel):
    """One prompt in the registry file; file paths are relative to the prompt root."""

    model_config = ConfigDict(extra="forbid")

    code: str = Field(pattern=CODE_PATTERN)
    display_name: str | None = Field(default=None, max_length=256)
    description: str | None = None
    default_locale: str = "en"
    files: dict[str, str] = Field(default_factory=dict, description="user message template file per locale")
    system_files: dict[str, str] = Field(default_factory=dict, description="system message template file per locale")
    variables: list[VariableSpec] = Field(default_factory=list)
    model: str | None = None
    scene: str | None = None
    output_schema: dict[str, Any] | None = None
    output_schema_file: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    quality_gate: dict[str, Any] | None = None
    status: Literal["active", "disabled"] = "active"

    @field_validator("files", "system_files")
    @classmethod
    def _locales(cls, value: dict[str, str]) -> dict[str, str]:
        for locale in value:
            try:
                check_locale(locale)
            except ValueError as exc:
                raise ValueError(f"unknown locale key: {exc}") from None
        return value


@dataclass(frozen=True, slots=True)
class RegistryPrompt:
    spec: PromptCreate
    status: Literal["active", "disabled"]


@dataclass(frozen=True, slots=True)
class Registry:
    source: str  # the file as the operator named it: the audit reason says `hearth prompts import <source>`
    prompts: tuple[RegistryPrompt, ...]


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One code's planned (or, after :func:`apply_plan`, applied) change. ``version`` is the version
    created or changed (for ``new_version`` the expected number until applied)."""

    code: str
    action: Action
    version: int
    changes: tuple[str, ...]
    spec: PromptCreate
    activate: bool = False  # for create / new_version: the new version becomes the active one
    status: Status | None = None  # set on the version after creation, or in place
    deactivate: int | None = None  # a new disabled version replaces the active one: that one is deactivated
    display_name: str | None = None  # in-place display changes
    description: str | None = None


@dataclass(frozen=True, slots=True)
class ImportPlan:
    source: str
    items: tuple[PlanItem, ...]

    def count(self, action: Action) -> int:
        return sum(1 for item in self.items if item.action == action)


# ---- 1. reading and validating ------------------------------------------------------------------------
def load_registry(path: Path, *, prompt_root: Path | None = None, codes: Collection[str] = ()) -> Registry:
    """Parse and validate the whole file (every entry, whatever ``codes`` selects), then keep the entries
    whose code is in ``codes`` (all if empty). Raises :class:`RegistryError` with every problem found."""
    document = _read_document(path)
    root = prompt_root if prompt_root is not None else path.parent
    if not root.is_dir():
        raise RegistryError([f"the prompt root {root} is not a directory"])
    problems: list[str] = []
    raw = document.get("prompts")
    extra = sorted(set(document) - {"prompts"})
    if extra:
        problems.append(f"unknown top-level keys {extra}; the file holds `prompts:` only")
    if not isinstance(raw, list):
        raise RegistryError([*problems, "`prompts` must be a list of entries"])
    loaded: list[RegistryPrompt] = []
    listed: list[str] = []
    for index, item in enumerate(raw):
        label = item["code"] if isinstance(item, dict) and isinstance(item.get("code"), str) else f"prompts[{index}]"
        if label in listed:
            problems.append(f"{label}: listed more than once")
        listed.append(label)
        try:
            loaded.append(_load_entry(item, root))
        except RegistryError as exc:
            problems += [f"{label}: {p}" for p in exc.problems]
    unknown = sorted(set(codes) - set(listed))
    if unknown:
        problems.append(f"--prompt-code {', '.join(unknown)}: not in the registry file")
    if problems:
        raise RegistryError(problems)
    chosen = tuple(p for p in loaded if not codes or p.spec.code in codes)
    return Registry(source=str(path), prompts=chosen)


def _read_document(path: Path) -> dict[str, Any]:
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise RegistryError([f"the registry file must end in .yaml, .yml or .json (got {path.name!r})"])
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise RegistryError(["the registry file does not exist"]) from None
    except UnicodeDecodeError:
        raise RegistryError(["the registry file is not UTF-8"]) from None
    except OSError as exc:
        raise RegistryError([f"cannot read the registry file: {exc.strerror}"]) from None
    try:
        data = json.loads(text) if suffix == ".json" else load_yaml(text)
    except json.JSONDecodeError as exc:
        raise RegistryError([f"not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}"]) from None
    except yaml.YAMLError as exc:
        raise RegistryError([f"not valid YAML: {_yaml_problem(exc)}"]) from None
    if not isinstance(data, dict):
        raise RegistryError(["the registry file must hold a mapping with a `prompts:` list"])
    return data


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"line {mark.line + 1}, column {mark.column + 1}: {exc.problem}"
    return " ".join(str(exc).split())


def _load_entry(item: Any, root: Path) -> RegistryPrompt:
    try:
        entry = RegistryEntry.model_validate(item)
    except ValidationError as exc:
        raise RegistryError(_validation_problems(exc)) from None
    problems: list[str] = []
    texts: dict[tuple[str, str], str] = {}
    for part, files in (("user", entry.files), ("system", entry.system_files)):
        for locale, name in files.items():
            try:
                texts[(locale, part)] = _read_template(root, name)
            except RegistryError as exc:
                problems += [f"{'files' if part == 'user' else 'system_files'}.{locale}: {p}" for p in exc.problems]
    schema = entry.output_schema
    if entry.output_schema_file is not None:
        if schema is not None:
            problems.append("give `output_schema` or `output_schema_file`, not both")
        else:
            try:
                schema = _read_schema(root, entry.output_schema_file)
            except RegistryError as exc:
                problems += [f"output_schema_file: {p}" for p in exc.problems]
    if problems:
        raise RegistryError(problems)
    contents: dict[str, Any] = {}
    for locale in sorted({locale for locale, _ in texts}):
        user, system = texts.get((locale, "user"), ""), texts.get((locale, "system"))
        contents[locale] = user if system is None else {"system": system, "user": user}
    body = entry.model_dump(exclude={"files", "system_files", "output_schema_file", "status"})
    try:
        spec = PromptCreate.model_validate({**body, "contents": contents, "output_schema": schema,
                                            "operator": OPERATOR})
    except ValidationError as exc:
        raise RegistryError(_validation_problems(exc)) from None
    try:
        check_templates(spec.normalized_contents(), [v.name for v in spec.variables])
    except HearthError as exc:
        raise RegistryError([exc.message]) from None
    return RegistryPrompt(spec=spec, status=entry.status)


def _validation_problems(exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        out.append(f"{where}: {message}" if where else message)
    return out


def _inside(root: Path, name: str) -> Path:
    """The file ``name`` under ``root``; absolute paths, ``..`` and symlinks leaving the root are refused."""
    posix, windows = PurePosixPath(name), PureWindowsPath(name)
    if not name or posix.is_absolute() or windows.is_absolute() or windows.drive or ".." in windows.parts:
        raise RegistryError([f"{name!r} must be a relative path inside the prompt root (no `..`, not absolute)"])
    path = root / posix
    if not path.resolve().is_relative_to(root.resolve()):
        raise RegistryError([f"{name!r} leads outside the prompt root (a symbolic link)"])
    if not path.is_file():
        raise RegistryError([f"file {name!r} not found in {root}"])
    return path


def _read_template(root: Path, name: str) -> str:
    path = _inside(root, name)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise RegistryError([f"file {name!r} is not UTF-8"]) from None
    except OSError as exc:
        raise RegistryError([f"cannot read {name!r}: {exc.strerror}"]) from None
    return text.removesuffix("\n")  # read_text already turned CRLF and CR into LF


def _read_schema(root: Path, name: str) -> dict[str, Any]:
    try:
        data = json.loads(_read_template(root, name))
    except json.JSONDecodeError as exc:
        raise RegistryError([f"{name!r} is not valid JSON: line {exc.lineno}: {exc.msg}"]) from None
    if not isinstance(data, dict):
        raise RegistryError([f"{name!r} must hold a JSON Schema object"])
    return data


# ---- 2. planning --------------------------------------------------------------------------------------
async def plan_import(engine: AsyncEngine, registry: Registry, *, activate: bool = True) -> ImportPlan:
    """Compare every entry with its code's newest version. ``activate=False`` (``--no-activate``) creates
    new versions of existing codes inactive and never activates an inactive one; a first version is
    always active (nothing else could serve its code). A changed entry with ``status: disabled`` becomes a
    disabled new version that replaces the active one (deactivated), unless ``activate=False``."""
    latest = await latest_hashes(engine)
    items: list[PlanItem] = []
    for prompt in registry.prompts:
        spec, code = prompt.spec, prompt.spec.code
        disabled = prompt.status == "disabled"
        if code not in latest:
            items.append(PlanItem(code, "create", 1, ("new prompt", *(("status disabled",) if disabled else ())),
                                  spec, activate=not disabled, status="disabled" if disabled else None))
            continue
        number, digest, status, _ = latest[code]
        current = await get_prompt(engine, code)
        display = _display_changes(spec, current)
        if digest != spec.content_hash():
            newest = (await list_versions(engine, code))[-1]
            replaced = current["active_version"] if disabled and activate else None
            notes = ["inactive (--no-activate)"] if not activate else []
            if disabled:
                notes = ["status disabled", *notes, *([f"v{replaced} deactivated"] if replaced else [])]
            changes = (*_runtime_changes(spec, newest), *display, *notes)
            items.append(PlanItem(code, "new_version", number + 1, changes, spec, activate=activate and not disabled,
                                  status="disabled" if disabled else None, deactivate=replaced))
            continue
        target = _target_status(prompt.status, status, activate=activate)
        changes = (*display, *((f"status {status} → {target}",) if target else ()))
        items.append(PlanItem(code, "update" if changes else "skip", number, changes, spec, status=target,
                              display_name=spec.display_name if "display_name" in display else None,
                              description=spec.description if "description" in display else None))
    return ImportPlan(source=registry.source, items=tuple(items))


def _target_status(wanted: str, current: str, *, activate: bool) -> Status | None:
    if wanted == "disabled":
        return None if current == "disabled" else "disabled"
    if activate:
        return None if current == "active" else "active"
    return "inactive" if current == "disabled" else None


def _display_changes(spec: PromptCreate, current: Mapping[str, Any]) -> tuple[str, ...]:
    """Display fields the file sets (an omitted one is left as it is) and that differ."""
    return tuple(name for name in ("display_name", "description")
                 if getattr(spec, name) is not None and getattr(spec, name) != current[name])


def _runtime_changes(spec: PromptCreate, row: Mapping[str, Any]) -> list[str]:
    new, old = spec.normalized_contents(), row["contents"]
    out: list[str] = []
    for locale in sorted(set(new) | set(old)):
        if locale not in old or locale not in new:
            out.append(f"contents.{locale} {'added' if locale not in old else 'removed'}")
            continue
        out += [f"contents.{locale}.{part}" for part in ("system", "user")
                if new[locale][part] != old[locale].get(part)]
    fields = spec.model_dump(include=set(_RUNTIME_FIELDS))
    out += [name for name in _RUNTIME_FIELDS if fields[name] != (row[name] or {} if name == "params" else row[name])]
    return out or ["content hash"]


# ---- 3. applying --------------------------------------------------------------------------------------
async def apply_plan(engine: AsyncEngine, plan: ImportPlan,
                     on_item: Callable[[PlanItem], None] | None = None) -> ImportPlan:
    """Write the plan; returns it with the version numbers actually written. A store error stops the
    import (what was applied before it stays; an import run again picks up where it stopped).
    ``on_item`` is called after each item is written (the CLI's progress bar)."""
    reason = f"hearth prompts import {plan.source}"
    done: list[PlanItem] = []
    for item in plan.items:
        try:
            done.append(await _apply(engine, item, reason=reason))
        except HearthError as exc:
            applied = sum(1 for d in done if d.action != "skip")
            raise RegistryError([f"{item.code}: {exc.message} ({applied} earlier change(s) were applied; fix the "
                                 "cause and import again)"]) from exc
        if on_item is not None:
            on_item(done[-1])
    return replace(plan, items=tuple(done))


async def _apply(engine: AsyncEngine, item: PlanItem, *, reason: str) -> PlanItem:
    if item.action in ("create", "new_version"):
        spec = item.spec.model_copy(update={"activate": item.activate, "operator": OPERATOR, "reason": reason})
        number = int((await create_version(engine, spec))["version"])
        if item.status is not None:
            await change_version(engine, item.code, number, VersionPatch(status=item.status, operator=OPERATOR,
                                                                         reason=reason))
        if item.deactivate is not None:
            await change_version(engine, item.code, item.deactivate, VersionPatch(
                status="inactive", operator=OPERATOR, reason=reason))
        return replace(item, version=number)
    if item.action == "update":
        await change_version(engine, item.code, item.version, VersionPatch(
            status=item.status, display_name=item.display_name, description=item.description, operator=OPERATOR,
            reason=reason))
    return item
