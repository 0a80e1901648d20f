"""The memory state backend is for one process only: a second process on the same database is refused."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hearth.settings import Settings
from hearth.state.factory import MemoryStateClaim, SingleProcessViolation, refuse_memory_with_workers
from hearth.store.db import create_engine

REPO_ROOT = Path(__file__).resolve().parents[2]

_CHILD = r"""
import asyncio, sys
from hearth.settings import Settings
from hearth.state.factory import MemoryStateClaim, SingleProcessViolation
from hearth.store.db import create_engine

async def main(url):
    engine = create_engine(url)
    claim = MemoryStateClaim()
    try:
        await claim.acquire(Settings(database_url=url), engine)
    except SingleProcessViolation:
        print("refused")
    else:
        print("acquired")
        await claim.release()
    finally:
        await engine.dispose()

asyncio.run(main(sys.argv[1]))
"""


async def claim_from_child_process(url: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _CHILD, url, cwd=REPO_ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode(errors="replace")
    return out.decode().strip()


class Claimer:
    """Claims on one database, each through its own engine (as separate processes would)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.settings = Settings(database_url=url)
        self.engines = [create_engine(url) for _ in range(3)]

    async def claim(self, n: int) -> MemoryStateClaim:
        claim = MemoryStateClaim()
        await claim.acquire(self.settings, self.engines[n])
        return claim

    async def close(self) -> None:
        for engine in self.engines:
            await engine.dispose()


@pytest.fixture
async def sqlite_claimer(tmp_path: Path) -> AsyncIterator[Claimer]:
    claimer = Claimer(f"sqlite+aiosqlite:///{tmp_path}/hearth.db")
    yield claimer
    await claimer.close()


@pytest.fixture
async def pg_claimer(postgres_url: str) -> AsyncIterator[Claimer]:
    claimer = Claimer(postgres_url)
    yield claimer
    await claimer.close()


@pytest.fixture(params=["sqlite", "postgres"])
def claimer(request: pytest.FixtureRequest) -> Claimer:
    chosen: Claimer = request.getfixturevalue(f"{'sqlite' if request.param == 'sqlite' else 'pg'}_claimer")
    return chosen


async def test_second_claim_in_process_is_refused_while_the_first_is_held(claimer: Claimer) -> None:
    first = await claimer.claim(0)
    with pytest.raises(SingleProcessViolation) as info:
        await claimer.claim(1)
    assert "HEARTH_STATE_BACKEND=redis" in str(info.value)
    await first.release()


async def test_claim_succeeds_again_after_release(claimer: Claimer) -> None:
    first = await claimer.claim(0)
    await first.release()
    second = await claimer.claim(1)
    with pytest.raises(SingleProcessViolation):
        await claimer.claim(2)
    await second.release()
    third = await claimer.claim(2)
    await third.release()


async def test_claim_from_a_child_process_is_refused_while_held_and_granted_after_release(claimer: Claimer) -> None:
    held = await claimer.claim(0)
    try:
        assert await claim_from_child_process(claimer.url) == "refused"
    finally:
        await held.release()
    assert await claim_from_child_process(claimer.url) == "acquired"


async def test_claims_on_different_sqlite_files_do_not_conflict(tmp_path: Path) -> None:
    one, two = Claimer(f"sqlite+aiosqlite:///{tmp_path}/a.db"), Claimer(f"sqlite+aiosqlite:///{tmp_path}/b.db")
    try:
        a = await one.claim(0)
        b = await two.claim(0)
        await a.release()
        await b.release()
    finally:
        await one.close()
        await two.close()


def test_memory_state_with_several_workers_is_refused() -> None:
    with pytest.raises(SingleProcessViolation) as info:
        refuse_memory_with_workers(Settings(state_backend="memory", workers=2))
    assert "HEARTH_STATE_BACKEND=redis" in str(info.value)


def test_redis_state_with_several_workers_is_accepted() -> None:
    refuse_memory_with_workers(Settings(state_backend="redis", workers=4))


def test_memory_state_with_one_worker_is_accepted() -> None:
    refuse_memory_with_workers(Settings(state_backend="memory", workers=1))
