"""Table definitions (SQLAlchemy Core). Each table is owned by one module, named in its comment."""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Sequence,
    String,
    Table,
    Text,
    UniqueConstraint,
    false,
    true,
)

metadata = MetaData()

# owner: hearth.registry.store — a key/value row per setting; "registry_version" bumps on change.
meta = Table(
    "meta", metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

providers = Table(
    "providers", metadata,
    Column("name", String(128), primary_key=True),
    Column("kind", String(32), nullable=False),  # openai | anthropic | simulated
    Column("base_url", Text, nullable=True),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # 0008: client headers forwarded upstream (an allowlist); relay the upstream's x-ratelimit-* headers
    Column("forward_headers", JSON, nullable=False, default=list, server_default="[]"),
    Column("relay_ratelimit_headers", Boolean, nullable=False, default=False, server_default=false()),
)

quota_groups = Table(
    "quota_groups", metadata,
    Column("name", String(128), primary_key=True),
    Column("max_concurrency", Integer, nullable=False, default=0),
    Column("rpm", Integer, nullable=False, default=0),
    Column("tpm", Integer, nullable=False, default=0),
    Column("daily_tokens", BigInteger, nullable=False, default=0),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

endpoints = Table(
    "endpoints", metadata,
    Column("name", String(128), primary_key=True),
    Column("provider", String(128), ForeignKey("providers.name"), nullable=False),
    Column("quota_group", String(128), ForeignKey("quota_groups.name"), nullable=True),
    Column("base_url", Text, nullable=True),
    Column("upstream_model", String(256), nullable=False),
    Column("api_key_enc", Text, nullable=True),
    Column("api_key_hint", String(32), nullable=True),
    Column("key_version", Integer, nullable=False, default=1),
    Column("max_concurrency", Integer, nullable=False, default=0),
    Column("rpm", Integer, nullable=False, default=0),
    Column("tpm", Integer, nullable=False, default=0),
    Column("weight", Float, nullable=False, default=1.0),
    Column("priority", Integer, nullable=False, default=0),
    Column("timeout_s", Float, nullable=False, default=60.0),
    Column("capabilities", JSON, nullable=False),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("disabled_reason", Text, nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # 0005: the name the upstream reads for the output limit
    Column("max_tokens_field", String(32), nullable=False, default="max_tokens", server_default="max_tokens"),
    # 0006: who disabled it (config | gateway | admin) and when; gateway and admin disables outlive an apply
    Column("disabled_by", String(16), nullable=True),
    Column("disabled_at", DateTime(timezone=True), nullable=True),
    # 0008: a stream's own timeouts (NULL: the endpoint's timeout_s / HEARTH_STREAM_IDLE_TIMEOUT_S)
    Column("first_token_timeout_s", Float, nullable=True),
    Column("stream_idle_timeout_s", Float, nullable=True),
    # 0032: the sizes an `images` endpoint can draw ("1024x1024", ...); NULL: any size
    Column("image_sizes", JSON, nullable=True),
)

models = Table(
    "models", metadata,
    Column("name", String(128), primary_key=True),
    Column("description", Text, nullable=True),
    Column("kind", String(32), nullable=False, default="chat"),  # chat | embedding
    Column("enabled", Boolean, nullable=False, default=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # 0005: answers show the upstream's model name instead of the public one
    Column("expose_upstream_model", Boolean, nullable=False, default=False, server_default=false()),
)

model_pool_members = Table(
    "model_pool_members", metadata,
    Column("model", String(128), ForeignKey("models.name", ondelete="CASCADE"), primary_key=True),
    Column("endpoint", String(128), ForeignKey("endpoints.name", ondelete="CASCADE"), primary_key=True),
)

prices = Table(
    "prices", metadata,
    Column("model", String(256), primary_key=True),  # endpoint name, upstream model or public model
    Column("input_per_1m", Float, nullable=False),
    Column("output_per_1m", Float, nullable=False),
    Column("currency", String(8), nullable=False, default="USD"),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # 0032: price of one generated image (currency units); NULL: none
    Column("per_image", Float, nullable=True),
)

# owner: hearth.registry.callers
callers = Table(
    "callers", metadata,
    Column("name", String(128), primary_key=True),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("key_prefix", String(16), nullable=False),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    # 0002: governance
    Column("allowed_models", JSON, nullable=True),  # null = any model
    Column("allowed_scenes", JSON, nullable=True),  # null = any scene
    Column("default_scene", String(128), nullable=True),
    Column("signing_key_enc", Text, nullable=True),
    Column("require_signature", Boolean, nullable=False, default=False),
    Column("limits", JSON, nullable=True),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=True),
)

# owner: hearth.registry.store — business purposes with model rules
scenes = Table(
    "scenes", metadata,
    Column("name", String(128), primary_key=True),
    Column("default_model", String(128), nullable=False),
    Column("allowed_models", JSON, nullable=False),
    Column("max_tokens_cap", Integer, nullable=True),
    Column("fallback_models", JSON, nullable=False),
    Column("enabled", Boolean, nullable=False, default=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    # 0011: the capability API's guardrails and response cache for the scene
    Column("guardrails", JSON, nullable=True),
    Column("cache_ttl_s", Float, nullable=True),
)

# owner: hearth.registry.store — budget rules (limits per caller, tenant or user and period)
budgets = Table(
    "budgets", metadata,
    Column("name", String(128), primary_key=True),
    Column("caller", String(128), nullable=False),  # a caller name or "*"
    Column("scope", String(16), nullable=False),  # caller | tenant | user
    Column("subject", String(256), nullable=False),  # for tenant/user: an id, or "*" = each one
    Column("period", String(16), nullable=False),  # day | month | total
    Column("unit", String(16), nullable=False),  # money | tokens
    Column("limit_amount", BigInteger, nullable=False),  # micro-units of currency, or tokens
    Column("estimate", String(16), nullable=False, default="bound", server_default="bound"),  # bound | approx
    Column("enabled", Boolean, nullable=False, default=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# owner: hearth.prompts.store — a prompt code and its display fields; its versions below
prompts = Table(
    "prompts", metadata,
    Column("code", String(128), primary_key=True),
    Column("display_name", String(256), nullable=False),
    Column("description", Text, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# owner: hearth.prompts.store — immutable content; status moves: inactive | active | disabled
prompt_versions = Table(
    "prompt_versions", metadata,
    Column("code", String(128), ForeignKey("prompts.code"), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("default_locale", String(35), nullable=False),
    Column("contents", JSON, nullable=False),  # {locale: {"system": str | null, "user": str}}
    Column("variables", JSON, nullable=False),  # [{"name", "required", "allowed", "default", "description"}]
    Column("model", String(128), nullable=True),
    Column("scene", String(128), nullable=True),
    Column("output_schema", JSON, nullable=True),
    Column("params", JSON, nullable=False),  # generation parameters: temperature, max_tokens, ...
    Column("quality_gate", JSON, nullable=True),
    Column("canary_share", Float, nullable=False, default=0.0,
           server_default="0"),  # of a non-active version: share of traffic
    Column("content_hash", String(64), nullable=False),  # sha256 of the runtime fields: import skips equal ones
    Column("created_by", String(128), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)
Index("uq_prompt_versions_one_active", prompt_versions.c.code, unique=True,
      sqlite_where=prompt_versions.c.status == "active", postgresql_where=prompt_versions.c.status == "active")

# owner: hearth.prompts.store — the audit trail of status changes (activation, disable, canary)
prompt_events = Table(
    "prompt_events", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("code", String(128), nullable=False),
    Column("version", Integer, nullable=False),
    Column("action", String(32), nullable=False),  # created | activated | deactivated | disabled | canary | updated
    Column("operator", String(128), nullable=False),
    Column("reason", Text, nullable=True),
    Column("previous_active", Integer, nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
)
Index("ix_prompt_events_code", prompt_events.c.code, prompt_events.c.id)

# owner: hearth.prompts.store — personas binding a default prompt and model
roles = Table(
    "roles", metadata,
    Column("code", String(128), primary_key=True),
    Column("display_name", String(256), nullable=False),
    Column("default_locale", String(35), nullable=False),
    Column("persona", JSON, nullable=False),  # {locale: system prompt}
    Column("prompt_code", String(128), nullable=True),
    Column("model", String(128), nullable=True),
    Column("scene", String(128), nullable=True),
    Column("enabled", Boolean, nullable=False, default=True, server_default=true()),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# owner: hearth.capabilities.chat_requests — idempotent chat: one model call per (caller, user, request id)
chat_requests = Table(
    "chat_requests", metadata,
    Column("caller", String(128), primary_key=True),
    Column("end_user", String(256), primary_key=True),  # "" when the request names no user
    Column("request_id", String(64), primary_key=True),
    Column("status", String(16), nullable=False),  # running | succeeded | failed
    Column("events", JSON, nullable=True),  # the SSE events sent, in order (id, event, data), once finished
    Column("result", JSON, nullable=True),  # the answer's data (non-stream) once succeeded
    Column("error", JSON, nullable=True),  # {code, message, status} once failed
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=True),
)

# owner: hearth.budgets.ledger — the authoritative record of reservations and settlements
budget_ledger = Table(
    "budget_ledger", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("call_id", String(64), nullable=False),  # the reservation's id: a group of calls (or one call)
    Column("budget", String(128), nullable=False),
    Column("counter_key", String(512), nullable=False),
    Column("kind", String(16), nullable=False),  # reserve | settle | call (both in one row)
    Column("calls", Integer, nullable=False, server_default="1"),  # how many calls the row covers
    Column("amount", BigInteger, nullable=False),  # reserve: reserved; settle, call: charged
    Column("refund", BigInteger, nullable=False, default=0),  # settle, call: reserved - charged
    Column("overrun", BigInteger, nullable=False, default=0),  # settle: actual beyond the reservation, not charged
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("call_id", "counter_key", "kind", name="uq_budget_ledger_call_counter_kind"),
)
Index("ix_budget_ledger_counter", budget_ledger.c.counter_key)

# owner: hearth.observability.request_log
request_logs = Table(
    "request_logs", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("request_id", String(64), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("caller", String(128), nullable=True),
    Column("route", String(32), nullable=False),
    Column("model", String(128), nullable=True),
    Column("endpoint", String(128), nullable=True),
    Column("upstream_model", String(256), nullable=True),
    Column("stream", Boolean, nullable=False, default=False),
    Column("status", Integer, nullable=False),
    Column("error_code", String(64), nullable=True),
    Column("attempts", Integer, nullable=False, default=0),
    Column("prompt_tokens", Integer, nullable=False, default=0),
    Column("completion_tokens", Integer, nullable=False, default=0),
    Column("usage_estimated", Boolean, nullable=False, default=False),
    Column("cost", Float, nullable=False, default=0.0),
    Column("latency_ms", Float, nullable=False, default=0.0),
    Column("ttft_ms", Float, nullable=True),
    Column("end_user", String(256), nullable=True),
    # 0002: governance
    Column("tenant", String(256), nullable=True),
    Column("client_ip", String(64), nullable=True),
    Column("scene", String(128), nullable=True),
    Column("fallback_used", Boolean, nullable=False, default=False),
    Column("attempted_models", JSON, nullable=True),
    Column("effective_max_tokens", Integer, nullable=True),
    Column("estimated_cost", Float, nullable=True),
    # 0007: each attempt's endpoint, status, error code and latency (bounded by request_log.bound_record)
    Column("attempt_log", JSON, nullable=True),
    # 0009: capabilities — which one, the prompt version it ran, guardrail actions (never raw values)
    Column("capability", String(32), nullable=True),
    Column("prompt_code", String(128), nullable=True),
    Column("prompt_version", Integer, nullable=True),
    Column("guardrails", JSON, nullable=True),
    Column("degraded", Boolean, nullable=True),
    Column("cache_hit", Boolean, nullable=True),
    # 0012: the task a call ran for (task → call → attempt)
    Column("task_id", String(40), nullable=True),
)
Index("ix_request_logs_created_at", request_logs.c.created_at)
Index("ix_request_logs_caller_created", request_logs.c.caller, request_logs.c.created_at)
Index("ix_request_logs_model_created", request_logs.c.model, request_logs.c.created_at)
Index("ix_request_logs_request_id", request_logs.c.request_id)
Index("ix_request_logs_prompt", request_logs.c.prompt_code, request_logs.c.created_at)
Index("ix_request_logs_task", request_logs.c.task_id)
# 0027: the console's other filters, so a filter that matches few rows (or none) never walks the whole table
Index("ix_request_logs_status_created", request_logs.c.status, request_logs.c.created_at)
Index("ix_request_logs_endpoint_created", request_logs.c.endpoint, request_logs.c.created_at)
Index("ix_request_logs_error_created", request_logs.c.error_code, request_logs.c.created_at)
Index("ix_request_logs_route_created", request_logs.c.route, request_logs.c.created_at)

# owner: hearth.store.batch_insert — rows a batch writer's table refused (bad data), kept for operators
dead_rows = Table(
    "dead_rows", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("writer", String(32), nullable=False),  # request_log | budget_ledger
    Column("row_key", String(128), nullable=True),  # the refused row's request id / call id
    Column("error", Text, nullable=False),  # exception class and the start of its message
    Column("payload", Text, nullable=False),  # the row as JSON (datetimes as ISO strings), size-bounded
    Column("created_at", DateTime(timezone=True), nullable=False),
)
Index("ix_dead_rows_created_at", dead_rows.c.created_at)

# --------------------------------------------------------------------------- the task engine (issue 10)
# Times are float seconds since the epoch: the queue compares them on every claim and lease check, the
# same way on SQLite and PostgreSQL, and the API renders them as ISO 8601.

# owner: hearth.tasks.queue (claims, completions) and hearth.tasks.transitions (every state change)
tasks = Table(
    "tasks", metadata,
    Column("id", String(40), primary_key=True),
    Column("task_type", String(64), nullable=False),
    Column("queue", String(64), nullable=False),
    Column("priority", Integer, nullable=False, default=0),
    Column("state", String(16), nullable=False),
    Column("caller", String(128), nullable=False),
    Column("tenant", String(256), nullable=True),
    Column("end_user", String(256), nullable=True),
    Column("fair_key", String(300), nullable=False),  # whose share of the queue this is (user, tenant or caller)
    Column("fair_seq", BigInteger, nullable=False, default=0),  # round-robin position among fair keys
    Column("payload", JSON, nullable=False),
    Column("result", JSON, nullable=True),
    Column("error", JSON, nullable=True),  # {code, message, details} of the last failure
    Column("error_code", String(64), nullable=True),
    Column("failure_stage", String(64), nullable=True),
    Column("current_step", String(128), nullable=True),
    Column("progress", Integer, nullable=False, default=0),
    Column("attempt", Integer, nullable=False, default=0),  # the fence: every worker write names it
    Column("max_attempts", Integer, nullable=False),
    Column("repeat_safe", Boolean, nullable=False),  # may an attempt cut short by a dead worker simply run again?
    Column("run_after", Float, nullable=False),
    Column("lease_until", Float, nullable=True),
    Column("worker", String(128), nullable=True),
    Column("cancel_requested", Boolean, nullable=False, default=False),
    Column("idempotency_key", String(128), nullable=True),
    Column("replay_of", String(40), nullable=True),
    Column("callback_url", Text, nullable=True),
    Column("request_id", String(64), nullable=True),
    Column("versions", JSON, nullable=True),  # models and prompt versions the task's calls used
    Column("hold_reason", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("updated_at", Float, nullable=False),
    Column("trace_parent", String(64), nullable=True),  # W3C traceparent of the submitting span (tracing on)
    UniqueConstraint("caller", "idempotency_key", name="uq_tasks_caller_idempotency"),
    postgresql_with={"fillfactor": 85},  # room in each page for a heartbeat's HOT version (0020)
)
_QUEUED = tasks.c.state == "queued"
_PENDING = tasks.c.state.in_(("queued", "waiting"))
Index("ix_tasks_claim", tasks.c.queue, tasks.c.priority.desc(), tasks.c.fair_seq, tasks.c.created_at, tasks.c.id,
      postgresql_where=_QUEUED, sqlite_where=_QUEUED)
Index("ix_tasks_pending_fair", tasks.c.queue, tasks.c.fair_key, tasks.c.fair_seq,
      postgresql_where=_PENDING, sqlite_where=_PENDING)
# Not on lease_until: a heartbeat changes only that column, and unindexed it is a HOT update (0022, which also
# sets fillfactor 85 on PostgreSQL to leave room in each page for those versions). On id: see 0022.
Index("ix_tasks_running", tasks.c.id,
      postgresql_where=tasks.c.state == "running", sqlite_where=tasks.c.state == "running")
Index("ix_tasks_waiting_run_after", tasks.c.run_after,
      postgresql_where=tasks.c.state == "waiting", sqlite_where=tasks.c.state == "waiting")
Index("ix_tasks_updated", tasks.c.updated_at, tasks.c.id)
Index("ix_tasks_caller_created", tasks.c.caller, tasks.c.created_at, tasks.c.id)
Index("ix_tasks_created", tasks.c.created_at, tasks.c.id)  # 0027: every caller's tasks, newest first (console, admin)
# owner: hearth.tasks.admission — tasks admitted to any queue (submitted, or put back), numbered: the bound a
# process admits against between two exact counts (PostgreSQL; SQLite has no sequences and counts every time).
task_admissions = Sequence("task_admissions", metadata=metadata)

# owner: hearth.tasks.transitions — one row per attempt: who ran it, how it ended
task_attempts = Table(
    "task_attempts", metadata,
    Column("task_id", String(40), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("worker", String(128), nullable=True),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float, nullable=True),
    Column("outcome", String(32), nullable=True),  # succeeded | failed | retry | lease_expired | killed | hold
    Column("error_code", String(64), nullable=True),
    Column("error_message", Text, nullable=True),
)

# owner: hearth.tasks.transitions — every state change and progress report, in order (the SSE stream)
task_events = Table(
    "task_events", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("task_id", String(40), nullable=False),
    Column("at", Float, nullable=False),
    Column("kind", String(16), nullable=False),  # state | progress
    Column("state", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("progress", Integer, nullable=True),
    Column("step", String(128), nullable=True),
    Column("detail", JSON, nullable=True),
)
Index("ix_task_events_task", task_events.c.task_id, task_events.c.id)

# owner: hearth.tasks.dead_letters — terminal failures, until an operator acknowledges or redrives them
dead_letters = Table(
    "dead_letters", metadata,
    Column("task_id", String(40), primary_key=True),
    Column("status", String(16), nullable=False),  # OPEN | ACKNOWLEDGED | REDRIVEN | RESOLVED
    Column("severity", String(2), nullable=False),  # P1 | P2 | P3
    Column("task_type", String(64), nullable=False),
    Column("queue", String(64), nullable=False),
    Column("caller", String(128), nullable=False),
    Column("error_code", String(64), nullable=True),
    Column("failure_stage", String(64), nullable=True),
    Column("message", Text, nullable=True),
    Column("attempts", Integer, nullable=False),
    Column("opened_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("history", JSON, nullable=False),  # [{action, operator, reason, at}]: acknowledge, redrive, resolve
)
Index("ix_dead_letters_status", dead_letters.c.status, dead_letters.c.opened_at)

# owner: hearth.tasks.callbacks — one row per task whose terminal state is to be POSTed to its callback_url
callback_deliveries = Table(
    "callback_deliveries", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("task_id", String(40), nullable=False),
    Column("url", Text, nullable=False),
    Column("state", String(16), nullable=False),  # pending | delivering | delivered | gave_up
    Column("task_state", String(16), nullable=False),  # the terminal state it announces
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_at", Float, nullable=False),
    Column("lease_until", Float, nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("delivered_at", Float, nullable=True),
)
Index("ix_callback_deliveries_due", callback_deliveries.c.state, callback_deliveries.c.next_at)
Index("ix_callback_deliveries_task", callback_deliveries.c.task_id)

# owner: hearth.workflows.schedules — a cron schedule in a time zone whose occurrences submit tasks
schedules = Table(
    "schedules", metadata,
    Column("id", String(40), primary_key=True),
    Column("name", String(128), nullable=False),
    Column("caller", String(128), nullable=False),  # whose task each occurrence submits
    Column("cron", String(256), nullable=False),
    Column("time_zone", String(64), nullable=False),
    Column("target", JSON, nullable=False),  # {task_type, payload, queue, priority}
    Column("start_at", Float, nullable=True),
    Column("end_at", Float, nullable=True),
    Column("jitter_s", Float, nullable=False),
    Column("misfire_policy", String(16), nullable=False),  # run_once | run_all | skip
    Column("catchup_window_s", Float, nullable=False),
    Column("overlap_policy", String(16), nullable=False),  # skip | buffer_one | buffer_all | cancel_other | allow_all
    Column("paused", Boolean, nullable=False),
    Column("planned_through", Float, nullable=False),  # every occurrence up to here is decided
    Column("next_at", Float, nullable=True),  # the next occurrence (None: none left)
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    UniqueConstraint("caller", "name", name="uq_schedules_caller_name"),
)
Index("ix_schedules_due", schedules.c.next_at)

# owner: hearth.workflows.schedules — one row per (schedule, planned instant): what became of that occurrence
schedule_occurrences = Table(
    "schedule_occurrences", metadata,
    Column("schedule_id", String(40), primary_key=True),
    Column("planned_at", Float, primary_key=True),
    Column("state", String(16), nullable=False),  # fired | buffered | skipped | missed | asking | failed
    Column("reason", String(32), nullable=True),  # overlap | misfire | manual | backfill | approved | rejected …
    Column("task_id", String(40), nullable=True),
    Column("review_id", String(40), nullable=True),  # misfire policy `prompt`: the review item asking
    Column("decided_at", Float, nullable=False),
)
Index("ix_schedule_occurrences_buffered", schedule_occurrences.c.state, schedule_occurrences.c.schedule_id)

# owner: hearth.workflows.reviews — a decision a human owes: claimed with a lease, decided once, or expired
review_items = Table(
    "review_items", metadata,
    Column("id", String(40), primary_key=True),
    Column("queue", String(64), nullable=False),
    Column("caller", String(128), nullable=True),  # on whose behalf it was raised (None: an operator)
    Column("subject_kind", String(32), nullable=False),  # task | workflow_step | document | external
    Column("subject_id", String(128), nullable=True),
    Column("title", String(256), nullable=False),
    Column("payload", JSON, nullable=False),  # the thing to decide
    Column("evidence", JSON, nullable=False),
    Column("form", JSON, nullable=True),  # JSON Schema a `modify` decision's payload must satisfy
    Column("state", String(16), nullable=False),  # pending | claimed | approved | modified | rejected | expired
    Column("assignee", String(128), nullable=True),
    Column("claim_until", Float, nullable=True),
    Column("decision", JSON, nullable=True),  # a `modify` decision's payload
    Column("decided_by", String(128), nullable=True),
    Column("reason", Text, nullable=True),
    Column("history", JSON, nullable=False),  # [{action, reviewer, reason, at}]
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("decided_at", Float, nullable=True),
    Column("updated_at", Float, nullable=False),
)
Index("ix_review_items_queue", review_items.c.state, review_items.c.queue, review_items.c.created_at)
Index("ix_review_items_expiry", review_items.c.expires_at)

# owner: hearth.workflows.review_escalations — a review item's expiry POSTed (signed, retried) to the escalation webhook
review_escalations = Table(
    "review_escalations", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("review_id", String(40), nullable=False),
    Column("url", Text, nullable=False),
    Column("state", String(16), nullable=False),  # pending | delivering | delivered | gave_up
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_at", Float, nullable=False),
    Column("lease_until", Float, nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("delivered_at", Float, nullable=True),
)
Index("ix_review_escalations_due", review_escalations.c.state, review_escalations.c.next_at)
Index("ux_review_escalations_review", review_escalations.c.review_id, unique=True)

# owner: hearth.workflows.definition_store — every registered version of a workflow definition, immutable
workflow_definitions = Table(
    "workflow_definitions", metadata,
    Column("name", String(128), primary_key=True),
    Column("version", Integer, primary_key=True),
    Column("spec", JSON, nullable=False),  # the validated definition, as registered
    Column("digest", String(64), nullable=False),  # sha256 of the canonical spec: registering it again is a no-op
    Column("created_at", Float, nullable=False),
)

# owner: hearth.workflows.run_store — a run of a registered workflow version, and the checkpoint of each step
workflow_runs = Table(
    "workflow_runs", metadata,
    Column("id", String(40), primary_key=True),
    Column("workflow", String(128), nullable=False),
    Column("version", Integer, nullable=False),
    Column("caller", String(128), nullable=False),  # whose tasks its steps are
    Column("input", JSON, nullable=False),
    Column("state", String(16), nullable=False),  # running | paused | succeeded | failed | cancelled | terminated
    Column("error", JSON, nullable=True),  # {step, code, message} of the step that failed the run
    Column("output", JSON, nullable=True),  # succeeded: {step id: output} of its final steps
    Column("parent", JSON, nullable=True),  # a sub-workflow's run: {run_id, step, depth} of the step that started it
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("finished_at", Float, nullable=True),
    Column("epoch", Integer, nullable=False, server_default="0"),  # bumped by each operator action: a pass's fence
)
Index("ix_workflow_runs_state", workflow_runs.c.state, workflow_runs.c.updated_at)
# 0028: the console's runs list, newest first, keyset-paged on (created_at, id) — with or without a state filter
Index("ix_workflow_runs_created", workflow_runs.c.created_at, workflow_runs.c.id)
Index("ix_workflow_runs_state_created", workflow_runs.c.state, workflow_runs.c.created_at, workflow_runs.c.id)

workflow_steps = Table(
    "workflow_steps", metadata,
    Column("run_id", String(40), primary_key=True),
    Column("step_id", String(128), primary_key=True),
    Column("state", String(16), nullable=False),  # waiting | running | succeeded | failed | skipped | cancelled
    Column("task_id", String(40), nullable=True),
    Column("review_id", String(40), nullable=True),
    Column("output", JSON, nullable=True),  # the checkpoint: a finished step never runs again
    Column("error", JSON, nullable=True),
    Column("started_at", Float, nullable=True),
    Column("finished_at", Float, nullable=True),
    Column("detail", JSON, nullable=True),  # per kind: a wait's due time, fan-out items, child run, loop iteration
    Column("round", Integer, nullable=False, default=0, server_default="0"),  # moved on by loops and reruns (keys)
    Column("override", String(16), nullable=True),  # skipped | mark_succeeded: an operator, not the engine, ended it
)

# owner: hearth.workflows.run_store — external events sent to a run, kept until a wait step takes them
workflow_signals = Table(
    "workflow_signals", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("run_id", String(40), nullable=False),
    Column("event", String(128), nullable=False),
    Column("payload", JSON, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("consumed_by", String(160), nullable=True),  # "<step id>#<round>" of the wait step that took it
    Column("consumed_at", Float, nullable=True),
)
Index("ix_workflow_signals_run", workflow_signals.c.run_id, workflow_signals.c.event)

# owner: hearth.workflows.run_store — the audit of operator actions on runs: who, why, when, before and after
workflow_run_actions = Table(
    "workflow_run_actions", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("run_id", String(40), nullable=False),
    Column("step_id", String(128), nullable=True),  # None: an action on the whole run
    Column("action", String(32), nullable=False),  # pause | resume | terminate | rerun | skip | mark_succeeded
    Column("operator", String(128), nullable=False),
    Column("reason", String(2000), nullable=False),
    Column("at", Float, nullable=False),
    Column("before", JSON, nullable=False),  # {run: {state, epoch}, steps: {id: row}} of what it changed
    Column("after", JSON, nullable=False),
)
Index("ix_workflow_run_actions_run", workflow_run_actions.c.run_id, workflow_run_actions.c.id)

# owner: hearth.documents.document_store — uploaded documents: who owns them and where their bytes are
documents = Table(
    "documents", metadata,
    Column("id", String(40), primary_key=True),  # doc_<hex>
    Column("caller", String(128), nullable=False),
    Column("filename", String(255), nullable=True),  # as the caller named it: display only, never a path or a type
    Column("content_type", String(64), nullable=False),  # sniffed from the bytes
    Column("size", BigInteger, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("storage", String(16), nullable=False),  # local | database: the blob store holding blob_key
    Column("blob_key", String(96), nullable=False),  # sha256/ab/cd/<hex>: content addressed, shared by equal bytes
    Column("page_count", Integer, nullable=True),  # known once parsed (PDF)
    Column("created_at", Float, nullable=False),
)
Index("ix_documents_caller", documents.c.caller, documents.c.created_at)
Index("ix_documents_sha256", documents.c.sha256)

# owner: hearth.documents.database_blobs — the `database` blob store: an object's bytes in chunks, all written
# in one transaction (an object is all its chunks or absent)
document_blob_chunks = Table(
    "document_blob_chunks", metadata,
    Column("key", String(96), primary_key=True),
    Column("seq", Integer, primary_key=True),  # 0, 1, ...: the chunk's place in the object
    Column("data", LargeBinary, nullable=False),  # bytea on PostgreSQL, BLOB on SQLite
)

# owner: hearth.documents.page_store — a PDF's text layer, page by page, kept by the SHA-256 of its bytes: parsed
# once, read by every later stage and job (a model failure never re-parses)
document_pages = Table(
    "document_pages", metadata,
    Column("sha256", String(64), primary_key=True),
    Column("page", Integer, primary_key=True),  # 1-based
    Column("text", Text, nullable=False),
    Column("needs_ocr", Boolean, nullable=False),
    Column("chars", Integer, nullable=False),
)

# owner: hearth.documents.job_store — a document's pipeline job: its workflow run, or a cache hit
document_jobs = Table(
    "document_jobs", metadata,
    Column("id", String(40), primary_key=True),  # djob_<hex>
    Column("document_id", String(40), nullable=False),
    Column("caller", String(128), nullable=False),
    Column("run_id", String(40), nullable=True),  # the pipeline's run; null for a cache hit
    Column("cache_key", String(64), nullable=False),  # sha256 of (bytes, pipeline, prompt and model versions)
    Column("versions", JSON, nullable=False),  # {pipeline, prompt_code, prompt_version, model}: what the key covers
    Column("cache_hit", Boolean, nullable=False),
    Column("result", JSON, nullable=True),  # the final result, once completed
    Column("reviewed", Boolean, nullable=False, server_default=false()),  # a reviewer decided the result
    Column("created_at", Float, nullable=False),
    Column("finished_at", Float, nullable=True),
)
Index("ix_document_jobs_document", document_jobs.c.document_id, document_jobs.c.created_at)

# owner: hearth.documents.job_store — completed results by cache key: the same bytes through the same pipeline,
# prompt and model versions complete from here, with no model call
document_results = Table(
    "document_results", metadata,
    Column("cache_key", String(64), primary_key=True),
    Column("result", JSON, nullable=False),
    Column("job_id", String(40), nullable=False),  # the job that produced it
    Column("created_at", Float, nullable=False),
)

# owner: hearth.observability.alerts — what an operator must hear about (docs/operations.md, Alerts): one row per
# (kind, subject) per dedup window, with the repeats it suppressed, delivered signed to HEARTH_ALERT_URL
alerts = Table(
    "alerts", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("kind", String(32), nullable=False),  # endpoint_disabled | breaker_open | budget_threshold | ...
    Column("subject", String(256), nullable=False),  # what it is about: an endpoint, a queue, a task id, ...
    Column("severity", String(8), nullable=False),  # P1 | P2 | P3
    Column("payload", JSON, nullable=False),
    Column("dedup_key", String(300), nullable=False),  # kind:subject (hashed when long)
    Column("window_start", Float, nullable=False),  # this alert's first occurrence
    Column("window_end", Float, nullable=False),  # repeats before this are counted in `suppressed`, not sent
    Column("suppressed", Integer, nullable=False, default=0, server_default="0"),  # repeats within this window
    Column("previous_suppressed", Integer, nullable=False, default=0,
           server_default="0"),  # the previous window's, reported here
    Column("last_seen_at", Float, nullable=False),
    Column("state", String(16), nullable=False),  # pending | delivering | delivered | gave_up
    Column("attempts", Integer, nullable=False, default=0, server_default="0"),
    Column("next_at", Float, nullable=False),
    Column("lease_until", Float, nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("delivered_at", Float, nullable=True),
)
Index("ix_alerts_dedup", alerts.c.dedup_key, alerts.c.window_start)
Index("ix_alerts_due", alerts.c.state, alerts.c.next_at)
Index("ix_alerts_kind", alerts.c.kind, alerts.c.id)
# owner: hearth.observability.usage_outbox — AIUsageRecorded events owed to each configured sink (one row per
# event and sink, so a sink that is down holds back only its own rows); delivered rows are deleted after retention
usage_outbox = Table(
    "usage_outbox", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("event_id", String(36), nullable=False),  # the dedup key every delivery of the event carries
    Column("sink", String(16), nullable=False),  # webhook | nats | amqp
    Column("payload", Text, nullable=False),  # the event as JSON
    Column("state", String(16), nullable=False),  # pending | delivering | delivered
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_at", Float, nullable=False),
    Column("lease_until", Float, nullable=True),
    Column("last_error", Text, nullable=True),
    Column("created_at", Float, nullable=False),
    Column("delivered_at", Float, nullable=True),
    UniqueConstraint("event_id", "sink", name="uq_usage_outbox_event_sink"),
)
Index("ix_usage_outbox_due", usage_outbox.c.sink, usage_outbox.c.state, usage_outbox.c.next_at)
Index("ix_usage_outbox_delivered", usage_outbox.c.state, usage_outbox.c.delivered_at)

# owner: hearth.observability.request_rollups — request logs aggregated per minute, hour and day (0027), added to by
# the request-log writer in the same transaction as the rows; read by the console's overview and usage pages.
# Dimensions are bounded by configuration ('' stands for none: a NULL would never meet its ON CONFLICT twin);
# bucket is the epoch second the minute (hour, day) starts; lat_0..lat_15 count calls per latency bucket (bounds in
# hearth.observability.request_rollups.LATENCY_BOUNDS_MS), so any window's p95 can be estimated by summing.
ROLLUP_LATENCY_BUCKETS = 16


def _rollup_table(name: str) -> Table:
    return Table(
        name, metadata,
        Column("bucket", BigInteger, primary_key=True),
        Column("caller", String(128), primary_key=True),
        Column("model", String(128), primary_key=True),
        Column("endpoint", String(128), primary_key=True),
        Column("status_class", Integer, primary_key=True),  # 2, 3, 4, 5 (status // 100; 0 for anything else)
        Column("calls", BigInteger, nullable=False),
        Column("errors", BigInteger, nullable=False),  # status >= 400
        Column("prompt_tokens", BigInteger, nullable=False),
        Column("completion_tokens", BigInteger, nullable=False),
        Column("cost", Float, nullable=False),
        Column("latency_ms_sum", Float, nullable=False),
        *(Column(f"lat_{i}", BigInteger, nullable=False) for i in range(ROLLUP_LATENCY_BUCKETS)),
    )


request_rollups_minute = _rollup_table("request_rollups_minute")
request_rollups_hour = _rollup_table("request_rollups_hour")
request_rollups_day = _rollup_table("request_rollups_day")  # UTC days: what 30-day windows read
# owner: hearth.mcp.server_store — upstream MCP servers from the registry file's `mcp_servers:` (credential
# encrypted under the master key, AES-GCM bound to `mcp:<name>`; rules as given, checked by the file's schema)
mcp_servers = Table(
    "mcp_servers", metadata,
    Column("name", String(128), primary_key=True),
    Column("url", Text, nullable=False),
    Column("credential_enc", Text, nullable=True),
    Column("credential_hint", String(64), nullable=True),  # masked, for people: `sk-****9x2a`
    Column("credential_header", String(128), nullable=False),
    Column("enabled", Boolean, nullable=False),
    Column("timeout_s", Float, nullable=False),
    Column("caller_rpm", Integer, nullable=False),
    Column("caller_concurrency", Integer, nullable=False),
    Column("rules", JSON, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=True),
)
# owner: hearth.mcp.audit — one row per MCP tool call, allowed or not (arguments only as a sha256 digest)
mcp_calls = Table(
    "mcp_calls", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("created_at", Float, nullable=False),
    Column("request_id", String(64), nullable=False),
    Column("caller", String(128), nullable=False),
    Column("server", String(128), nullable=True),  # None: the name did not resolve to a server
    Column("tool", String(256), nullable=False),  # as the caller named it (<server>__<tool>), cut to 256
    Column("args_sha256", String(64), nullable=False),  # of the canonical JSON (sorted keys, no spaces)
    Column("outcome", String(32), nullable=False),  # ok, tool_error, denied, rate_limited, ... (docs/mcp.md)
    Column("error_code", String(64), nullable=True),
    Column("latency_ms", Float, nullable=False),
)
Index("ix_mcp_calls_caller", mcp_calls.c.caller, mcp_calls.c.created_at)
Index("ix_mcp_calls_server", mcp_calls.c.server, mcp_calls.c.created_at)
# owner: hearth.batches.file_store — OpenAI Files: uploaded batch input and produced batch output/error JSONL; the
# bytes are in the blob store (content addressed, shared by equal bytes), the row says whose they are
openai_files = Table(
    "openai_files", metadata,
    Column("id", String(40), primary_key=True),  # file-<hex>
    Column("caller", String(128), nullable=False),
    Column("purpose", String(32), nullable=False),  # batch | batch_output
    Column("filename", String(255), nullable=False),
    Column("bytes", BigInteger, nullable=False),
    Column("sha256", String(64), nullable=False),
    Column("storage", String(16), nullable=False),  # the blob store holding blob_key (local | database)
    Column("blob_key", String(96), nullable=False),
    Column("created_at", Float, nullable=False),
)
Index("ix_openai_files_caller_created", openai_files.c.caller, openai_files.c.created_at, openai_files.c.id)
# owner: hearth.batches.batch_store — one row per batch: OpenAI's status and timestamps, request counts, files
batches = Table(
    "batches", metadata,
    Column("id", String(40), primary_key=True),  # batch_<hex>
    Column("caller", String(128), nullable=False),
    Column("tenant", String(256), nullable=True),
    Column("endpoint", String(32), nullable=False),  # /v1/chat/completions | /v1/embeddings
    Column("input_file_id", String(40), nullable=False),
    Column("completion_window", String(8), nullable=False),
    Column("status", String(16), nullable=False),  # validating … completed | failed | expired | cancelled
    Column("output_file_id", String(40), nullable=True),
    Column("error_file_id", String(40), nullable=True),
    Column("errors", JSON, nullable=True),  # the input file's problems, in OpenAI's list format
    Column("batch_metadata", JSON, nullable=True),
    Column("total", Integer, nullable=False),
    Column("completed", Integer, nullable=False),  # lines answered 2xx (a batch_items row with ok)
    Column("failed", Integer, nullable=False),  # lines answered with an error
    Column("task_id", String(40), nullable=True),  # the task that runs it
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("in_progress_at", Float, nullable=True),
    Column("finalizing_at", Float, nullable=True),
    Column("completed_at", Float, nullable=True),
    Column("failed_at", Float, nullable=True),
    Column("expired_at", Float, nullable=True),
    Column("cancelling_at", Float, nullable=True),
    Column("cancelled_at", Float, nullable=True),
)
Index("ix_batches_caller_created", batches.c.caller, batches.c.created_at, batches.c.id)
# owner: hearth.batches.batch_store — one row per answered input line: inserted once (the primary key refuses a
# second answer), so a resumed batch runs only the lines without a row and the output holds each line once
batch_items = Table(
    "batch_items", metadata,
    Column("batch_id", String(40), primary_key=True),
    Column("line", Integer, primary_key=True),  # 0-based index in the input file
    Column("ok", Boolean, nullable=False),  # to the output file (true) or the error file (false)
    Column("output", Text, nullable=False),  # the JSONL line as written to that file
    Column("created_at", Float, nullable=False),
)
# owner: hearth.responses.store — Responses API objects a caller stored (``store`` not false): the answer as
# returned, and the conversation up to it as chat messages (what ``previous_response_id`` continues); kept
# until ``expires_at`` (``responses_retention_s``), visible to the caller that created them only
responses = Table(
    "responses", metadata,
    Column("id", String(64), primary_key=True),  # resp_…
    Column("caller", String(128), nullable=False),
    Column("previous_response_id", String(64), nullable=True),
    Column("response", JSON, nullable=False),  # the Response object as returned (status, output, usage, …)
    Column("conversation", JSON, nullable=False),  # chat messages: earlier turns, this turn's input, its answer
    Column("created_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
)
Index("ix_responses_expires", responses.c.expires_at)
