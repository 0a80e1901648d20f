"""Retry classes: what a failed attempt means for the task (seed 000 retry codes, seed 003 §6, seed 004).

=====================================  ==========================================================
error                                  decision
=====================================  ==========================================================
429, 5xx, timeouts, no endpoint        retry with exponential backoff and full jitter, honouring
(``upstream_*``, ``capacity_*``, …)    ``Retry-After``, up to the policy's ``max_attempts``
``state_backend_unavailable``/reset    retry later, never fail (the attempt is not counted)
``schema_validation_failed``           one more attempt
corrupt input (any other 4xx code)     fail at once
anything else (a bug, an unknown       fail at once: repeating an unexplained failure rarely helps
exception)                             and can cost money
=====================================  ==========================================================

Delays are data (the task's ``run_after``), never timers in a worker's memory.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

from hearth.errors import CATALOG, HearthError, UpstreamHTTPError

Verdict = Literal["retry", "fail", "retry_uncounted"]

TRANSIENT_CODES = frozenset({
    "upstream_rate_limited", "upstream_error", "upstream_timeout", "upstream_stream_interrupted",
    "upstream_stream_idle", "upstream_stream_error", "deadline_exceeded", "no_healthy_endpoint",
    "capacity_exhausted", "budget_ledger_backlog", "budget_ledger_unavailable", "file_url_fetch_failed",
    "file_url_timeout", "internal_error", "upstream_auth_failed",
})
CONTROL_PLANE_CODES = frozenset({"state_backend_unavailable", "state_backend_reset"})
ONE_MORE_CODES = frozenset({"schema_validation_failed", "quality_gate_failed"})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a task type retries: attempts, backoff and per-code overrides (``{"upstream_error": "fail"}``)."""

    max_attempts: int = 3
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    overrides: dict[str, Verdict] = field(default_factory=dict)


DEFAULT_POLICY = RetryPolicy()


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    delay_s: float
    reason: str  # the retry class, for the task's events: transient | control_plane | one_more | input | unknown


def as_hearth_error(exc: BaseException) -> HearthError:
    """The catalog error a handler's exception stands for: an upstream's own error status (relayed as is on
    the OpenAI routes) by its class; anything unexpected as ``internal_error`` (its type in ``details``)."""
    if isinstance(exc, HearthError):
        return exc
    if isinstance(exc, UpstreamHTTPError):
        message = (exc.body.get("error") or {}).get("message") if isinstance(exc.body.get("error"), dict) else None
        code = ("upstream_rate_limited" if exc.status == 429 else "upstream_auth_failed" if exc.status in (401, 403)
                else "upstream_error" if exc.status >= 500 else "upstream_bad_request")
        return HearthError(code, f"The upstream answered {exc.status}" + (f": {message}"[:500] if message else "."),
                           details={"upstream_status": exc.status}, retry_after=exc.retry_after)
    return HearthError("internal_error", "The task handler failed.", details={"exception": type(exc).__name__})


def classify(error: BaseException) -> tuple[Verdict, str]:
    """The retry class of ``error`` on its own (before the policy's attempt count): a handler's exception as
    raised, not as recorded — an unexpected one is recorded as ``internal_error`` yet fails at once."""
    if isinstance(error, UpstreamHTTPError):
        error = as_hearth_error(error)
    if not isinstance(error, HearthError):
        return "fail", "unknown"
    code = error.code
    if code in CONTROL_PLANE_CODES or (code.endswith("_exceeded") and CATALOG[code].status == 429):
        return "retry_uncounted", "control_plane" if code in CONTROL_PLANE_CODES else "rate_limit"
    if code in TRANSIENT_CODES:
        return "retry", "transient"
    if code in ONE_MORE_CODES:
        return "retry", "one_more"
    return "fail", "input" if error.status < 500 else "unknown"


def decide(error: BaseException, *, attempt: int, max_attempts: int, policy: RetryPolicy,
           rng: random.Random | None = None) -> Decision:
    """What to do after attempt number ``attempt`` (1-based) of a task allowed ``max_attempts`` failed with
    ``error`` — the exception as the handler raised it (:func:`classify`)."""
    verdict, reason = classify(error)
    code = as_hearth_error(error).code  # what the attempt records, and what a policy's overrides name
    if code in policy.overrides:
        verdict = policy.overrides[code]
    if verdict == "fail":
        return Decision("fail", 0.0, reason)
    if reason == "one_more" and attempt >= 2:
        return Decision("fail", 0.0, reason)
    if verdict == "retry" and attempt >= max_attempts:
        return Decision("fail", 0.0, reason)
    return Decision(verdict, backoff_s(error, attempt=attempt, policy=policy, rng=rng), reason)


def jittered_backoff_s(attempt: int, *, base_s: float, max_s: float, rng: random.Random | None = None) -> float:
    """Exponential backoff with jitter: between half and all of ``base_s × 2^(attempt−1)``, at most ``max_s``
    (task retries and callback deliveries alike)."""
    ceiling = min(max_s, base_s * 2 ** max(0, attempt - 1))
    return (rng or random).uniform(ceiling / 2, ceiling)


def backoff_s(error: BaseException, *, attempt: int, policy: RetryPolicy, rng: random.Random | None = None) -> float:
    """Exponential backoff with full jitter, never shorter than the upstream's ``Retry-After``."""
    delay = jittered_backoff_s(attempt, base_s=policy.base_delay_s, max_s=policy.max_delay_s, rng=rng)
    retry_after = getattr(error, "retry_after", None)
    if retry_after is not None:
        delay = max(delay, min(float(retry_after), policy.max_delay_s))
    return delay
