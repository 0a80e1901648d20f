"""Shared fixtures: real PostgreSQL, real Redis, fake upstreams and Hearth servers over real HTTP.

Fixtures only: plain helpers (constants, registries, bodies) are in :mod:`tests.support`, which
test modules import; no test module imports this one.

PostgreSQL and Redis are the machine's services (127.0.0.1). Each test gets its own PostgreSQL
database and its own Redis key prefix, so tests never see each other's data: a migrated database is
one of this process's pool (:mod:`tests.pg_databases`), emptied and renamed since a previous test had
it. If a service is missing the test is skipped with the reason — except under ``CI=true``, where it fails.
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import socket
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
import redis
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.settings import Settings
from hearth.state.base import StateBackend
from hearth.state.memory import MemoryState
from hearth.state.redis import RedisState
from hearth.store.db import create_engine, migrate
from hearth.testing.fake_clock import FakeClock
from hearth.testing.fake_upstream import FakeUpstream
from hearth.testing.server_thread import HearthServerThread
from tests.pg_databases import (
    PgDatabasePool,
    PgTemplate,
    PgTemplateInvalid,
    create_pg_database,
    drop_pg_database,
    pg_url_for,
    run_apart,
)
from tests.support import IN_CI, MASTER_KEY, PG_ADMIN_DSN, REDIS_URL, StateTime, write_config

E2E = Path(__file__).resolve().parent / "e2e"
# e2e modules whose checks bound a recovery or a shutdown to a few seconds (service back within 5 s of a Redis
# fault, a stream cut within 2.5 s): `make test` runs the e2e tests two at a time with `--dist loadgroup`, and
# these share one group, so they run one after another on one worker, never two of them side by side (a pair
# once missed a 5 s recovery bound on a slower host).
E2E_TIGHT_BOUNDS = {"test_budget_faults.py", "test_nonce_after_redis_restart.py", "test_graceful_shutdown.py",
                    "test_slow_clients.py"}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e/ is ``serial``: real Hearth processes and private redis-servers whose
    checks (answers within seconds during a fault) should not share the CPU with the four workers of the rest.
    ``make test`` runs ``-m "not serial"`` on four workers, then ``-m serial`` on two (they mostly wait; the ones
    with tight time bounds one after another: ``E2E_TIGHT_BOUNDS``)."""
    for item in items:
        if E2E in item.path.parents:
            item.add_marker(pytest.mark.serial)
            if item.path.name in E2E_TIGHT_BOUNDS:
                item.add_marker(pytest.mark.xdist_group("e2e_tight_bounds"))


# A test process lives for thousands of tests on top of everything it imported: measured across four workers on
# tests/workflows + tests/api, the cyclic collector took 22.5 s (its full passes walk every module, class and
# function, under coverage's tracer) — and 4.1-4.7 s, 84-90 s of wall time becoming 77-79 s, once what collection
# imported is frozen out of its reach and young garbage is collected in larger batches.
GC_THRESHOLDS_WHILE_TESTING = (20_000, 50, 100)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS_WHILE_TESTING)


# Tests configure Hearth explicitly; settings from the developer's shell (or `make`) must not leak in.
for _name in [n for n in os.environ if n.startswith("HEARTH_") and not n.startswith("HEARTH_TEST_")]:
    del os.environ[_name]


def _unavailable(what: str, exc: BaseException) -> NoReturn:
    message = f"{what} is not reachable ({type(exc).__name__}: {exc})"
    if IN_CI:
        pytest.fail(f"{message}; CI requires it", pytrace=False)
    pytest.skip(message)


def redis_available() -> None:
    try:
        with redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1) as client:  # closed: no socket left over
            client.ping()
    except Exception as exc:
        _unavailable("Redis at " + REDIS_URL, exc)


class MigratedTemplates:
    """A database of each kind migrated to the head revision once per test process, copied for each test.

    Migrating costs 0.3–0.6 s (SQLite) and 0.7–0.8 s (PostgreSQL) per database; a copy of a migrated
    SQLite file costs a millisecond. ``CREATE DATABASE … TEMPLATE`` and the ``DROP`` after the test cost
    0.3–0.7 s together, so PostgreSQL copies are pooled instead (:class:`PgDatabasePool`): one a test gave
    back is reset for the next (tens of milliseconds). Tests of the migrations themselves ask for an empty
    database (``empty_database_url``), created and dropped for them."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory
        self._sqlite: Path | None = None
        self._pg: PgDatabasePool | None = None

    def sqlite_copy(self, target: Path) -> None:
        if self._sqlite is None:
            path = self._directory / "template.db"
            run_apart(_migrate_url(f"sqlite+aiosqlite:///{path}"))
            self._sqlite = path
        shutil.copyfile(self._sqlite, target)

    def pg_pool(self) -> PgDatabasePool:
        """This process's pool of PostgreSQL copies (its template migrated on first use)."""
        if self._pg is None:
            self._pg = PgDatabasePool(run_apart(PgTemplate.create()))
        return self._pg

    def drop(self) -> None:
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.close()
            with contextlib.suppress(Exception):
                run_apart(drop_pg_database(self._pg.template.name))


async def _migrate_url(url: str) -> None:
    eng = create_engine(url)
    try:
        await migrate(eng)
    finally:
        await eng.dispose()


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MigratedTemplates]:
    templates = MigratedTemplates(tmp_path_factory.mktemp("templates"))
    yield templates
    templates.drop()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path,
                 migrated_templates: MigratedTemplates) -> Iterator[str]:
    """A fresh database of each kind, migrated to the head revision (and otherwise empty)."""
    if request.param == "sqlite":
        migrated_templates.sqlite_copy(tmp_path / "hearth.db")
        yield f"sqlite+aiosqlite:///{tmp_path}/hearth.db"
        return
    yield from _pooled_postgres(migrated_templates)


@pytest.fixture(params=["sqlite", "postgres"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of each kind (no schema): for tests of the migrations themselves."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path}/hearth.db"
        return
    yield from _empty_postgres()


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on a fresh database of each kind, migrated to the head revision."""
    eng = create_engine(database_url)
    # A no-op on the migrated copy, kept so the fixture's promise does not rest on it: one query on a connection
    # the test then reuses, without Alembic (engine + first query measured 12.8 ms with it, 12.6 ms without).
    await migrate(eng)
    try:
        yield eng
    finally:
        await eng.dispose()


@pytest.fixture
def postgres_url(migrated_templates: MigratedTemplates) -> Iterator[str]:
    """A fresh PostgreSQL database, migrated to the head revision."""
    yield from _pooled_postgres(migrated_templates)


@pytest.fixture
def empty_postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database (no schema)."""
    yield from _empty_postgres()


@pytest.fixture
def pg_template(migrated_templates: MigratedTemplates) -> PgTemplate:
    """This process's migrated PostgreSQL template (for the tests of the pool itself)."""
    return _pg_pool(migrated_templates).template


def _pg_pool(templates: MigratedTemplates) -> PgDatabasePool:
    try:
        return templates.pg_pool()
    except PgTemplateInvalid:  # not a missing service: the migrations or the reset need fixing
        raise
    except Exception as exc:
        _unavailable("PostgreSQL at " + PG_ADMIN_DSN, exc)


def _pooled_postgres(templates: MigratedTemplates) -> Iterator[str]:
    """A PostgreSQL database at the head revision and empty, for one test: from this process's pool, and
    given back to it afterwards (reset when next handed out, once this test's other fixtures are done too)."""
    pool = _pg_pool(templates)
    try:
        name = pool.acquire()
    except Exception as exc:
        _unavailable("PostgreSQL at " + PG_ADMIN_DSN, exc)
    try:
        yield pg_url_for(name)
    finally:
        pool.release(name)


def _empty_postgres() -> Iterator[str]:
    """A new, empty PostgreSQL database for one test, dropped afterwards."""
    try:
        name = run_apart(create_pg_database())
    except Exception as exc:
        _unavailable("PostgreSQL at " + PG_ADMIN_DSN, exc)
    try:
        yield pg_url_for(name)
    finally:
        run_apart(drop_pg_database(name))


@pytest.fixture
def state_clock() -> FakeClock:
    """The clock of the ``state`` fixture's memory backend (at the start of the current minute)."""
    return FakeClock()


@pytest.fixture(params=["memory", "redis"])
async def state(request: pytest.FixtureRequest, state_clock: FakeClock) -> AsyncIterator[StateBackend]:
    """Each state backend in turn: memory on ``state_clock``, Redis under this test's key prefix."""
    backend: StateBackend
    if request.param == "memory":
        backend = MemoryState(clock=state_clock)
    else:
        backend = RedisState(REDIS_URL, request.getfixturevalue("redis_prefix"))
    yield backend
    await backend.close()


@pytest.fixture
def state_time(state: StateBackend, state_clock: FakeClock) -> StateTime:
    return StateTime(state, state_clock)


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    redis_available()
    prefix = f"hearth-test:{uuid.uuid4().hex[:10]}:"
    yield prefix
    with redis.Redis.from_url(REDIS_URL) as client:
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)


def _running_fake() -> Iterator[FakeUpstream]:
    upstream = FakeUpstream()
    upstream.start_in_thread()
    try:
        yield upstream
    finally:
        upstream.stop_thread()


@pytest.fixture
def fake() -> Iterator[FakeUpstream]:
    yield from _running_fake()


@pytest.fixture
def fake2() -> Iterator[FakeUpstream]:
    yield from _running_fake()


ServerFactory = Callable[..., HearthServerThread]


@pytest.fixture
def hearth_server(tmp_path: Path, migrated_templates: MigratedTemplates) -> Iterator[ServerFactory]:
    """Start Hearth servers in threads: ``hearth_server(registry, database_url=..., **settings)``."""
    started: list[HearthServerThread] = []

    def start(registry: dict[str, Any], **settings: Any) -> HearthServerThread:
        config = write_config(tmp_path / f"hearth-{len(started)}.yaml", registry)
        values: dict[str, Any] = {"config": config, "database_url": f"sqlite+aiosqlite:///{tmp_path}/h.db",
                                  "master_key": MASTER_KEY, "admin_token": "admin-token-xyz",
                                  "request_log_flush_s": 0.05, "registry_refresh_s": 0.5, "task_grace_s": 1.0}
        values.update(settings)
        default_db = tmp_path / "h.db"
        if values["database_url"].endswith(f"///{default_db}") and not default_db.exists():
            migrated_templates.sqlite_copy(default_db)
        for attempt in range(3):
            server = HearthServerThread(Settings(**values))  # a fresh free port each time
            try:
                server.start()
                break
            except RuntimeError as exc:  # uvicorn exits 3 when the port it was given is no longer free: another
                if "SystemExit(3)" not in str(exc) or attempt == 2:  # test bound it between free_port() and now
                    raise
        started.append(server)
        return server

    yield start
    for server in reversed(started):
        server.stop()


@pytest.fixture(scope="session")
def tls_context() -> ssl.SSLContext:
    """One TLS context for every test's client: httpx builds one per client otherwise (29 ms, loading the CA
    bundle), although every test talks plain HTTP to 127.0.0.1."""
    return ssl.create_default_context()


@pytest.fixture
async def http(tls_context: ssl.SSLContext) -> AsyncIterator[Any]:
    import httpx

    async with httpx.AsyncClient(timeout=30, verify=tls_context,
                                 limits=httpx.Limits(max_connections=500, max_keepalive_connections=500)) as client:
        yield client


@pytest.fixture
def never_accepting() -> Iterator[int]:
    """A port whose listen backlog is full: the kernel answers no further SYN, so a connect just waits."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(4):  # fill the accept queue (never accepted); later connects hang in SYN-SENT
        c = socket.socket()
        c.setblocking(False)
        try:
            c.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(c)
    time.sleep(0.05)  # let the handshakes of the fillers complete (no window or cooldown is awaited)
    yield port
    for c in fillers:
        c.close()
    server.close()
