"""``hearth`` command line: serve, migrate, apply a registry file, manage caller keys, import prompts, run the
fake upstream."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from hearth.process_memory import pause_collector_for_startup
from hearth.settings import Settings, load_settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from hearth.auth.caller_admin import IssuedKey
    from hearth.prompts.registry_import import ImportPlan

app = typer.Typer(help="Hearth: self-hosted AI capability service.", no_args_is_help=True,
                  pretty_exceptions_enable=False)


def _settings(config: Path | None) -> Settings:
    if config is not None:
        os.environ["HEARTH_CONFIG"] = str(config)
    return load_settings()


@app.command()
def serve(
    config: Annotated[Path | None, typer.Option(help="YAML config (else HEARTH_CONFIG)")] = None,
    host: Annotated[str | None, typer.Option(help="listen address (else HEARTH_HOST)")] = None,
    port: Annotated[int | None, typer.Option(help="listen port (else HEARTH_PORT)")] = None,
) -> None:
    """Migrate the database, apply the config's registry, and serve HTTP."""
    import uvicorn

    from hearth.observability.logging import configure_logging
    from hearth.state.factory import refuse_memory_with_workers

    if host is not None:
        os.environ["HEARTH_HOST"] = host
    if port is not None:
        os.environ["HEARTH_PORT"] = str(port)
    settings = _settings(config)
    refuse_memory_with_workers(settings)
    configure_logging(settings.log_level)
    if settings.workers > 1:
        # Migrate once here, so N workers starting together do not race on a fresh database.
        _migrate_database(settings)
        _metrics_dir(settings)
        uvicorn.run("hearth.app:create_asgi", factory=True, host=settings.host, port=settings.port,
                    workers=settings.workers, log_config=None, access_log=settings.access_log,
                    loop="auto", timeout_graceful_shutdown=_connections_grace(settings), **_http_options())
        return
    # Imported only here: with several workers each imports the app itself (the factory string above) and
    # this process only supervises them (measured: 115 -> 81 MB resident); a refused configuration is
    # reported before this import (1.7 -> 0.7 s of CPU).
    pause_collector_for_startup()  # until the app's lifespan has started the runtime (hearth.process_memory)
    from hearth.app import create_asgi

    uvicorn.run(create_asgi(settings), host=settings.host, port=settings.port, log_config=None,
                access_log=settings.access_log, loop="auto", timeout_graceful_shutdown=_connections_grace(settings),
                **_http_options())


def _connections_grace(settings: Settings) -> int:
    """How long uvicorn waits for open connections after SIGTERM before it cancels them: the stream grace,
    plus a moment for the streams ended then to send their error event and be settled (:mod:`hearth.shutdown`)."""
    return int(settings.shutdown_stream_grace_s) + 3


def _metrics_dir(settings: Settings) -> None:
    """Several workers count into files in one directory, which every worker's ``/metrics`` merges: set
    ``PROMETHEUS_MULTIPROC_DIR`` (inherited by the workers, read when they import prometheus-client) and
    empty it of an earlier run's files."""
    from hearth.observability.metrics import MULTIPROC_ENV, prepare_multiprocess_dir

    directory = Path(os.environ.get(MULTIPROC_ENV) or settings.metrics_dir).resolve()
    prepare_multiprocess_dir(directory)
    os.environ[MULTIPROC_ENV] = str(directory)


def _http_options() -> dict[str, Any]:
    """uvicorn's HTTP protocol with a bounded request head (docs/operations.md, "Request limits")."""
    try:
        from hearth.api.http_protocol import uvicorn_http_options
    except ImportError:  # no httptools: uvicorn's h11 protocol, whose incomplete-head bound is set the same
        return {"http": "h11", "h11_max_incomplete_event_size": 64 * 1024}
    return uvicorn_http_options()


def _migrate_database(settings: Settings) -> None:
    from hearth.store.db import create_engine
    from hearth.store.db import migrate as run_migrations

    async def _run() -> None:
        engine = create_engine(settings.database_url)
        try:
            await run_migrations(engine)
        finally:
            await engine.dispose()

    asyncio.run(_run())


@app.command()
def worker(
    queues: Annotated[str | None, typer.Option("-q", "--queues", help="comma-separated queues (default: every queue "
                                               "of HEARTH_TASK_QUEUES)")] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", "-c", min=1, help="tasks run at once per queue "
                                                    "(default: each queue's from HEARTH_TASK_QUEUES)")] = None,
    config: Annotated[Path | None, typer.Option(help="YAML config (else HEARTH_CONFIG)")] = None,
) -> None:
    """Run tasks: claim from the queues, run, record; stops gracefully on SIGTERM or Ctrl-C (docs/tasks.md)."""
    from hearth.observability.logging import configure_logging

    settings = _settings(config)
    configure_logging(settings.log_level)
    names = [q.strip() for q in queues.split(",") if q.strip()] if queues else list(settings.task_queues)
    if not names:
        raise typer.BadParameter("no queue to serve", param_hint="--queues")
    plan = {q: concurrency or settings.task_queues.get(q, 8) for q in names}
    settings = settings.model_copy(update={"embedded_worker": True, "task_queues": plan})
    pause_collector_for_startup()  # until _run_worker has started the runtime (hearth.process_memory)
    run_service(_run_worker(settings))


def run_service(main: Coroutine[Any, Any, None]) -> None:
    """Run a long-lived command's event loop on uvloop where it is installed — what ``hearth serve`` gets from
    uvicorn's ``loop="auto"`` — else on asyncio's. Measured on ``hearth worker``: 2,000 tasks of 50 ms at
    concurrency 64 drained at 1,157-1,164 tasks/s against 1,122-1,136 on asyncio's loop (bench/BENCHMARKS.md)."""
    try:
        import uvloop
    except ImportError:  # e.g. Windows, or another Python implementation
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


async def _run_worker(settings: Settings) -> None:
    import signal

    from hearth.process_memory import release_startup_garbage
    from hearth.runtime import start_runtime

    rt = await start_runtime(settings)
    release_startup_garbage()  # this process is the worker's
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def begin_shutdown() -> None:  # claims stop at once; the process exits within shutdown_timeout_s
        rt.shutdown.begin(bound_process=True)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, begin_shutdown)
    typer.echo(f"hearth worker {rt.tasks.worker.id if rt.tasks.worker else ''} serving "
               f"{', '.join(f'{q}={n}' for q, n in settings.task_queues.items())} "
               f"(event loop: {type(loop).__module__.split('.')[0]})", err=True)
    try:
        await stop.wait()
    finally:
        await rt.stop()


@app.command()
def migrate(config: Annotated[Path | None, typer.Option()] = None) -> None:
    """Apply database migrations and exit."""
    _migrate_database(_settings(config))
    typer.echo("database is at the newest revision")


@app.command(name="apply")
def apply_file(file: Path) -> None:
    """Apply a registry file to the database (idempotent: unchanged entries are not written).

    Its ``workflows:`` are checked first (this process's task types: the capability tasks and
    HEARTH_TASK_MODULES); a bad one refuses the whole file with its path, nothing written."""
    from pydantic import ValidationError

    from hearth.errors import HearthError
    from hearth.mcp.server_store import apply_mcp_servers
    from hearth.registry.config import RegistrySpec
    from hearth.registry.key_vault import KeyVault, load_master_key
    from hearth.registry.serviceable import serviceability_problems
    from hearth.registry.store import apply_registry, load_registry
    from hearth.runtime import task_types
    from hearth.settings import read_config_file
    from hearth.store.db import create_engine
    from hearth.store.db import migrate as run_migrations
    from hearth.workflows.definition_store import DefinitionStore
    from hearth.workflows.file_apply import WorkflowApplyReport, apply_workflows, check_workflows

    settings = load_settings()
    try:
        spec = RegistrySpec.model_validate(read_config_file(file))
    except ValidationError as exc:
        typer.echo(f"{file}: invalid registry:\n{exc}", err=True)
        raise typer.Exit(2) from exc

    async def _run() -> None:
        engine = create_engine(settings.database_url)
        try:
            await run_migrations(engine)
            vault = KeyVault(load_master_key(settings.master_key, settings.master_key_file))
            definitions = DefinitionStore(engine)
            flows = check_workflows(spec.workflows, known_task_types=task_types(settings).names(),
                                    registered=await definitions.names()) if spec.workflows else []
            report = await apply_registry(engine, spec, vault)
            mcp_report = await apply_mcp_servers(engine, spec.mcp_servers, vault)
            report.created += mcp_report.created
            report.updated += mcp_report.updated
            report.unchanged += mcp_report.unchanged
            applied = await apply_workflows(definitions, flows) if flows else WorkflowApplyReport()
            problems = serviceability_problems(await load_registry(engine, vault))
        finally:
            await engine.dispose()
        if report.changed:
            typer.echo(f"created: {', '.join(report.created) or '-'}")
            typer.echo(f"updated: {', '.join(report.updated) or '-'}")
        typer.echo(f"unchanged: {report.unchanged}")
        for kept in report.kept_disabled:  # a runtime disable the file cannot lift (docs/operations.md)
            name = kept.name.split(":", 1)[1]
            typer.echo(f"kept disabled: {kept.name} (disabled by {kept.disabled_by}: {kept.reason}); enable it with "
                       f"POST /api/v1/admin/endpoints/{name}/enable or give it a new api_key")
        if report.re_enabled:
            typer.echo(f"re-enabled (new api_key): {', '.join(report.re_enabled)}")
        if flows:
            typer.echo(f"workflows created: {', '.join(applied.created) or '-'}")
            typer.echo(f"workflows unchanged: {', '.join(applied.unchanged) or '-'}")
        if problems:  # applied all the same: the registry may be filled in several files
            typer.echo(f"warning: the registry cannot serve any call: {'; '.join(problems)}", err=True)

    try:
        asyncio.run(_run())
    except HearthError as exc:
        typer.echo(f"{file}: {exc.message}", err=True)
        raise typer.Exit(2) from exc


keys_app = typer.Typer(help="Manage callers and their API keys directly in the database.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")

_T = TypeVar("_T")


def _on_database(action: Callable[[AsyncEngine], Awaitable[_T]]) -> _T:
    """Run one key action on the configured database (migrated first), like ``hearth apply``.

    Running servers see the change within their registry refresh interval (the action bumps the
    registry version). A :class:`HearthError` becomes a message on stderr and exit code 2.
    """
    from hearth.errors import HearthError
    from hearth.store.db import create_engine
    from hearth.store.db import migrate as run_migrations

    settings = load_settings()

    async def _run() -> _T:
        engine = create_engine(settings.database_url)
        try:
            await run_migrations(engine)
            return await action(engine)
        finally:
            await engine.dispose()

    try:
        return asyncio.run(_run())
    except HearthError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        for problem in exc.details.get("errors", []):
            typer.echo(f"  {'.'.join(str(p) for p in problem['loc'])}: {problem['msg']}", err=True)
        raise typer.Exit(2) from exc


def _echo_new_key(issued: IssuedKey, what: str) -> None:
    typer.echo(f"{what} caller `{issued.name}` (key prefix {issued.key_prefix})")
    typer.echo(f"key: {issued.key}")
    typer.echo("Store it now, it will not be shown again.")


@keys_app.command("create")
def keys_create(
    name: str,
    allowed_model: Annotated[list[str] | None, typer.Option(help="allow this model (repeatable; none = any)")] = None,
    allowed_scene: Annotated[list[str] | None, typer.Option(help="allow this scene (repeatable; none = any)")] = None,
    default_scene: Annotated[str | None, typer.Option(help="scene used when a request names none")] = None,
) -> None:
    """Create a caller and print its new key (the only time it is shown)."""
    from hearth.auth import caller_admin
    from hearth.registry.key_vault import KeyVault, load_master_key

    body: dict[str, Any] = {"name": name, "allowed_models": allowed_model or None,
                            "allowed_scenes": allowed_scene or None, "default_scene": default_scene}

    async def _create(engine: AsyncEngine) -> IssuedKey:
        spec = caller_admin.parse_policy(body)
        settings = load_settings()
        vault = KeyVault(load_master_key(settings.master_key, settings.master_key_file))
        return await caller_admin.create(engine, spec, vault)

    _echo_new_key(_on_database(_create), "created")


@keys_app.command("list")
def keys_list() -> None:
    """List callers by key prefix (keys are never shown again)."""
    from hearth.auth import caller_admin

    rows = _on_database(caller_admin.list_all)
    if not rows:
        typer.echo("no callers")
        return

    def _names(value: list[str] | None) -> str:
        return "*" if value is None else ",".join(value) or "-"

    table = [("NAME", "PREFIX", "STATE", "MODELS", "SCENES", "DEFAULT_SCENE")]
    for r in rows:
        state = "revoked" if r["revoked"] else "enabled" if r["enabled"] else "disabled"
        table.append((r["name"], r["key_prefix"] or "-", state, _names(r["allowed_models"]),
                      _names(r["allowed_scenes"]), r["default_scene"] or "-"))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


@keys_app.command("rotate")
def keys_rotate(name: str) -> None:
    """Give a caller a new key; the old one stops working (running servers: within the refresh interval)."""
    from hearth.auth import caller_admin

    async def _rotate(engine: AsyncEngine) -> IssuedKey:
        return await caller_admin.rotate(engine, name)

    _echo_new_key(_on_database(_rotate), "rotated")


@keys_app.command("revoke")
def keys_revoke(name: str) -> None:
    """Revoke a caller's key; `hearth keys rotate` later issues a new one."""
    from hearth.auth import caller_admin

    async def _revoke(engine: AsyncEngine) -> dict[str, Any]:
        return await caller_admin.revoke(engine, name)

    _on_database(_revoke)
    typer.echo(f"revoked caller `{name}`: its key no longer authenticates")


prompts_app = typer.Typer(help="Manage prompts from a registry file kept in Git.", no_args_is_help=True)
app.add_typer(prompts_app, name="prompts")


@prompts_app.command("import")
def prompts_import(
    file: Annotated[Path, typer.Argument(help="the registry file (.yaml, .yml or .json)")],
    *,
    prompt_code: Annotated[list[str] | None, typer.Option(
        "--prompt-code", help="import only this code (repeatable)")] = None,
    prompt_root: Annotated[Path | None, typer.Option(
        help="directory the prompt files are relative to (default: the registry file's)")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="print the plan; write nothing")] = False,
    activate: Annotated[bool, typer.Option(
        "--activate/--no-activate", help="make new versions of existing prompts the active ones")] = True,
) -> None:
    """Import prompts from a registry file: new codes, new versions of changed prompts, status and display
    changes in place; unchanged prompts are skipped. The whole file is validated first: if any entry is bad
    nothing is written (exit code 1). See docs/capabilities.md, "Registry import"."""
    from hearth.errors import HearthError
    from hearth.operator_cli.output import progress_bar
    from hearth.prompts.registry_import import RegistryError, apply_plan, load_registry, plan_import

    def _fail(exc: RegistryError, *, written: bool) -> typer.Exit:
        for problem in exc.problems:
            typer.echo(f"error: {file}: {problem}", err=True)
        if not written:
            typer.echo("nothing was written", err=True)
        return typer.Exit(1)

    try:
        registry = load_registry(file, prompt_root=prompt_root, codes=prompt_code or ())
    except RegistryError as exc:
        raise _fail(exc, written=False) from exc

    async def _import(engine: AsyncEngine) -> ImportPlan:
        try:
            plan = await plan_import(engine, registry, activate=activate)
        except HearthError as exc:
            raise RegistryError([exc.message]) from exc
        if dry_run:
            return plan
        with progress_bar("import", len(plan.items)) as advance:
            return await apply_plan(engine, plan, on_item=lambda _item: advance())

    try:
        plan = _on_database(_import)
    except RegistryError as exc:
        raise _fail(exc, written=not dry_run) from exc
    _print_import_plan(plan, dry_run=dry_run)


def _print_import_plan(plan: ImportPlan, *, dry_run: bool) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"hearth prompts import {escape(plan.source)}" + (" (dry run)" if dry_run else ""))
    for name in ("code", "action", "version"):
        table.add_column(name, no_wrap=True)
    table.add_column("changes")
    for item in plan.items:
        table.add_row(escape(item.code), item.action, str(item.version), escape(", ".join(item.changes)) or "-")
    console = Console()
    console.print(table)
    counts = f"{plan.count('create')} create, {plan.count('new_version')} new_version, " \
             f"{plan.count('update')} update, {plan.count('skip')} skip"
    console.print(f"dry run, nothing was written: {counts}" if dry_run else f"imported: {counts}", markup=False)


@app.command(name="rotate-master-key")
def rotate_master_key_command(
    new_key_file: Annotated[Path | None, typer.Option(
        help="file holding the new master key (32 bytes as hex or base64); else HEARTH_NEW_MASTER_KEY")] = None,
    dry_run: Annotated[bool, typer.Option(help="check that every value can be re-encrypted; write nothing")] = False,
) -> None:
    """Re-encrypt every endpoint API key and caller signing key under a new master key, in one transaction.

    The current key is the configured one (HEARTH_MASTER_KEY, else the key file). Values already under
    the new key are left alone, so the command can be run again to finish an interrupted rollout. If
    any value opens under neither key, nothing is changed. See docs/operations.md, "Rotating the master key".
    """
    from hearth.registry.key_vault import KeyVault, KeyVaultError, parse_master_key
    from hearth.registry.store import RotationReport, rotate_master_key

    settings = load_settings()

    def _fail(message: str) -> typer.Exit:
        typer.echo(f"error: {message}", err=True)
        return typer.Exit(2)

    try:
        if settings.master_key:
            current = parse_master_key(settings.master_key)
        elif settings.master_key_file.exists():
            current = parse_master_key(settings.master_key_file.read_text())
        else:
            raise _fail("no current master key: set HEARTH_MASTER_KEY (or HEARTH_MASTER_KEY_FILE) to the key "
                        "the values are stored under")
        if new_key_file is not None:
            try:
                new_text = new_key_file.read_text()
            except OSError as exc:
                raise _fail(f"cannot read the new key file {new_key_file}: {exc.strerror}") from exc
        else:
            new_text = os.environ.get("HEARTH_NEW_MASTER_KEY", "")
            if not new_text:
                raise _fail("give the new master key with --new-key-file PATH or HEARTH_NEW_MASTER_KEY")
        try:
            new = parse_master_key(new_text)
        except KeyVaultError as exc:
            raise _fail("the new master key must be 32 bytes encoded as hex or base64") from exc
    except KeyVaultError as exc:
        raise _fail(f"the current master key: {exc}") from exc
    if new == current:
        raise _fail("the new master key is the current one")
    vault = KeyVault(new, previous_keys=(current,))

    async def _rotate(engine: AsyncEngine) -> RotationReport:
        return await rotate_master_key(engine, vault, dry_run=dry_run)

    from hearth.mcp.server_store import rewrap_mcp_credentials

    async def _rotate_mcp(engine: AsyncEngine) -> tuple[int, int]:  # first: if it fails, nothing has changed
        return await rewrap_mcp_credentials(engine, vault, dry_run=dry_run)

    try:
        mcp_done, mcp_current = _on_database(_rotate_mcp)
    except KeyVaultError as exc:
        raise _fail(f"{exc} Nothing was changed.") from exc
    try:
        report = _on_database(_rotate)
    except KeyVaultError as exc:
        raise _fail(f"{exc} Nothing was changed.") from exc
    done = "would re-encrypt" if dry_run else "re-encrypted"
    typer.echo(f"{done} {report.endpoint_keys} endpoint API key(s) and {report.signing_keys} caller signing "
               f"key(s); {report.already_current} already under the new master key")
    if mcp_done or mcp_current:
        typer.echo(f"{done} {mcp_done} MCP server credential(s); {mcp_current} already under the new master key")
    if not dry_run:
        typer.echo("Now restart every Hearth process with the new key as HEARTH_MASTER_KEY (or in its key file).")


from hearth.operator_cli import register as _register_operator_commands  # noqa: E402 (after the local commands)

_register_operator_commands(app)


@app.command(name="fake-upstream")
def fake_upstream(
    host: str = "127.0.0.1",
    port: int = 9100,
    latency_ms: float = 0.0,
    chunks: int = 20,
    *, chunk_delay_ms: float = 0.0,
) -> None:
    """Run the OpenAI-compatible fake provider used by tests and benchmarks."""
    from hearth.testing.fake_upstream import run

    run(host, port, latency_ms=latency_ms, chunks=chunks, chunk_delay_ms=chunk_delay_ms)


rollups_app = typer.Typer(help="Request-log rollups (what the console's charts and usage read).", no_args_is_help=True)
app.add_typer(rollups_app, name="rollups")


@rollups_app.command(name="rebuild")
def rollups_rebuild(
    since: Annotated[str | None, typer.Option(help="ISO-8601 time (UTC unless it says); from its UTC day on. "
                                              "Default: the first request log")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress bar")] = False,
) -> None:
    """Recompute the per-minute, per-hour and per-day rollups from the raw request logs (one day per transaction,
    keyset-paged; safe while servers run). Rollups before the day of ``--since`` are kept."""
    from datetime import UTC, datetime

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from hearth.observability.request_rollups import RebuildProgress, rebuild_rollups
    from hearth.operator_cli.output import console

    start = None
    if since is not None:
        try:
            start = datetime.fromisoformat(since)
        except ValueError as exc:
            typer.echo(f"error: --since {since!r} is not an ISO-8601 time", err=True)
            raise typer.Exit(2) from exc
        start = start if start.tzinfo is not None else start.replace(tzinfo=UTC)
    err = console(stderr=True)
    columns = (TextColumn("rebuild {task.fields[rows]:,} rows"), BarColumn(), MofNCompleteColumn(), TextColumn("days"),
               TimeRemainingColumn())
    with Progress(*columns, console=err, transient=True, disable=quiet or not err.is_terminal) as progress:
        bar = progress.add_task("rebuild", total=None, rows=0)

        def show(p: RebuildProgress) -> None:
            progress.update(bar, total=p.days, completed=p.days_done, rows=p.rows)

        report = _on_database(lambda engine: rebuild_rollups(engine, since=start, on_progress=show))
    if report.since is None:
        typer.echo("no request logs: nothing to rebuild")
        return
    grains = ", ".join(f"{count:,} {grain} rows" for grain, count in report.written.items())
    typer.echo(f"rebuilt {report.since:%Y-%m-%d %H:%M} to {report.until:%Y-%m-%d %H:%M} UTC from {report.rows:,} "
               f"request logs: {grains}")


if __name__ == "__main__":
    app()
