"""The error catalog: every error Hearth returns has a stable code listed here.

A code decides the HTTP status, whether the caller may retry, and how the error looks on the
OpenAI-compatible routes (``type`` in OpenAI's error object). Routers never invent status codes;
they raise :class:`HearthError` with a code from :data:`CATALOG`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ErrorSpec:
    status: int
    retryable: bool
    openai_type: str
    message: str


CATALOG: dict[str, ErrorSpec] = {
    # caller mistakes
    "invalid_request": ErrorSpec(400, False, "invalid_request_error", "The request is invalid."),
    "invalid_json": ErrorSpec(400, False, "invalid_request_error", "The request body is not valid JSON."),
    "request_too_large": ErrorSpec(413, False, "invalid_request_error", "The request body is too large."),
    "unsupported_feature": ErrorSpec(400, False, "invalid_request_error", "The model cannot serve this request."),
    "invalid_api_key": ErrorSpec(401, False, "authentication_error", "Incorrect or missing API key."),
    "admin_token_required": ErrorSpec(401, False, "authentication_error", "A valid admin token is required."),
    "forbidden": ErrorSpec(403, False, "permission_error", "Not allowed."),
    "caller_disabled": ErrorSpec(403, False, "permission_error", "This caller is disabled."),
    "model_not_allowed": ErrorSpec(403, False, "permission_error", "The model is not allowed here."),
    "scene_not_allowed": ErrorSpec(403, False, "permission_error", "The scene is not allowed for this caller."),
    "scene_not_found": ErrorSpec(404, False, "invalid_request_error", "The scene does not exist."),
    "scene_max_tokens_exceeded": ErrorSpec(400, False, "invalid_request_error", "max_tokens exceeds the scene's cap."),
    "signature_required": ErrorSpec(401, False, "authentication_error", "This request must be signed."),
    "signature_invalid": ErrorSpec(401, False, "authentication_error", "The request signature is invalid."),
    "timestamp_out_of_window": ErrorSpec(401, False, "authentication_error",
                                         "The request timestamp is outside the allowed window."),
    "nonce_replayed": ErrorSpec(401, False, "authentication_error", "The request nonce was already used."),
    "nonce_store_reset": ErrorSpec(401, False, "authentication_error",
                                   "The replay-protection store was reset after this request was signed; "
                                   "sign it again with a fresh timestamp."),
    "budget_exhausted": ErrorSpec(429, False, "insufficient_quota", "A budget has no room for this call."),
    "model_not_found": ErrorSpec(404, False, "invalid_request_error", "The model does not exist."),
    "not_found": ErrorSpec(404, False, "invalid_request_error", "Not found."),
    "conflict": ErrorSpec(409, False, "invalid_request_error", "Conflict."),
    # prompts, roles and capabilities (issue 9)
    "prompt_not_found": ErrorSpec(404, False, "invalid_request_error", "The prompt does not exist or has no active "
                                  "version."),
    "prompt_version_not_found": ErrorSpec(404, False, "invalid_request_error", "The prompt version does not exist."),
    "prompt_variable_missing": ErrorSpec(400, False, "invalid_request_error", "A required prompt variable is missing."),
    "prompt_variable_invalid": ErrorSpec(400, False, "invalid_request_error",
                                         "A prompt variable has a value the prompt does not allow."),
    "prompt_template_invalid": ErrorSpec(400, False, "invalid_request_error", "The prompt template cannot be used."),
    "role_not_found": ErrorSpec(404, False, "invalid_request_error", "The role does not exist or is disabled."),
    "schema_not_found": ErrorSpec(404, False, "invalid_request_error", "The extraction schema does not exist."),
    "schema_invalid": ErrorSpec(400, False, "invalid_request_error", "The JSON Schema is not valid."),
    "schema_validation_failed": ErrorSpec(422, False, "invalid_request_error",
                                          "The output did not match the schema, even after a corrective retry."),
    "quality_gate_failed": ErrorSpec(422, False, "invalid_request_error",
                                     "The output did not pass the prompt's quality gate."),
    "prompt_injection_detected": ErrorSpec(400, False, "invalid_request_error",
                                           "The input looks like a prompt-injection attempt."),
    "content_moderation_rejected": ErrorSpec(422, False, "invalid_request_error",
                                             "The output was rejected by content moderation."),
    "input_missing": ErrorSpec(400, False, "invalid_request_error",
                               "No input given: send `text`, `ocr_text`, `file_id` or `file_url`."),
    "file_not_found": ErrorSpec(404, False, "invalid_request_error", "The file does not exist."),
    "file_path_refused": ErrorSpec(400, False, "invalid_request_error",
                                   "The file id points outside the configured file root."),
    "file_too_large": ErrorSpec(413, False, "invalid_request_error", "The file is larger than allowed."),
    "file_type_unsupported": ErrorSpec(415, False, "invalid_request_error", "The content type is not supported."),
    "file_url_refused": ErrorSpec(400, False, "invalid_request_error",
                                  "The file URL is not allowed (scheme, or an address Hearth does not fetch from)."),
    "file_url_fetch_failed": ErrorSpec(502, True, "api_error", "The file URL could not be fetched."),
    "file_url_timeout": ErrorSpec(504, True, "api_error", "The file URL did not answer in time."),
    "request_in_progress": ErrorSpec(409, True, "invalid_request_error",
                                     "A request with this request_id is still running."),
    # the task engine (issue 10)
    "task_type_unknown": ErrorSpec(400, False, "invalid_request_error", "The task type does not exist."),
    "queue_full": ErrorSpec(429, True, "rate_limit_error", "The queue has no room for more tasks now."),
    "task_not_found": ErrorSpec(404, False, "invalid_request_error", "The task does not exist."),
    "task_not_finished": ErrorSpec(409, True, "invalid_request_error", "The task has no result yet."),
    "task_state_conflict": ErrorSpec(409, False, "invalid_request_error",
                                     "The task's state does not allow this action."),
    "task_soft_time_limit": ErrorSpec(504, False, "api_error", "The task ran past its soft time limit."),
    "task_time_limit": ErrorSpec(504, False, "api_error", "The task ran past its time limit and was stopped."),
    "worker_lost": ErrorSpec(500, True, "api_error", "The worker running the task stopped answering."),
    "task_cancelled": ErrorSpec(409, False, "invalid_request_error", "The task was cancelled."),
    "dead_letter_not_found": ErrorSpec(404, False, "invalid_request_error", "The dead letter does not exist."),
    "callback_url_refused": ErrorSpec(400, False, "invalid_request_error",
                                      "The callback URL is not allowed (scheme, or an address Hearth does not "
                                      "call)."),
    # schedules (issue 11)
    "schedule_not_found": ErrorSpec(404, False, "invalid_request_error", "The schedule does not exist."),
    "schedule_exists": ErrorSpec(409, False, "invalid_request_error",
                                 "The caller already has a schedule of this name."),
    "workflow_not_found": ErrorSpec(404, False, "invalid_request_error", "The workflow does not exist."),
    "workflow_run_not_found": ErrorSpec(404, False, "invalid_request_error", "The workflow run does not exist."),
    "workflow_signal_unexpected": ErrorSpec(409, False, "invalid_request_error",
                                            "No step of the workflow run can take this signal."),
    "workflow_failed": ErrorSpec(422, False, "invalid_request_error",
                                 "The workflow reached a step that ends it as failed."),
    # built-in task types calling business systems (issue 11)
    "http_call_refused": ErrorSpec(400, False, "invalid_request_error",
                                   "The URL is not allowed for an outbound call."),
    "http_call_rejected": ErrorSpec(422, False, "invalid_request_error",
                                    "The receiving system refused the request."),
    # operator actions on workflow runs (issue 11)
    "operator_reason_required": ErrorSpec(400, False, "invalid_request_error",
                                          "An operator action needs a non-empty `operator` and `reason`."),
    "workflow_step_not_found": ErrorSpec(404, False, "invalid_request_error", "The run has no such step."),
    "workflow_run_state_conflict": ErrorSpec(409, False, "invalid_request_error",
                                             "The run's state does not allow this action."),
    "workflow_step_state_conflict": ErrorSpec(409, False, "invalid_request_error",
                                              "The step's state does not allow this action."),
    # the human review queue (issue 11)
    "review_not_found": ErrorSpec(404, False, "invalid_request_error", "The review item does not exist."),
    "review_claimed": ErrorSpec(409, False, "invalid_request_error", "Another reviewer holds this review item."),
    "review_not_claimed": ErrorSpec(409, False, "invalid_request_error",
                                    "Claim the review item before deciding it."),
    "review_expired": ErrorSpec(409, False, "invalid_request_error",
                                "The review item expired; it was not approved."),
    "review_decided": ErrorSpec(409, False, "invalid_request_error", "The review item was already decided."),
    # documents (issue 12): storage
    "document_not_found": ErrorSpec(404, False, "invalid_request_error", "The document does not exist."),
    "document_job_not_found": ErrorSpec(404, False, "invalid_request_error", "The document job does not exist."),
    "document_too_large": ErrorSpec(413, False, "invalid_request_error", "The document is larger than allowed."),
    "document_type_unsupported": ErrorSpec(415, False, "invalid_request_error",
                                           "The document is not a PDF, PNG, JPEG or UTF-8 text file."),
    "document_content_missing": ErrorSpec(500, False, "api_error",
                                          "The document's bytes are missing from the document store."),
    # documents: PDF text (issue 12)
    "pdf_corrupted": ErrorSpec(422, False, "invalid_request_error", "The PDF is damaged and cannot be parsed."),
    "pdf_encrypted": ErrorSpec(422, False, "invalid_request_error",
                               "The PDF is password protected; upload it without the password."),
    "document_too_many_pages": ErrorSpec(422, False, "invalid_request_error",
                                         "The document has more pages than allowed."),
    # capacity
    "capacity_exhausted": ErrorSpec(429, True, "rate_limit_error", "All endpoints of the model are at their limits."),
    "state_backend_unavailable": ErrorSpec(503, True, "api_error", "The shared state backend is unavailable."),
    "budget_ledger_backlog": ErrorSpec(503, True, "api_error", "Budget records cannot be written fast enough."),
    "budget_ledger_unavailable": ErrorSpec(503, True, "api_error",
                                           "Budget reservations cannot be recorded in the database now."),
    "state_backend_reset": ErrorSpec(503, True, "api_error", "The shared state backend lost its data; budget "
                                     "counters are being rebuilt from the ledger."),
    "no_healthy_endpoint": ErrorSpec(503, True, "api_error", "No healthy endpoint can serve the model now."),
    # upstream
    "upstream_rate_limited": ErrorSpec(429, True, "rate_limit_error", "The upstream provider is rate limiting."),
    "upstream_error": ErrorSpec(502, True, "api_error", "The upstream provider failed."),
    "upstream_bad_request": ErrorSpec(400, False, "invalid_request_error",
                                      "The upstream provider refused the request as invalid."),
    "upstream_timeout": ErrorSpec(504, True, "api_error", "The upstream provider did not answer in time."),
    "upstream_stream_interrupted": ErrorSpec(502, True, "api_error", "The upstream stream ended unexpectedly."),
    "deadline_exceeded": ErrorSpec(504, True, "api_error", "The call's deadline passed."),
    "upstream_stream_idle": ErrorSpec(504, True, "api_error", "The upstream stream sent nothing within the idle "
                                      "timeout."),
    "upstream_stream_error": ErrorSpec(502, True, "api_error", "The upstream reported an error mid-stream."),
    "upstream_auth_failed": ErrorSpec(502, True, "api_error", "The upstream provider rejected Hearth's credentials."),
    # ours
    "internal_error": ErrorSpec(500, True, "api_error", "Internal error."),
    "metrics_token_required": ErrorSpec(401, False, "authentication_error",
                                        "`/metrics` wants `Authorization: Bearer <metrics_token>`."),
    "service_shutting_down": ErrorSpec(503, True, "api_error", "This Hearth process is shutting down; retry (another "
                                       "replica answers)."),
    # the console and admin API (issue 13)
    "endpoint_test_too_soon": ErrorSpec(429, True, "rate_limit_error",
                                        "This endpoint was tested less than a minute ago; test it again later."),
    # image generation (issue 14, docs/images.md)
    "image_url_invalid": ErrorSpec(403, False, "permission_error", "The image URL's signature is invalid or it has "
                                   "expired; generate the image again or ask for `b64_json`."),
    "image_not_found": ErrorSpec(404, False, "invalid_request_error", "The image is no longer stored."),
    "upstream_outcome_unknown": ErrorSpec(502, False, "api_error", "The upstream took the request but its answer was "
                                          "lost (a timeout or a cut connection): it may have done the work, and "
                                          "billed it, so the call was not repeated."),
    # the MCP gateway (docs/mcp.md); on /mcp they travel as JSON-RPC errors, the code in `error.data.code`
    "mcp_protocol_version_unsupported": ErrorSpec(400, False, "invalid_request_error",
                                                  "This MCP protocol version is not supported."),
    "mcp_method_not_found": ErrorSpec(404, False, "invalid_request_error", "Hearth's MCP server has no such method."),
    "mcp_tool_not_found": ErrorSpec(404, False, "invalid_request_error", "No MCP tool of this name is offered."),
    "mcp_tool_denied": ErrorSpec(403, False, "permission_error", "The MCP tool policy does not allow this call."),
    "mcp_no_tools": ErrorSpec(503, False, "api_error", "No MCP tool is available to this caller."),
    "mcp_upstream_error": ErrorSpec(502, True, "api_error", "The upstream MCP server failed."),
    "mcp_rpm_exceeded": ErrorSpec(429, True, "rate_limit_error", "The caller's limit on MCP tool calls per minute "
                                  "on this server is reached."),
    "mcp_concurrency_exceeded": ErrorSpec(429, True, "rate_limit_error", "The caller's limit on concurrent MCP tool "
                                          "calls on this server is reached."),
}


for _subject in ("caller", "tenant", "user", "ip"):
    for _limit, _what in (("rpm", "requests per minute"), ("tpm", "tokens per minute"),
                          ("concurrency", "concurrent requests"), ("stream_concurrency", "concurrent streams")):
        CATALOG[f"{_subject}_{_limit}_exceeded"] = ErrorSpec(
            429, True, "rate_limit_error", f"The {_subject}'s limit on {_what} is reached.")


class HearthError(Exception):
    """An error with a stable catalog code; safe to show to callers (never carries secrets)."""

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        details: dict[str, Any] | None = None,
        retry_after: float | None = None,
        param: str | None = None,
        status: int | None = None,
    ) -> None:
        spec = CATALOG[code]
        self.code = code
        self.spec = spec
        self.message = message or spec.message
        self.details = details or {}
        self.retry_after = retry_after
        self.param = param
        self.status = status or spec.status
        # Retry steering (``x-should-retry``): the catalog's verdict, which the gateway may narrow —
        # ``failed_over`` once it spent its own attempts (a client retry would only multiply them),
        # ``retryable`` for a case the catalog cannot foresee (no endpoint left to try at all).
        self.retryable = spec.retryable
        self.failed_over = False
        super().__init__(f"{code}: {self.message}")

    @property
    def should_retry(self) -> bool:
        """What ``x-should-retry`` tells the client: a retry of the same request can succeed and
        Hearth has not already made it (failed over to another endpoint or model)."""
        return self.retryable and not self.failed_over

    def openai_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.spec.openai_type, "param": self.param,
                          "code": self.code}}

    def envelope(self, request_id: str | None) -> dict[str, Any]:
        """The capability-style answer; the field at fault, if known, is ``details.param`` (as OpenAI's
        ``param``), so a client can point at it."""
        details = self.details if self.param is None or "param" in self.details else {**self.details,
                                                                                       "param": self.param}
        return {"success": False, "data": None,
                "error": {"code": self.code, "message": self.message, "details": details, "request_id": request_id}}

    def headers(self) -> dict[str, str]:
        """``x-should-retry`` always; with a known wait, ``Retry-After`` in whole seconds (rounded
        up, at least 1) and ``retry-after-ms`` with the exact value (SDKs prefer it)."""
        h = {"x-should-retry": "true" if self.should_retry else "false"}
        if self.retry_after is not None:
            h.update(retry_after_headers(self.retry_after))
        return h


def retry_after_headers(seconds: float) -> dict[str, str]:
    """``Retry-After`` (whole seconds, rounded up, at least 1) and ``retry-after-ms`` (exact)."""
    ms = max(0, math.ceil(round(seconds * 1000, 3)))
    return {"Retry-After": str(max(1, math.ceil(ms / 1000))), "retry-after-ms": str(ms)}


class UpstreamHTTPError(Exception):
    """An upstream answered with an error status; carries an OpenAI-shaped error body to relay."""

    def __init__(self, status: int, body: dict[str, Any], retry_after: float | None = None) -> None:
        self.status = status
        self.body = body
        self.retry_after = retry_after
        super().__init__(f"upstream status {status}")


class UpstreamNetworkError(Exception):
    """Connection refused/reset, malformed response, or a timeout (``timeout=True``).

    ``code`` is what a stream that already started ends with (its error event and request log):
    ``upstream_stream_interrupted`` (cut, malformed), ``upstream_stream_idle`` (no event within the
    idle timeout) or ``upstream_stream_error`` (the upstream's own error event, relayed)."""

    def __init__(self, message: str, *, timeout: bool = False, code: str | None = None) -> None:
        self.timeout = timeout
        self.code = code or ("upstream_stream_idle" if timeout else "upstream_stream_interrupted")
        super().__init__(message)


class UpstreamOutcomeUnknown(UpstreamNetworkError):
    """A non-stream request reached the upstream, whose answer was then lost or unusable (a read timeout, a cut
    connection, a malformed body): it may have done — and billed — the work. A connection that was never made
    is a plain UpstreamNetworkError. An image call does not fail over on it (it must not be drawn twice); a
    chat or embedding call does, and if it then fails it is charged as answered (:meth:`Call.in_doubt
    <hearth.gateway.call.Call.in_doubt>`)."""
# the OpenAI Batch API (docs/batches.md)
CATALOG["batch_not_found"] = ErrorSpec(404, False, "invalid_request_error", "The batch does not exist.")
CATALOG["batch_state_conflict"] = ErrorSpec(409, False, "invalid_request_error",
                                            "The batch cannot do this in its current status.")
CATALOG["batch_expired"] = ErrorSpec(400, False, "invalid_request_error",
                                     "This request could not be executed before the completion window expired.")
