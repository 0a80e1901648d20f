"""``hearth`` command line: serve, migrate, apply a registry file, run the fake upstream."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated

import typer

from hearth.settings import Settings, load_settings

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

    from hearth.app import create_asgi
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
        uvicorn.run("hearth.app:create_asgi", factory=True, host=settings.host, port=settings.port,
                    workers=settings.workers, log_config=None, access_log=settings.access_log,
                    loop="auto", http="auto")
        return
    uvicorn.run(create_asgi(settings), host=settings.host, port=settings.port, log_config=None,
                access_log=settings.access_log, loop="auto", http="auto", timeout_graceful_shutdown=5)


@app.command()
def migrate(config: Annotated[Path | None, typer.Option()] = None) -> None:
    """Apply database migrations and exit."""
    from hearth.store.db import create_engine
    from hearth.store.db import migrate as run_migrations

    settings = _settings(config)

    async def _run() -> None:
        engine = create_engine(settings.database_url)
        await run_migrations(engine)
        await engine.dispose()

    asyncio.run(_run())
    typer.echo("database is at the newest revision")


@app.command(name="apply")
def apply_file(file: Path) -> None:
    """Apply a registry file to the database (idempotent: unchanged entries are not written)."""
    from pydantic import ValidationError

    from hearth.errors import HearthError
    from hearth.registry.config import RegistrySpec
    from hearth.registry.key_vault import KeyVault, load_master_key
    from hearth.registry.store import apply_registry
    from hearth.settings import read_config_file
    from hearth.store.db import create_engine
    from hearth.store.db import migrate as run_migrations

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
            report = await apply_registry(engine, spec, vault)
        finally:
            await engine.dispose()
        if report.changed:
            typer.echo(f"created: {', '.join(report.created) or '-'}")
            typer.echo(f"updated: {', '.join(report.updated) or '-'}")
        typer.echo(f"unchanged: {report.unchanged}")

    try:
        asyncio.run(_run())
    except HearthError as exc:
        typer.echo(f"{file}: {exc.message}", err=True)
        raise typer.Exit(2) from exc


@app.command(name="fake-upstream")
def fake_upstream(
    host: str = "127.0.0.1",
    port: int = 9100,
    latency_ms: float = 0.0,
    chunks: int = 20,
    chunk_delay_ms: float = 0.0,
) -> None:
    """Run the OpenAI-compatible fake provider used by tests and benchmarks."""
    from hearth.testing.fake_upstream import run

    run(host, port, latency_ms=latency_ms, chunks=chunks, chunk_delay_ms=chunk_delay_ms)


if __name__ == "__main__":
    app()
