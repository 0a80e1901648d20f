"""The operator CLI: ``hearth status``, ``tasks``, ``reviews``, ``schedules``, ``logs`` and ``sign``.

These commands talk to a running Hearth over its HTTP API (``--url``, admin token from ``--token`` or
``HEARTH_ADMIN_TOKEN``), never to its database: an operator's laptop then needs no database
credentials, every action goes through the same checks, audit fields (``operator``, ``reason``) and
error codes as the console, and the live state that only the server holds (cooldowns, breakers,
leases in the state backend) is visible. See docs/cli.md.

:func:`register` adds them to the ``hearth`` typer app (:mod:`hearth.cli`).
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the operator commands to ``app``."""
    from hearth.operator_cli import logs, reviews, schedules, sign, status, tasks

    app.command(name="status")(status.status)
    app.add_typer(tasks.app, name="tasks")
    app.add_typer(reviews.app, name="reviews")
    app.add_typer(schedules.app, name="schedules")
    app.add_typer(logs.app, name="logs")
    app.command(name="sign")(sign.sign)
