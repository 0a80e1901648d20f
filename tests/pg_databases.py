"""PostgreSQL databases for the tests: a template migrated once per test process, and a pool of copies of it.

A harness module (like ``tests/e2e/processes.py``): ``tests/conftest.py`` builds its fixtures on it and
``tests/test_test_databases.py`` tests it. Each test that asks for a migrated PostgreSQL database
(``database_url``'s postgres case, ``postgres_url``, ``engine``) gets one from :class:`PgDatabasePool`: a copy
of the template a previous test of the same process gave back, emptied and renamed, or a new copy when there
is none to reuse or the one given back cannot be restored (its schema changed). In ``make test``'s parallel
part, creating a copy took 0.2–0.5 s and dropping it 0.15 s; a reset takes about 30 ms (quiet machine: copy
0.13 s, drop 0.02 s).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import asyncpg

from hearth.store.db import HEAD_REVISION, create_engine, migrate
from tests.support import PG_ADMIN_DSN

PG_DATABASE_PREFIX = "hearth_t_"  # every database the tests make; a leftover one is safe to drop
T = TypeVar("T")


def run_apart(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` in a thread of its own: callable from a test's running event loop too (a server
    factory called from an async test)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def pg_url_for(name: str) -> str:
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"{base}/{name}"


def pg_dsn_for(name: str) -> str:
    return PG_ADMIN_DSN.rsplit("/", 1)[0] + "/" + name


def _new_pg_name() -> str:
    return f"{PG_DATABASE_PREFIX}{uuid.uuid4().hex[:12]}"


async def create_pg_database(template: str | None = None) -> str:
    name = _new_pg_name()
    conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=3)
    try:
        await conn.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
    finally:
        await conn.close()
    return name


async def drop_pg_database(*names: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=3)
    try:
        for name in names:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


# What a database's schema is, as one md5: every relation outside the system schemas (kind, persistence,
# options, grants), every column of public's relations (type, nullability, default, identity), constraints,
# index definitions, triggers (and whether enabled), functions (and their source), sequence parameters, types,
# schemas, extensions, rules, policies, the database's own settings and large objects. A copy made with
# CREATE DATABASE … TEMPLATE has the template's catalogs (object ids included), so it has the template's
# fingerprint; a test that changes the schema (a table, a trigger, a constraint, a function) changes it.
PG_SCHEMA_FINGERPRINT = r"""
SELECT md5(concat_ws(E'\n',
  (SELECT string_agg(format('%s %s %s %s %s %s %s', n.nspname, c.relname, c.relkind, c.relpersistence,
                            c.relrowsecurity, c.reloptions, c.relacl), ',' ORDER BY n.nspname, c.relname)
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
      AND n.nspname NOT LIKE 'pg_temp_%' AND n.nspname NOT LIKE 'pg_toast_temp_%'),
  (SELECT string_agg(format('%s.%s %s %s %s %s %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
                            a.attnotnull, a.attidentity, a.attgenerated, pg_get_expr(d.adbin, d.adrelid)),
                     ',' ORDER BY c.relname, a.attnum)
     FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
     LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped),
  (SELECT string_agg(format('%s %s %s', conrelid::regclass, conname, pg_get_constraintdef(oid)), ','
                     ORDER BY conrelid::regclass::text, conname)
     FROM pg_constraint WHERE connamespace = 'public'::regnamespace),
  (SELECT string_agg(pg_get_indexdef(indexrelid) || ' ' || indisvalid, ',' ORDER BY indexrelid::regclass::text)
     FROM pg_index WHERE indrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)),
  (SELECT string_agg(format('%s %s %s %s', tgrelid::regclass, tgname, tgenabled, tgfoid::regprocedure), ','
                     ORDER BY tgrelid::regclass::text, tgname) FROM pg_trigger),
  (SELECT string_agg(format('%s %s', p.oid::regprocedure, md5(p.prosrc)), ',' ORDER BY p.oid::regprocedure::text)
     FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname NOT IN ('pg_catalog', 'information_schema')),
  (SELECT string_agg(format('%s %s %s %s %s %s %s', seqrelid::regclass, seqtypid, seqstart, seqincrement, seqmax,
                            seqmin, seqcycle), ',' ORDER BY seqrelid::regclass::text) FROM pg_sequence),
  (SELECT string_agg(format('%s.%s %s', n.nspname, t.typname, t.typtype), ',' ORDER BY n.nspname, t.typname)
     FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
    WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')
      AND n.nspname NOT LIKE 'pg_temp_%' AND n.nspname NOT LIKE 'pg_toast_temp_%'),
  (SELECT string_agg(nspname, ',' ORDER BY nspname) FROM pg_namespace
    WHERE nspname NOT LIKE 'pg_temp_%' AND nspname NOT LIKE 'pg_toast_temp_%'),
  (SELECT string_agg(extname || ' ' || extversion, ',' ORDER BY extname) FROM pg_extension),
  (SELECT string_agg(format('%s %s %s', ev_class::regclass, rulename, ev_enabled), ','
                     ORDER BY ev_class::regclass::text, rulename)
     FROM pg_rewrite WHERE ev_class IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)),
  (SELECT string_agg(format('%s %s', polrelid::regclass, polname), ',' ORDER BY polrelid::regclass::text, polname)
     FROM pg_policy),
  (SELECT string_agg(array_to_string(setconfig, ' '), ',' ORDER BY setrole) FROM pg_db_role_setting
    WHERE setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())),
  (SELECT count(*) FROM pg_largeobject_metadata)::text))
"""

# Every ordinary table of public but alembic_version: the tables a reset empties (its rows are a test's rows).
_PG_DATA_TABLES = ("SELECT c.oid::regclass::text AS rel FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace"
                   " AND c.relkind IN ('r', 'p') AND c.relname <> 'alembic_version' ORDER BY 1")


class PgTemplateInvalid(AssertionError):
    """The migrated template is not what a reset can restore (rows or a used sequence after migrating, or not
    at the head revision): a fault of the migrations or of this harness, never a reason to skip a test."""


@dataclass(frozen=True, slots=True)
class PgTemplate:
    """A database migrated to the head revision, which the pooled databases are copies of."""

    name: str
    fingerprint: str

    @classmethod
    async def create(cls) -> PgTemplate:
        name = await create_pg_database()
        try:
            engine = create_engine(pg_url_for(name))
            try:
                await migrate(engine)
            finally:
                await engine.dispose()
            conn = await asyncpg.connect(pg_dsn_for(name), timeout=3)
            try:
                versions = [r[0] for r in await conn.fetch("SELECT version_num FROM alembic_version")]
                seeded = [t for t in [r[0] for r in await conn.fetch(_PG_DATA_TABLES)]
                          if await conn.fetchval(f"SELECT EXISTS (SELECT FROM {t})")]
                used = [r[0] for r in await conn.fetch("SELECT sequencename FROM pg_sequences"
                                                       " WHERE last_value IS NOT NULL")]
                fingerprint = await conn.fetchval(PG_SCHEMA_FINGERPRINT)
            finally:
                await conn.close()
            if versions != [HEAD_REVISION] or seeded or used:
                raise PgTemplateInvalid(
                    f"the migrated template cannot be restored by a reset: alembic_version {versions} (head is "
                    f"{HEAD_REVISION}), tables with rows {seeded}, sequences used {used} (a migration that seeds "
                    "rows needs PgTemplate.reset_sql in tests/pg_databases.py to restore them)")
        except BaseException:
            await drop_pg_database(name)
            raise
        return cls(name, fingerprint)

    def reset_sql(self) -> str:
        """One statement (one round trip) that empties a copy of this template, or fails and changes nothing:
        the schema must still be the template's and alembic_version at the head revision; then every table
        of public but alembic_version is emptied (triggers, foreign keys included, do not fire: replica role)
        and every sequence restarts."""
        return f"""
DO $reset$
DECLARE
  found text;
  versions text[];
  r record;
BEGIN
  found := ({PG_SCHEMA_FINGERPRINT});
  IF found IS DISTINCT FROM '{self.fingerprint}' THEN
    RAISE EXCEPTION 'the schema differs from the template''s (fingerprint %, template %)', found, '{self.fingerprint}';
  END IF;
  versions := ARRAY(SELECT version_num::text FROM alembic_version);
  IF versions IS DISTINCT FROM ARRAY['{HEAD_REVISION}'] THEN
    RAISE EXCEPTION 'alembic_version is % (head is {HEAD_REVISION})', versions;
  END IF;
  SET LOCAL session_replication_role = replica;
  FOR r IN {_PG_DATA_TABLES} LOOP
    EXECUTE 'DELETE FROM ' || r.rel;
  END LOOP;
  FOR r IN SELECT c.oid::regclass::text AS seq FROM pg_class c
            WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'S' LOOP
    EXECUTE 'ALTER SEQUENCE ' || r.seq || ' RESTART';
  END LOOP;
END
$reset$"""


class PgDatabasePool:
    """Copies of a :class:`PgTemplate` for one test process: a database a test gave back is reused, not dropped.

    ``release`` only takes a database back; ``acquire`` resets one given back (by then every fixture of the test
    that had it is finished, servers and workers too): it terminates whatever is still connected to it (their
    locks, advisory locks and LISTENs go with them), renames it (a URL handed out before never reaches it again,
    even from a thread or process a test left behind), checks that its schema is still the template's and empties
    it (:meth:`PgTemplate.reset_sql`). A database whose schema a test changed, or whose reset fails for any
    reason, is dropped and replaced by a new copy of the template: what ``acquire`` hands out is always
    equivalent to a freshly migrated database, under a name never handed out before.
    """

    def __init__(self, template: PgTemplate) -> None:
        self.template = template
        self._reset_sql = template.reset_sql()
        self._free: list[str] = []  # given back, not yet reset; the last one given back is reused first
        self._in_use: set[str] = set()
        self.copied = 0  # new copies of the template made
        self.reused = 0  # databases reset and handed out again
        self.replaced: list[str] = []  # why a database given back was dropped instead

    def acquire(self) -> str:
        name = run_apart(self._acquire())
        self._in_use.add(name)
        return name

    def release(self, name: str) -> None:
        self._in_use.discard(name)
        self._free.append(name)

    def close(self) -> None:
        """Drop every database of this pool (handed out or not); the template is its owner's."""
        names = [*self._free, *self._in_use]
        self._free.clear()
        self._in_use.clear()
        if names:
            run_apart(drop_pg_database(*names))

    async def _acquire(self) -> str:
        if self._free:
            old = self._free.pop()
            new = _new_pg_name()
            try:
                await self._reset(old, new)
            except Exception as exc:  # whatever it is, this database is not handed out again
                self.replaced.append(f"{type(exc).__name__}: {exc}")
                await drop_pg_database(old, new)
            else:
                self.reused += 1
                return new
        name = await create_pg_database(self.template.name)
        self.copied += 1
        return name

    async def _reset(self, old: str, new: str) -> None:
        admin = await asyncpg.connect(PG_ADMIN_DSN, timeout=3)
        try:
            pids = await admin.fetch("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", old)
            # Wait for them to end: the rename would wait too, but in steps of 100 ms (and refuse after 5 s).
            for _ in range(1000 if pids else 0):
                if not await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE datname = $1", old):
                    break
                await asyncio.sleep(0.005)
            await admin.execute(f'ALTER DATABASE "{old}" RENAME TO "{new}"')
        finally:
            await admin.close()
        conn = await asyncpg.connect(pg_dsn_for(new), timeout=3)
        try:
            await conn.execute(self._reset_sql, timeout=20)
        finally:
            await conn.close()
