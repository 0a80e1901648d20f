"""Prompt versions and roles in the database (SQLite and PostgreSQL): one active version per code under
concurrent activations, audited status changes, roll back, the catalog a second process reads."""

from __future__ import annotations

import asyncio
import itertools
import random
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.prompts import store
from hearth.prompts.catalog import PromptCatalog, canary_draw
from hearth.prompts.spec import PromptCreate, RolePatch, RoleSpec, VersionPatch
from hearth.store.db import create_engine
from hearth.store.tables import prompt_events, prompt_versions


def _spec(code: str = "greet", text: str = "Hello {{ name }}", **extra: Any) -> PromptCreate:
    return PromptCreate.model_validate({"code": code, "contents": {"en": text, "zh": "你好 {{ name }}"},
                                        "variables": [{"name": "name", "required": True}], **extra})


def _activate(version: int, operator: str = "ops") -> VersionPatch:
    return VersionPatch(status="active", operator=operator, reason=f"activate v{version}")


async def test_the_first_version_is_active_and_later_ones_are_not_until_activated(engine: AsyncEngine) -> None:
    v1 = await store.create_version(engine, _spec())
    v2 = await store.create_version(engine, _spec(text="Hi {{ name }}"))
    assert (v1["version"], v1["status"]) == (1, "active")
    assert (v2["version"], v2["status"]) == (2, "inactive")
    await store.change_version(engine, "greet", 2, _activate(2))
    prompt = await store.get_prompt(engine, "greet")
    assert prompt["active_version"] == 2
    assert [v["status"] for v in prompt["versions"]] == ["inactive", "active"]
    newest = prompt["history"][0]
    assert (newest["action"], newest["operator"], newest["reason"], newest["previous_active"]) == (
        "activated", "ops", "activate v2", 1)


async def test_rolling_back_is_activating_an_older_version(engine: AsyncEngine) -> None:
    await store.create_version(engine, _spec())
    await store.create_version(engine, _spec(text="v2 {{ name }}", activate=True))
    await store.change_version(engine, "greet", 1, _activate(1))
    assert (await store.get_prompt(engine, "greet"))["active_version"] == 1


async def test_disabling_the_active_version_leaves_the_code_without_one(engine: AsyncEngine) -> None:
    await store.create_version(engine, _spec())
    await store.change_version(engine, "greet", 1, VersionPatch(status="disabled", operator="ops", reason="bad"))
    assert (await store.get_prompt(engine, "greet"))["active_version"] is None
    catalog = PromptCatalog(engine)
    with pytest.raises(HearthError) as info:
        (await catalog.load()).prompt("greet", "req-1")
    assert info.value.code == "prompt_not_found"


@pytest.mark.parametrize("bad", [
    {"status": "active"},  # no operator / reason
    {"status": "active", "operator": "ops"},
    {},
])
def test_a_status_change_needs_an_operator_and_a_reason(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        VersionPatch.model_validate(bad)


async def test_fifty_concurrent_activations_leave_exactly_one_active_version(database_url: str) -> None:
    engines = [create_engine(database_url) for _ in range(3)]
    try:
        from hearth.store.db import migrate

        await migrate(engines[0])
        await store.create_version(engines[0], _spec())
        for i in range(2, 8):
            await store.create_version(engines[0], _spec(text=f"v{i} {{{{ name }}}}"))
        rng = random.Random(7)
        picks = [rng.randint(1, 7) for _ in range(50)]
        results = await asyncio.gather(*(store.change_version(engines[i % 3], "greet", v, _activate(v, f"op{i}"))
                                         for i, v in enumerate(picks)), return_exceptions=True)
        assert [r for r in results if isinstance(r, BaseException)] == []
        async with engines[0].connect() as conn:
            active = (await conn.execute(select(prompt_versions.c.version).where(
                prompt_versions.c.code == "greet", prompt_versions.c.status == "active"))).scalars().all()
            history = (await conn.execute(select(prompt_events.c.version, prompt_events.c.previous_active).where(
                prompt_events.c.code == "greet", prompt_events.c.action == "activated")
                .order_by(prompt_events.c.id))).all()
        assert len(active) == 1
        # One line of history: each activation names the one before it as the version it replaced (an
        # activation of the version already active changes nothing and records nothing).
        assert history[0] == (1, None)
        assert all(later[1] == earlier[0] for earlier, later in itertools.pairwise(history))
        assert active[0] == history[-1][0]
        assert 1 < len(history) <= 51
    finally:
        for e in engines:
            await e.dispose()


async def test_a_second_process_catalog_sees_an_activation_on_its_next_refresh(database_url: str) -> None:
    first, second = create_engine(database_url), create_engine(database_url)
    try:
        from hearth.store.db import migrate

        await migrate(first)
        await store.create_version(first, _spec())
        await store.create_version(first, _spec(text="second {{ name }}"))
        elsewhere = PromptCatalog(second)
        assert (await elsewhere.load()).prompt("greet", "r").version == 1
        assert await elsewhere.refresh() is False  # nothing changed: no reload
        await store.change_version(first, "greet", 2, _activate(2))
        assert await elsewhere.refresh() is True
        assert elsewhere.snapshot.prompt("greet", "r").version == 2
    finally:
        await first.dispose()
        await second.dispose()


async def test_a_canary_serves_its_share_of_request_ids_deterministically(engine: AsyncEngine) -> None:
    await store.create_version(engine, _spec())
    await store.create_version(engine, _spec(text="canary {{ name }}"))
    await store.change_version(engine, "greet", 2, VersionPatch(canary_share=0.25, operator="ops", reason="try"))
    snapshot = await PromptCatalog(engine).load()
    ids = [f"req-{i}" for i in range(4000)]
    served = [snapshot.prompt("greet", i).version for i in ids]
    assert served == [snapshot.prompt("greet", i).version for i in ids]  # same id, same version
    share = served.count(2) / len(served)
    assert 0.22 < share < 0.28
    assert all((canary_draw("greet", i) < 0.25) == (v == 2) for i, v in zip(ids, served, strict=True))


async def test_an_active_version_cannot_be_a_canary(engine: AsyncEngine) -> None:
    await store.create_version(engine, _spec())
    with pytest.raises(HearthError) as info:
        await store.change_version(engine, "greet", 1, VersionPatch(canary_share=0.1, operator="o", reason="r"))
    assert info.value.code == "conflict"


async def test_a_template_using_an_undeclared_variable_is_refused_and_nothing_is_written(engine: AsyncEngine) -> None:
    with pytest.raises(HearthError) as info:
        await store.create_version(engine, _spec(text="Hello {{ nmae }}"))
    assert info.value.code == "prompt_template_invalid"
    assert info.value.details["undeclared"] == ["nmae"]
    assert await store.list_prompts(engine) == []


async def test_roles_bind_a_prompt_and_can_be_unbound_and_disabled(engine: AsyncEngine) -> None:
    await store.create_version(engine, _spec())
    role = await store.create_role(engine, RoleSpec(code="tutor", persona={"en": "You teach.", "zh": "你是老师。"},
                                                    prompt_code="greet", model="m"))
    assert (role["prompt_code"], role["model"], role["enabled"]) == ("greet", "m", True)
    with pytest.raises(HearthError) as info:
        await store.create_role(engine, RoleSpec(code="tutor", persona={"en": "x"}))
    assert info.value.code == "conflict"
    changed = await store.change_role(engine, "tutor", RolePatch(prompt_code="", enabled=False))
    assert (changed["prompt_code"], changed["enabled"]) == (None, False)
    snapshot = await PromptCatalog(engine).load()
    with pytest.raises(HearthError) as disabled:
        snapshot.role("tutor")
    assert disabled.value.code == "role_not_found"
    with pytest.raises(HearthError) as missing:
        await store.change_role(engine, "tutor", RolePatch(prompt_code="nope"))
    assert missing.value.code == "prompt_not_found"
