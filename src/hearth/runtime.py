"""The process's long-lived parts, built at start and torn down at stop, in dependency order.

``Runtime`` is what routers reach through ``request.app.state.runtime``: the database engine,
the registry snapshot (inside the gateway), the state backend, the request-log writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.alerting.checks import AlertChecks
from hearth.alerting.config import AlertConfig, alert_config, check_alert_url
from hearth.alerting.sender import AlertSender
from hearth.batches.batch_store import BatchStore
from hearth.batches.batch_task import BatchTasks
from hearth.batches.executor import ExecutorLimits
from hearth.batches.file_store import FileStore
from hearth.batches.service import BatchService
from hearth.capabilities.address_guard import AddressGuard
from hearth.capabilities.chat_stream import ChatRuns
from hearth.capabilities.sources import SourceLimits
from hearth.documents.blob_factory import create_blob_store
from hearth.documents.install import install_pipeline
from hearth.documents.jobs import DocumentJobs
from hearth.documents.local_blobs import LocalBlobStore
from hearth.documents.pipeline_tasks import DocumentTasks
from hearth.documents.service import DocumentLimits, DocumentService
from hearth.errors import HearthError
from hearth.gateway.budget_balances import sweep_expired
from hearth.gateway.budget_ledger import BudgetLedger
from hearth.gateway.endpoint_admission import cooldown_key
from hearth.gateway.service import Gateway
from hearth.gateway.state_recovery import StateRecovery
from hearth.images.service import ImageService
from hearth.images.task import ImageTasks
from hearth.images.urls import ImageUrls
from hearth.images.urls import derive_key as derive_image_url_key
from hearth.mcp.audit import McpAuditWriter
from hearth.mcp.gateway import McpAdmission, McpGateway
from hearth.mcp.server_store import apply_mcp_servers
from hearth.observability import alerts
from hearth.observability.logging import get_logger
from hearth.observability.request_log import RequestLogWriter
from hearth.observability.tracing import start_tracing, stop_tracing
from hearth.prompts.catalog import PromptCatalog
from hearth.providers.anthropic import AnthropicProvider
from hearth.providers.base import Provider
from hearth.providers.http1_client import Http1Pool
from hearth.providers.http_client import create_session
from hearth.providers.openai_compat import OpenAICompatProvider
from hearth.providers.simulated import SimulatedProvider
from hearth.registry.config import RegistrySpec
from hearth.registry.key_vault import KeyVault, load_master_key
from hearth.registry.serviceable import STRICT_HINT, refuse_unless_serviceable, serviceability_problems
from hearth.registry.snapshot import Endpoint, Registry
from hearth.registry.store import (
    ApplyReport,
    apply_registry,
    current_version,
    load_registry,
    set_endpoint_enabled,
)
from hearth.responses.store import pending_writes
from hearth.settings import Settings, read_config_file
from hearth.shutdown import Shutdown
from hearth.state.base import StateBackend, StateUnavailable
from hearth.state.factory import MemoryStateClaim, create_state, refuse_memory_with_workers
from hearth.store.db import create_engine, migrate
from hearth.tasks.capability_tasks import CapabilityServices, register_capability_tasks
from hearth.tasks.engine import TaskEngine, build_task_engine
from hearth.tasks.fail_task import register_fail_task
from hearth.tasks.http_call import register_http_tasks
from hearth.tasks.types import TaskTypes
from hearth.usage.setup import UsageEvents, build_usage_events, check_usage_settings
from hearth.workflows.definition_store import DefinitionStore
from hearth.workflows.definitions import WorkflowDefinition
from hearth.workflows.file_apply import apply_workflows, check_workflows
from hearth.workflows.review_escalations import build_sender, checked_escalation_url
from hearth.workflows.reviews import ReviewService
from hearth.workflows.run_wakeups import RunWaker
from hearth.workflows.runs import RunService
from hearth.workflows.scheduler import Scheduler
from hearth.workflows.schedules import ScheduleService

log = get_logger("hearth.runtime")


@dataclass
class Runtime:
    settings: Settings
    engine: AsyncEngine
    vault: KeyVault
    state: StateBackend
    session: aiohttp.ClientSession  # everything but model calls: callbacks, webhooks, file_url, MCP, …
    upstreams: Http1Pool  # model calls (providers/http1_client.py)
    log_writer: RequestLogWriter
    gateway: Gateway
    ledger: BudgetLedger
    recovery: StateRecovery
    prompts: PromptCatalog
    tasks: TaskEngine
    schedules: ScheduleService
    reviews: ReviewService
    workflows: DefinitionStore
    runs: RunService
    documents: DocumentService
    document_jobs: DocumentJobs
    document_tasks: DocumentTasks
    shutdown: Shutdown  # when shutdown began, and its phases (readiness, open streams and the worker read it)
    scheduler: Scheduler | None = None  # None: this process does not run the scheduler (HEARTH_SCHEDULER_ENABLED)
    run_waker: RunWaker | None = None  # with the scheduler: runs move on as soon as this process's tasks end
    alerting: AlertConfig | None = None  # None: no alert URL, nothing is raised
    usage_events: UsageEvents | None = None  # None: no usage-event sink configured (no outbox row is written)
    mcp: McpGateway | None = None  # the MCP gateway (docs/mcp.md): /mcp
    chat_runs: ChatRuns = field(default_factory=ChatRuns)
    images: ImageService | None = None  # the images door and the image_generate_async task (docs/images.md)
    started_at: float = field(default_factory=time.time)
    files: FileStore | None = None  # the OpenAI Files API's store (docs/batches.md)
    batches: BatchService | None = None  # the Batch API's service
    _claim: MemoryStateClaim | None = None
    _tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    async def reload_registry(self) -> None:
        """Swap in a fresh snapshot; endpoints re-enabled since the last one lose their cooldowns.

        The shared cooldown goes too: a 401 puts one of an hour in the state backend, and an endpoint
        re-enabled elsewhere (a new key through ``hearth apply``, an operator's enable) must serve at once.
        """
        old = self.gateway.registry
        new = await load_registry(self.engine, self.vault)
        re_enabled = [ep for name, ep in new.endpoints.items()
                      if ep.enabled and (before := old.endpoints.get(name)) is not None and not before.enabled]
        for name, ep in new.endpoints.items():
            before = old.endpoints.get(name)
            if ep.enabled and (before is None or not before.enabled):
                self.gateway.health.forget(name)
        await _clear_shared_cooldowns(self.state, re_enabled)
        self.gateway.registry = new

    async def _watch_registry(self) -> None:
        """Pick up changes made by other processes (admin API elsewhere, ``hearth apply``)."""
        while True:
            await asyncio.sleep(self.settings.registry_refresh_s)
            try:
                if await current_version(self.engine) != self.gateway.registry.version:
                    await self.reload_registry()
                    log.info("registry_reloaded", version=self.gateway.registry.version)
            except Exception as exc:
                log.warning("registry_refresh_failed", error=type(exc).__name__)

    async def _watch_prompts(self) -> None:
        """Serve prompt and role changes made by other processes within ``prompt_refresh_s``."""
        while True:
            await asyncio.sleep(self.settings.prompt_refresh_s)
            try:
                if await self.prompts.refresh():
                    log.info("prompts_reloaded", version=self.prompts.snapshot.version)
            except Exception as exc:
                log.warning("prompts_refresh_failed", error=type(exc).__name__)

    async def disable_after_auth_failure(self, ep: Endpoint, status: int) -> None:
        """Disable ``ep`` as the gateway's decision: held through applies and restarts until an operator
        enables it or the registry file brings a new key (:mod:`hearth.registry.endpoint_holds`)."""
        reason = f"upstream answered {status}: credentials rejected"
        await set_endpoint_enabled(self.engine, ep.name, False, reason, by="gateway")
        await self.reload_registry()
        await self.alert_endpoint_disabled(ep.name, by="gateway", reason=reason)

    async def alert_endpoint_disabled(self, name: str, *, by: str, reason: str | None) -> None:
        """Raise ``endpoint_disabled`` (P1 when the gateway disabled it, P3 for an operator) if alerts are on;
        a failure to record it is logged, never raised into the disabling path."""
        if self.alerting is None:
            return
        alert = alerts.Alert("endpoint_disabled", name, "P1" if by == "gateway" else "P3",
                             {"endpoint": name, "disabled_by": by, "reason": reason})
        try:
            await alerts.record_now(self.engine, alert, now=time.time(), window_s=self.alerting.window_s)
        except Exception as exc:
            log.warning("alert_not_recorded", kind="endpoint_disabled", endpoint=name, error=type(exc).__name__)

    async def _sweep_reservations(self) -> None:
        """Close, as spent, reservations whose call died (no settlement long after any call can last)."""
        s = self.settings
        older_than = s.request_timeout_s + 2 * s.lease_ttl_s + 60
        while True:
            await asyncio.sleep(min(60.0, s.lease_ttl_s))
            try:
                closed = await sweep_expired(self.engine, older_than)
                if closed:
                    log.warning("budget_reservations_expired", reservations=closed)
            except Exception as exc:
                log.warning("budget_sweep_failed", error=type(exc).__name__)

    async def stop(self) -> None:
        """The shutdown's last phases (:mod:`hearth.shutdown`): by now the server has stopped accepting and
        waited for its connections (or shutdown begins here: ``hearth worker``, tests). Running tasks get what
        is left of ``task_grace_s`` and the rest are handed back; then writers flush and backends close."""
        shutdown = self.shutdown
        shutdown.begin()
        shutdown.end_answers()  # the server has stopped waiting for its connections: no stream goes on
        if self.scheduler is not None:  # no new occurrence fires while the rest shuts down
            await self.scheduler.stop()
        if self.run_waker is not None:
            await self.run_waker.stop()
        # running tasks finish (or are handed back) while the gateway still serves them
        await self.tasks.stop(grace_s=shutdown.left(shutdown.task_grace_s))
        await self.recovery.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await pending_writes(self.engine).drain()  # answered stored responses are written (docs/responses.md)
        await self.log_writer.stop()
        if self.mcp is not None:
            await self.mcp.close()
        if self.usage_events is not None:  # after the request log's last batch was handed to it
            await self.usage_events.stop()
        await self.ledger.stop()
        await self.session.close()
        await self.upstreams.aclose()
        await self.state.close()
        if self._claim is not None:
            await self._claim.release()
        await self.engine.dispose()
        shutdown.finished()
        stop_tracing()  # last: the spans of everything above are exported


def task_types(settings: Settings) -> TaskTypes:
    """The capability tasks, ``http_post`` and ``workflow.fail``, plus those registered by each of
    ``task_modules`` (``module:function``)."""
    types = TaskTypes()
    register_capability_tasks(types)
    register_http_tasks(types, guard=AddressGuard(settings.callback_url_allow),
                        signing_key=settings.callback_signing_key)
    register_fail_task(types)
    for spec in settings.task_modules:
        module, _, function = spec.partition(":")
        try:
            register = getattr(importlib.import_module(module), function or "register")
        except (ImportError, AttributeError) as exc:
            raise SystemExit(f"task_modules: cannot load {spec!r} ({type(exc).__name__}: {exc})") from exc
        register(types)
    return types


def source_limits(settings: Settings) -> SourceLimits:
    return SourceLimits(file_root=settings.file_root, max_bytes=settings.file_max_bytes,
                        timeout_s=settings.file_url_timeout_s, url_allow=tuple(settings.file_url_allow))


def check_shutdown_bound(settings: Settings) -> None:
    """The total bound must leave room for the graces and the flushes after them."""
    graces = max(settings.shutdown_stream_grace_s, settings.task_grace_s)
    if settings.shutdown_timeout_s < graces + 10:
        raise SystemExit(f"shutdown_timeout_s ({settings.shutdown_timeout_s:g} s) must be at least the larger grace "
                         f"({graces:g} s: shutdown_stream_grace_s, task_grace_s) plus 10 s for the flushes after it")


async def start_runtime(settings: Settings) -> Runtime:
    refuse_memory_with_workers(settings)
    check_shutdown_bound(settings)
    start_tracing(settings)  # if configured (a `hearth worker` process: its tasks' spans); else nothing at all
    engine = create_engine(settings.database_url)
    await migrate(engine)
    claim: MemoryStateClaim | None = None
    if settings.state_backend == "memory":
        claim = MemoryStateClaim()
        await claim.acquire(settings, engine)
    report: ApplyReport | None = None
    try:
        vault = KeyVault(load_master_key(settings.master_key, settings.master_key_file))
        types = task_types(settings)
        blobs = create_blob_store(settings, engine)
        documents = DocumentService(engine, blobs, limits=DocumentLimits(max_bytes=settings.document_max_bytes,
                                                                         max_pages=settings.document_max_pages),
                                    sources=source_limits(settings))
        document_tasks = DocumentTasks(engine, documents, max_pages=settings.document_max_pages)
        document_tasks.register(types)
        images = ImageService(blobs, ImageUrls(derive_image_url_key(load_master_key(
            settings.master_key, settings.master_key_file)), settings.image_url_ttl_s))
        ImageTasks(images).register(types)
        files = FileStore(engine, blobs, max_bytes=settings.batch_file_max_bytes)
        batch_limits = ExecutorLimits(concurrency=settings.batch_concurrency)
        BatchTasks(engine, files, BatchStore(engine), batch_limits).register(types)
        definitions = DefinitionStore(engine)
        outbound = AddressGuard(settings.callback_url_allow)
        escalation_url = await checked_escalation_url(settings, outbound)
        await check_alert_url(settings, outbound)
        await check_usage_settings(settings, outbound)
        if settings.config is not None:
            spec = RegistrySpec.model_validate(read_config_file(settings.config))
            flows = await _file_workflows(settings, spec, types, definitions)  # checked before anything is written
            report = await apply_registry(engine, spec, vault,
                                          verify=refuse_unless_serviceable if settings.registry_strict else None)
            _log_apply(settings, report)
            mcp_report = await apply_mcp_servers(engine, spec.mcp_servers, vault)
            if mcp_report.changed:
                log.info("mcp_servers_applied", **mcp_report.as_dict())
            if flows:
                applied = await apply_workflows(definitions, flows)
                log.info("workflows_applied", created=list(applied.created), unchanged=list(applied.unchanged))
        registry = await load_registry(engine, vault)
        _check_serviceable(settings, registry)
    except BaseException as exc:  # a refused start (bad config, unreadable keys) leaves no lock or connection behind
        if isinstance(exc, SystemExit):  # said first, in one line, not only at the end of a traceback
            log.error("start_refused", reason=str(exc))
        if claim is not None:
            await claim.release()
        await engine.dispose()
        raise
    state = create_state(settings)
    if report is not None:  # a new key given at start: the previous process's shared 401 cooldown goes too
        await _clear_shared_cooldowns(state, [registry.endpoints[label.split(":", 1)[1]]
                                              for label in report.re_enabled])
    session = create_session()
    upstreams = Http1Pool()
    providers: dict[str, Provider] = {
        "openai": OpenAICompatProvider(upstreams, settings.max_sse_event_bytes,
                                       connect_timeout_s=settings.connect_timeout_s),
        "anthropic": AnthropicProvider(upstreams, settings.max_sse_event_bytes,
                                       connect_timeout_s=settings.connect_timeout_s),
        "simulated": SimulatedProvider(),
    }
    writer = RequestLogWriter(engine, settings.request_log_queue, settings.request_log_batch,
                              settings.request_log_flush_s)
    writer.rollup_retention_s = (settings.rollup_minute_retention_s, settings.rollup_hour_retention_s)
    ledger = BudgetLedger(engine, state, commit_timeout_s=settings.ledger_commit_timeout_s)
    gateway_box: list[Gateway] = []
    recovery = StateRecovery(state, engine, lambda: gateway_box[0].registry if gateway_box else registry,
                             reservation_ttl_s=settings.lease_ttl_s,
                             open_within_s=settings.request_timeout_s + 2 * settings.lease_ttl_s + 60,
                             reservation_window_s=settings.reservation_window_s)
    try:
        await state.sync_clock()
        await recovery.ensure()  # adopt the backend's epoch, or rebuild the counters from the ledger
    except StateUnavailable:
        log.warning("state_backend_unavailable_at_start", hint="budgeted calls get 503 until it answers")
    gateway = Gateway(settings, state, providers, log_writer=writer, registry=registry, ledger=ledger,
                      recovery=recovery)
    gateway_box.append(gateway)
    await install_pipeline(engine, definitions, types)  # after every check: a refused start writes nothing
    prompts = PromptCatalog(engine)
    await prompts.load()
    services = CapabilityServices(gateway=gateway, prompts=prompts, session=session, limits=source_limits(settings),
                                  offline_fallback=settings.offline_fallback)
    tasks = build_task_engine(settings, engine, types, services, session=session, run_worker=settings.embedded_worker)
    reviews = ReviewService(engine, escalation_url=escalation_url)
    schedule_service = ScheduleService(engine, tasks.service, reviews)
    runs = RunService(engine, definitions, tasks.service, reviews)
    alerting = alert_config(settings)
    passes = [schedule_service.tick, reviews.expire_due, runs.advance_all]
    if alerting is not None:
        passes.append(AlertChecks(engine, alerting, registry=lambda: gateway.registry, health=gateway.health,
                                  state=state, reviews=reviews).run_pass)
    scheduler = (Scheduler(tuple(passes), interval_s=settings.scheduler_interval_s)
                 if settings.scheduler_enabled else None)
    documents.session = session
    document_jobs = DocumentJobs(engine, documents, runs, prompts)
    rt = Runtime(settings=settings, engine=engine, vault=vault, state=state, session=session, upstreams=upstreams,
                 log_writer=writer, gateway=gateway, ledger=ledger, recovery=recovery, prompts=prompts, tasks=tasks,
                 schedules=schedule_service, reviews=reviews, workflows=definitions, runs=runs, documents=documents,
                 document_jobs=document_jobs, document_tasks=document_tasks,
                 scheduler=scheduler, alerting=alerting, _claim=claim,
                 shutdown=Shutdown(stream_grace_s=settings.shutdown_stream_grace_s, task_grace_s=settings.task_grace_s,
                                   timeout_s=settings.shutdown_timeout_s))
    rt.images = images
    if tasks.worker is not None:
        rt.shutdown.on_begin(tasks.worker.stop_claiming)
    rt.files = files
    rt.batches = BatchService(engine, files, tasks.service, max_lines=settings.batch_max_lines)
    rt.usage_events = build_usage_events(settings, engine, session, guard=outbound,
                                         provider_of=lambda name: _provider_of(gateway, name))
    gateway.on_auth_failure = rt.disable_after_auth_failure
    rt.mcp = McpGateway(engine, vault, McpAdmission(state, ledger, recovery, gateway.limits),
                        audit=McpAuditWriter(engine, flush_s=settings.request_log_flush_s), http=session)
    await rt.mcp.start(registry.version)
    writer.start()
    if rt.usage_events is not None:
        rt.usage_events.start(writer)
    ledger.start()
    recovery.start_watching()
    rt._tasks.append(asyncio.create_task(rt._watch_registry(), name="registry-watch"))
    rt._tasks.append(asyncio.create_task(rt._sweep_reservations(), name="budget-sweeper"))
    rt._tasks.append(asyncio.create_task(rt._watch_prompts(), name="prompts-watch"))
    if isinstance(blobs, LocalBlobStore):
        rt._tasks.append(asyncio.create_task(_sweep_document_temp(blobs), name="document-temp-sweep"))
    escalations = build_sender(settings, engine, session, guard=outbound)
    if escalations is not None:
        rt._tasks.append(asyncio.create_task(escalations.run(), name="review-escalations"))
    if alerting is not None:
        alert_sender = AlertSender(engine, session, alerting, guard=outbound)
        rt._tasks.append(asyncio.create_task(alert_sender.run(), name="alert-sender"))
    await tasks.start()
    if scheduler is not None:
        rt.run_waker = RunWaker(runs)
        tasks.service.wakeups.on_ended(rt.run_waker.tasks_ended)
        rt.run_waker.start()
        scheduler.start()
    return rt


async def _file_workflows(settings: Settings, spec: RegistrySpec, types: TaskTypes,
                          definitions: DefinitionStore) -> list[WorkflowDefinition]:
    """The file's ``workflows:`` checked against this process's task types; a bad one refuses the start."""
    if not spec.workflows:
        return []
    try:
        return check_workflows(spec.workflows, known_task_types=types.names(), registered=await definitions.names())
    except HearthError as exc:
        raise SystemExit(f"{settings.config}: {exc.message}") from None


def _provider_of(gateway: Gateway, endpoint: str) -> str | None:
    ep = gateway.registry.endpoints.get(endpoint)
    return ep.provider if ep is not None else None


async def _sweep_document_temp(blobs: LocalBlobStore) -> None:
    """Once at start: temporary files of writers that died before publishing (older than an hour)."""
    try:
        removed = await asyncio.to_thread(blobs.sweep_temporary)
    except OSError as exc:
        log.warning("document_temp_sweep_failed", error=type(exc).__name__, directory=str(blobs.root))
        return
    if removed:
        log.info("document_temp_files_removed", files=removed, directory=str(blobs.root))


def _log_apply(settings: Settings, report: ApplyReport) -> None:
    log.info("registry_applied", file=str(settings.config), **report.as_dict())
    for kept in report.kept_disabled:
        log.warning("endpoint_kept_disabled", endpoint=kept.name.split(":", 1)[1], reason=kept.reason,
                    disabled_by=kept.disabled_by,
                    hint="enable it (POST /api/v1/admin/endpoints/{name}/enable) or give it a new api_key")


def _check_serviceable(settings: Settings, registry: Registry) -> None:
    """Seed 000's start-up check: a warning by default, a refused start in strict mode."""
    if settings.registry_strict:
        refuse_unless_serviceable(registry)
        return
    problems = serviceability_problems(registry)
    if problems:
        log.warning("registry_not_serviceable", problems=problems, hint=STRICT_HINT)


async def _clear_shared_cooldowns(state: StateBackend, endpoints: list[Endpoint]) -> None:
    for ep in endpoints:
        try:
            await state.clear_cooldown(cooldown_key(ep))
        except StateUnavailable:
            log.warning("cooldown_not_cleared", endpoint=ep.name, hint="the endpoint serves again when it ends")
