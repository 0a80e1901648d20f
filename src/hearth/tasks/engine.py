"""The task engine of one process, built from settings: the service the API calls, and (optionally) a worker
with its callback sender.

An API-only process (``embedded_worker: false``) still submits, cancels and reads tasks; a worker process
(``hearth worker``) is the same runtime without the HTTP server. Both come from :func:`build_task_engine`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.settings import Settings
from hearth.store.db import create_engine
from hearth.tasks.admission import QueueLimits
from hearth.tasks.callbacks import CallbackPolicy, CallbackSender
from hearth.tasks.dead_letters import SEVERITIES, SeverityRule
from hearth.tasks.notify import Wakeups
from hearth.tasks.retry import RetryPolicy
from hearth.tasks.service import TaskService
from hearth.tasks.terminal import TerminalRules
from hearth.tasks.types import TaskTypes
from hearth.tasks.views import task_view
from hearth.tasks.worker import Worker, WorkerConfig


@dataclass(slots=True)
class TaskEngine:
    service: TaskService
    worker: Worker | None
    sender: CallbackSender | None

    async def start(self) -> None:
        if self.worker is not None:
            await self.worker.start()
        if self.sender is not None:
            self.sender.start()

    async def stop(self, *, grace_s: float | None = None) -> None:
        """Stop the worker (running tasks get ``grace_s``, else the configured grace) and its engine."""
        if self.worker is not None:
            await self.worker.stop(grace_s=grace_s)
            if self.worker.engine is not self.service.engine:
                await self.worker.engine.dispose()
        if self.sender is not None:
            await self.sender.stop()


def terminal_rules(settings: Settings) -> TerminalRules:
    rules = []
    for i, raw in enumerate(settings.dead_letter_severity):
        unknown = set(raw) - {"severity", "error_code", "task_type", "failure_stage"}
        if raw.get("severity") not in SEVERITIES or unknown:
            raise SystemExit(f"dead_letter_severity[{i}]: needs `severity` P1, P2 or P3 and only error_code, "
                             f"task_type, failure_stage (got {sorted(raw)})")
        rules.append(SeverityRule(severity=raw["severity"], error_code=raw.get("error_code"),
                                  task_type=raw.get("task_type"), failure_stage=raw.get("failure_stage")))
    alerts_on = bool(settings.alert_url or settings.alert_webhook_url)  # without a signing key the start is refused
    return TerminalRules(severity_rules=tuple(rules), alert_window_s=settings.alert_window_s if alerts_on else None)


def build_task_engine(settings: Settings, engine: AsyncEngine, types: TaskTypes, services: Any, *,
                      session: aiohttp.ClientSession, run_worker: bool,
                      queues: Mapping[str, int] | None = None) -> TaskEngine:
    queues = dict(queues or settings.task_queues)
    limits = {q: QueueLimits(max_depth=settings.task_queue_max_depth, max_per_key=settings.task_user_max_queued,
                             low_priority_watermark=settings.task_low_priority_watermark)
              for q in {*settings.task_queues, *queues, *(t.queue for t in map(types.get, types.names()) if t)}}
    rules = terminal_rules(settings)
    retry = RetryPolicy(max_attempts=settings.task_max_attempts)
    wakeups = Wakeups()
    guard = AddressGuard(settings.callback_url_allow)
    service = TaskService(engine=engine, types=types, queues=limits, wakeups=wakeups, guard=guard,
                          callbacks_enabled=settings.callback_signing_key is not None, rules=rules,
                          default_retry=retry)
    worker = sender = None
    if run_worker:
        config = WorkerConfig(queues=queues, lease_s=settings.task_lease_s, heartbeat_s=settings.task_heartbeat_s,
                              poll_s=settings.task_poll_s, reap_s=settings.task_reap_s, grace_s=settings.task_grace_s,
                              rules=rules, default_retry=retry, running_per_key=settings.task_user_max_running)
        # On PostgreSQL the worker has its own pool without pre-ping: its loops retry a failed transaction anyway,
        # and a claim or a write saves a round trip. (SQLite keeps one engine: its write lane is per engine.)
        worker_engine = engine if settings.is_sqlite else create_engine(settings.database_url, pre_ping=False)
        worker = Worker(worker_engine, types, services, config, wakeups=wakeups, database_url=settings.database_url)
        policy = CallbackPolicy(signing_key=settings.callback_signing_key, max_attempts=settings.callback_max_attempts)
        sender = CallbackSender(engine, session, policy, guard=guard, view=lambda row: task_view(row, with_result=True))
    return TaskEngine(service=service, worker=worker, sender=sender)
