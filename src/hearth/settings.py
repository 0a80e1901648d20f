"""Process settings: environment variables (``HEARTH_*``) over the YAML file's ``server:`` section.

Settings describe *how this process runs* (where it listens, which database and state backend it
uses, timeouts). What it serves (providers, endpoints, models, callers) is the registry, declared
in the same YAML file and applied to the database; see :mod:`hearth.registry.config`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from hearth.yaml_documents import load_yaml


class Settings(BaseSettings):
    # ``forbid``: a misspelt key in the file's ``server:`` section is refused at start, never ignored
    # (environment variables are matched by name, so an unknown HEARTH_* variable is simply not read).
    model_config = SettingsConfigDict(env_prefix="HEARTH_", extra="forbid")

    config: Path | None = Field(default=None, description="YAML file with `server:` settings and the registry")
    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = Field(default=1, ge=1, description="uvicorn worker processes (needs the redis state backend)")
    database_url: str = "sqlite+aiosqlite:///var/hearth.db"
    state_backend: Literal["memory", "redis"] = "memory"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "hearth:"
    admin_token: str | None = None
    internal_token: str | None = Field(default=None, description="shared-token mode: X-Internal-Token")
    internal_token_caller: str = Field(default="internal", description="caller used by shared-token requests "
                                       "that do not name one in X-Hearth-Caller")
    require_signatures: bool = Field(default=False, description="every caller must sign (else per caller)")
    signature_key: str | None = Field(default=None, description="global HMAC key for callers without their own")
    signature_window_s: float = Field(default=300.0, gt=0, description="allowed clock skew of X-Timestamp")
    trust_forwarded_for: bool = Field(default=False, description="take the client IP from X-Forwarded-For")
    master_key: str | None = Field(default=None, description="base64 or hex of 32 bytes; AES-GCM key for provider keys")
    master_key_file: Path = Path("var/master.key")
    log_level: str = "info"
    access_log: bool = False

    request_timeout_s: float = Field(default=120.0, gt=0, description="absolute deadline of one logical call")
    max_attempts: int = Field(default=3, ge=1, le=10, description="endpoints tried per call")
    limit_wait_s: float = Field(default=3.0, ge=0, description="max wait for a caller/tenant/user concurrency slot")
    admission_wait_s: float = Field(default=10.0, ge=0, description="max wait for a free endpoint slot")
    stream_idle_timeout_s: float = Field(default=60.0, gt=0)
    connect_timeout_s: float = Field(default=3.0, gt=0, description="longest wait for an upstream to accept a "
                                     "connection; a connect failure fails over to the next endpoint at once")
    lease_ttl_s: float = Field(default=30.0, gt=0, description="TTL of a call's slots and budget reservation in "
                               "the state backend; renewed every third of it while the call lives, so a "
                               "dead process frees them within this time")
    state_timeout_s: float = Field(default=2.0, gt=0, description="how long a state-backend command may take; "
                                   "an admission script that runs later than this refuses")
    default_max_tokens: int = Field(default=1024, ge=1, le=1_000_000, description="the output limit of a chat "
                                    "call that names none: what budgets and token limits reserve for its output, "
                                    "and, when a budget applies, the `max_tokens` sent upstream so the "
                                    "reservation bounds the bill")
    budget_image_tokens: int = Field(default=2_000, ge=1, description="what a strict budget reserves for one "
                                     "image part of a prompt (an upper bound of what providers bill for it)")
    ledger_commit_timeout_s: float = Field(default=5.0, gt=0, description="longest wait for a budget "
                                           "reservation's commit; one not seen by then may still land, so it "
                                           "stays spent (the call gets 503)")
    reservation_window_s: float = Field(default=0.25, gt=0, description="after a state-backend loss the rebuild "
                                        "waits this long before reading the ledger; a reservation committed "
                                        "within this time of its admission proceeds at once, a later one only "
                                        "after checking the backend's epoch (one more round trip)")
    stream_send_timeout_s: float = Field(default=30.0, gt=0, description="a stream whose client has not "
                                         "taken the next frame within this time (the server's write buffer "
                                         "stayed full) is ended as 499 client_too_slow and its slots freed")
    sse_keepalive_s: float = Field(default=15.0, ge=0, description="a stream still waiting for its first event "
                                   "after this long starts (200) and gets a `: keep-alive` comment every this "
                                   "many seconds until it arrives; a failure before that is a JSON error, after "
                                   "it an SSE error event; 0 disables")
    quota_time_zone: str = Field(default="UTC", description="time zone of the quota day: quota groups' "
                                 "`daily_tokens` reset at midnight there (an IANA name, e.g. Asia/Shanghai)")
    breaker_failures: int = Field(default=3, ge=1, description="consecutive failures that open a circuit")
    breaker_open_s: float = Field(default=30.0, gt=0, description="how long an open circuit stays open")
    max_request_bytes: int = 8 * 1024 * 1024
    max_sse_event_bytes: int = 1024 * 1024

    request_log_queue: int = Field(default=20_000, ge=1)
    request_log_batch: int = Field(default=500, ge=1)
    request_log_flush_s: float = Field(default=0.5, gt=0)

    registry_refresh_s: float = Field(default=5.0, gt=0, description="how often to pick up other processes' changes")
    registry_strict: bool = Field(default=False, description="refuse to start unless the registry has an enabled "
                                  "provider and an enabled model with an enabled endpoint (else a warning)")

    prompt_refresh_s: float = Field(default=0.5, gt=0, description="how often to pick up prompt and role changes "
                                    "made by other processes (an activation is served everywhere within this)")
    file_root: Path | None = Field(default=None, description="the directory capability inputs' `file_id` is "
                                   "resolved in (unset: `file_id` is refused)")
    file_url_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="CIDR networks or host names `file_url` may fetch from although "
        "they are private, loopback or link-local (comma-separated in the environment)")
    file_max_bytes: int = Field(default=5 * 1024 * 1024, ge=1, description="largest capability input: text, "
                                "file or fetched URL")
    file_url_timeout_s: float = Field(default=10.0, gt=0, description="the whole `file_url` fetch, redirects included")
    chat_keep_s: float = Field(default=600.0, gt=0, description="how long a capability chat's answer and events are "
                               "kept for duplicates of its `request_id` and for resuming with Last-Event-ID")
    sse_heartbeat_s: float = Field(default=15.0, gt=0, description="capability chat streams send a `heartbeat` "
                                   "event after this much silence")
    offline_fallback: bool = Field(default=True, description="answer summarize and bill extraction with the local "
                                   "extractive engine (`degraded: true`) when no model endpoint can serve")

    # the task engine (docs/tasks.md)
    task_queues: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=lambda: {"ai.default": 32, "ai.summary": 16, "ai.bill_extract": 8, "documents.cpu": 2},
        description="queue name → a worker's concurrency on it (`ai.default=32,ai.summary=16` in the environment)")
    task_user_max_running: Annotated[dict[str, int], NoDecode] = Field(
        default_factory=dict, description="queue name → most tasks of one user (else tenant, else caller) running "
        "at once in it, e.g. `ai.bill_extract=2` (unset: no cap; fairness comes from round-robin claims)")
    embedded_worker: bool = Field(default=True, description="`hearth serve` also runs a worker on every queue of "
                                  "`task_queues` (turn off when separate `hearth worker` processes run them)")
    task_modules: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="extra task types: `package.module:function` callables given the "
        "process's TaskTypes to register into (comma-separated in the environment)")
    task_lease_s: float = Field(default=9.0, gt=0, description="how long a claimed task stays a worker's without a "
                                "heartbeat; a dead worker's tasks run again after at most this plus `task_reap_s`")
    task_heartbeat_s: float = Field(default=3.0, gt=0, description="how often a worker renews its leases (at most a "
                                    "third of `task_lease_s`, checked at start)")
    task_poll_s: float = Field(default=1.0, gt=0, description="longest wait for new work without a notification "
                               "(PostgreSQL LISTEN wakes workers at once; SQLite and delayed retries rely on this)")
    task_reap_s: float = Field(default=1.0, gt=0, description="how often a worker looks for expired leases and due "
                               "delayed tasks")
    task_grace_s: float = Field(default=10.0, ge=0, description="on shutdown, how long running tasks may finish "
                                "before they are handed back")
    scheduler_enabled: bool = Field(default=True, description="this process decides and fires due schedule "
                                    "occurrences (any number of processes may: each occurrence fires once)")
    scheduler_interval_s: float = Field(default=1.0, gt=0, le=60, description="how often the scheduler looks for "
                                        "due occurrences (an occurrence fires at most this late, plus its jitter)")
    task_max_attempts: int = Field(default=3, ge=1, le=100, description="attempts of a task type without its own "
                                   "retry policy")
    task_queue_max_depth: int = Field(default=100_000, ge=1, description="queued + waiting tasks a queue holds; "
                                      "beyond it submissions get 429 `queue_full`")
    task_user_max_queued: int = Field(default=10_000, ge=1, description="queued + waiting tasks per queue of one "
                                      "user (else tenant, else caller)")
    task_low_priority_watermark: float = Field(default=0.8, gt=0, le=1, description="share of a queue's depth "
                                               "above which tasks with priority below 0 are refused")
    callback_signing_key: str | None = Field(default=None, repr=False, description="HMAC key signing task callbacks "
                                             "(docs/tasks.md); unset: `callback_url` is refused")
    callback_url_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="CIDR networks or host names callbacks may go to although private")
    callback_max_attempts: int = Field(default=8, ge=1, le=50, description="deliveries of one callback before it "
                                       "is given up (listed, redeliverable)")
    alert_webhook_url: str | None = Field(default=None, description="a dead letter opening is POSTed here, signed "
                                          "like a callback")
    review_escalation_url: str | None = Field(
        default=None, description="a review item that expires undecided is POSTed here, signed with "
        "`callback_signing_key` (required), address-guarded and retried like a callback (docs/workflows.md)")
    dead_letter_severity: list[dict[str, str]] = Field(
        default_factory=list, description="rules `{severity, error_code?, task_type?, failure_stage?}`, first "
        "match wins; default P1 credentials/bugs/lost workers, P2 upstream down, P3 bad input")

    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="browser origins allowed to call Hearth (CORS), comma-separated "
        "in the environment, e.g. `https://console.example.com`; `*` allows any; empty: no CORS headers")

    # documents (docs/documents.md)
    document_store: Literal["local", "database"] = Field(
        default="local", description="where uploaded documents' bytes live: `local` (files under `document_dir`, "
        "one host or a shared file system) or `database` (chunked rows in the main database: every process on "
        "any machine reads the same bytes, no extra service)")
    document_dir: Path = Field(default=Path("var/documents"), description="the `local` document store's "
                               "directory (object keys below it, never paths chosen by callers)")
    document_max_bytes: int = Field(default=50 * 1024 * 1024, ge=1, description="largest document accepted "
                                    "(upload, `file_id` or `file_url`); larger is 413 `document_too_large`")
    document_max_pages: int = Field(default=2000, ge=1, description="most pages a PDF document may have; the "
                                    "parser refuses a longer one")
    shutdown_stream_grace_s: float = Field(default=20.0, ge=0, description="on SIGTERM, how long in-flight "
                                           "answers (streams, calls) may finish; past it a stream ends with an "
                                           "explicit `service_shutting_down` error event (docs/deployment.md)")
    shutdown_timeout_s: float = Field(default=60.0, gt=0, description="the whole shutdown's bound: the process "
                                      "exits within this of SIGTERM (at least the larger grace plus 10 s, checked "
                                      "at start); give an orchestrator's kill timeout a few seconds more")

    # metrics (docs/operations.md, "Metrics")
    metrics_token: str | None = Field(default=None, repr=False, description="bearer token `GET /metrics` wants "
                                      "(`Authorization: Bearer ...`); unset: the route is open (keep it off the "
                                      "public network)")
    metrics_cache_s: float = Field(default=5.0, gt=0, description="the gauges read from the database and the state "
                                   "backend are recomputed at most this often, whatever the scrape rate")
    metrics_dir: Path = Field(default=Path("var/metrics"), description="with `workers` > 1: the directory the "
                              "worker processes' metric files go to (emptied at start; `PROMETHEUS_MULTIPROC_DIR`, "
                              "when set, wins)")

    # alerts (docs/operations.md, Alerts)
    alert_url: str | None = Field(default=None, description="alerts (endpoint disabled, breaker open, budget "
                                  "thresholds, dead letters, queue backlog, review expiry) are POSTed here, signed "
                                  "with `callback_signing_key` (required) and address-guarded like callbacks; "
                                  "unset: `alert_webhook_url`, else no alerts")
    alert_window_s: float = Field(default=3600.0, gt=0, description="one alert per kind and subject within this "
                                  "window; repeats are counted and reported with the next one")
    alert_check_interval_s: float = Field(default=30.0, gt=0, description="how often the scheduler checks the "
                                          "polled alert conditions (breakers, budgets, queues, reviews)")
    alert_breaker_open_minutes: float = Field(default=5.0, gt=0, description="an endpoint's circuit that has "
                                              "not closed for this long raises `breaker_open`")
    alert_budget_thresholds: Annotated[list[float], NoDecode] = Field(
        default_factory=lambda: [0.8, 1.0], description="shares of a budget's limit whose crossing raises "
        "`budget_threshold`, comma-separated in the environment")
    alert_queue_age_s: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict, description="per queue, the age (s) of its oldest due task that raises "
        "`queue_backlog`, e.g. `default=300,reports=60`; a queue not listed is not checked")
    alert_review_lead_s: float = Field(default=900.0, ge=0, description="open review items expiring within this "
                                       "raise `review_expiring` (per queue); expired ones raise `review_expired`")
    alert_max_attempts: int = Field(default=8, ge=1, le=50, description="deliveries of one alert before it is "
                                    "given up (kept, listed by GET /api/v1/admin/alerts)")

    @field_validator("alert_budget_thresholds", mode="before")
    @classmethod
    def _alert_thresholds(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [float(v) for v in value.split(",") if v.strip()]
        if isinstance(value, list) and any(not 0 < float(v) <= 10 for v in value):
            raise ValueError("budget thresholds are shares of the limit: above 0 (e.g. 0.8, 1.0)")
        return value

    @field_validator("alert_queue_age_s", mode="before")
    @classmethod
    def _alert_queue_ages(cls, value: Any) -> Any:
        if isinstance(value, str):
            pairs = [p.strip().partition("=") for p in value.split(",") if p.strip()]
            value = {name.strip(): float(age) for name, _, age in pairs}
        if isinstance(value, dict) and any(float(v) <= 0 for v in value.values()):
            raise ValueError("queue age thresholds are seconds above 0")
        return value

    # the web console (docs/console.md)
    console_session_s: float = Field(default=8 * 3600.0, gt=0, le=7 * 86400, description="a console sign-in "
                                     "lasts this long (the signed session cookie expires with it)")
    console_users: list[dict[str, str]] = Field(
        default_factory=list, description="console users besides the admin token: `{name, role, password_hash}`, "
        "role viewer | operator | admin; hash with `python -m hearth.console.passwords` (docs/console.md)")
    console_playground_caller: str | None = Field(
        default=None, description="the registry caller the console's chat playground runs as (its scenes, limits "
        "and budgets apply; the browser never holds its key); unset: the playground is off")
    console_secure_cookies: bool = Field(default=False, description="mark the console's cookies `Secure` even "
                                         "when Hearth itself is reached over plain HTTP (behind a TLS proxy)")

    # traces (docs/operations.md "Traces"): off unless an OTLP endpoint is configured; needs `pip install hearth[otel]`
    otel_endpoint: str | None = Field(default=None, description="OTLP/HTTP collector to send traces to, e.g. "
                                      "`http://collector:4318` (`/v1/traces` is added); unset: OTEL_EXPORTER_OTLP_"
                                      "[TRACES_]ENDPOINT if set, else tracing is off and costs nothing")
    otel_propagate_upstream: bool = Field(default=False, description="send a W3C `traceparent` of each attempt to "
                                          "the upstream provider (off: providers never see Hearth's trace ids)")

    # usage events (docs/operations.md, "Usage events"): every settled gateway call, through the outbox
    usage_webhook_url: str | None = Field(default=None, description="AIUsageRecorded events are POSTed here in "
                                          "batches, signed like callbacks, address-guarded (`callback_url_allow`)")
    usage_webhook_signing_key: str | None = Field(default=None, repr=False, description="HMAC key signing the "
                                                  "usage webhook (default: `callback_signing_key`; one is required)")
    usage_nats_url: str | None = Field(default=None, description="NATS server events are published to, e.g. "
                                       "`nats://127.0.0.1:4222`")
    usage_nats_subject: str = Field(default="hearth.ai.usage", min_length=1, description="NATS subject of the events")
    usage_nats_jetstream: bool = Field(default=False, description="publish through JetStream and wait for its "
                                       "acknowledgement (a stream must capture the subject; `Nats-Msg-Id` "
                                       "deduplicates); false: core NATS, confirmed by a flush")
    usage_amqp_url: str | None = Field(default=None, repr=False, description="RabbitMQ (AMQP 0-9-1) URL events "
                                       "are published to, e.g. `amqp://guest:guest@127.0.0.1:5672/`")
    usage_amqp_exchange: str = Field(default="", description="exchange of the events (must exist; empty: the "
                                     "default exchange, where the routing key names a queue)")
    usage_amqp_routing_key: str = Field(default="hearth.ai.usage", description="routing key of the events")
    usage_relay_batch: int = Field(default=100, ge=1, le=10_000, description="events one sink's relay sends per "
                                   "round")
    usage_relay_interval_s: float = Field(default=1.0, gt=0, le=60, description="how often each sink's relay "
                                          "looks for due events when idle")
    usage_relay_max_backoff_s: float = Field(default=60.0, gt=0, description="longest wait before an event a sink "
                                             "refused is tried again (exponential from `usage_relay_interval_s`)")
    usage_relay_timeout_s: float = Field(default=10.0, gt=0, description="bound of one delivery round to a sink")
    usage_outbox_queue: int = Field(default=20_000, ge=1, description="events held in memory before the outbox "
                                    "writes them (the oldest are dropped, and counted, beyond it)")
    usage_outbox_retention_s: float = Field(default=86_400.0, ge=0, description="how long delivered rows stay in "
                                            "the outbox before the relay deletes them")
    image_url_ttl_s: float = Field(default=3600.0, gt=0, le=30 * 86400, description="how long the signed URL of a "
                                   "generated image (`response_format: url`, docs/images.md) stays valid")
    rollup_minute_retention_s: float = Field(default=8 * 86_400.0, gt=0, description="how long per-minute request "
                                             "rollups are kept (windows under a day read them)")
    rollup_hour_retention_s: float = Field(default=400 * 86_400.0, gt=0, description="how long per-hour request "
                                           "rollups are kept (windows of a day and more read them)")

    # the gRPC door (docs/grpc.md): hearth.v1.AiService, health checking and reflection, in the same process
    grpc_port: int | None = Field(default=None, ge=0, le=65535, description="serve gRPC on this port too (`hearth "
                                  "serve`); unset: no gRPC server. `0` picks a free port (tests)")
    grpc_host: str | None = Field(default=None, description="gRPC listen address (default: `host`)")

    # the Batch API (docs/batches.md)
    batch_file_max_bytes: int = Field(default=100 * 1024 * 1024, ge=1, description="largest file `POST /v1/files` "
                                      "accepts; larger is 413 `file_too_large`")
    batch_max_lines: int = Field(default=50_000, ge=1, description="most requests one batch input file may hold; "
                                 "more fails the batch (`too_many_requests` in its `errors`)")
    batch_concurrency: int = Field(default=8, ge=1, le=1000, description="requests of one batch in flight at once "
                                   "(each also passes the caller's limits and budgets)")
    # the Responses API (docs/responses.md)
    responses_retention_s: float = Field(default=30 * 86_400.0, gt=0, description="how long a stored Responses API "
                                         "object (and the conversation `previous_response_id` continues) is kept")

    @field_validator("quota_time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {value!r} (an IANA name such as UTC or Asia/Shanghai)") from exc
        return value

    @field_validator("task_queues", "task_user_max_running", mode="before")
    @classmethod
    def _queue_map(cls, value: Any) -> Any:
        if isinstance(value, str):
            pairs = [p.strip().partition("=") for p in value.split(",") if p.strip()]
            return {name.strip(): int(n) if n.strip() else 1 for name, _, n in pairs}
        return value

    @field_validator("cors_origins", "file_url_allow", "callback_url_allow", "task_modules", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [origin.strip() for origin in value.split(",") if origin.strip()]
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the YAML file (passed as init kwargs), so operators can override a
        # checked-in config without editing it.
        return env_settings, init_settings

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")


def load_settings(**overrides: Any) -> Settings:
    """Build settings from env, then the YAML file named by ``HEARTH_CONFIG`` (its ``server:`` map)."""
    probe = Settings(**overrides)
    file_values: dict[str, Any] = {}
    if probe.config is not None:
        file_values = dict(read_config_file(probe.config).get("server") or {})
    file_values.update(overrides)
    return Settings(**file_values)


def read_config_file(path: Path) -> dict[str, Any]:
    """Parse the YAML config; a missing or malformed file is a startup error with the path in it."""
    try:
        data = load_yaml(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise SystemExit(f"config file not found: {path}") from exc
    except yaml.YAMLError as exc:
        raise SystemExit(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SystemExit(f"config file {path} must contain a mapping at top level")
    return data
