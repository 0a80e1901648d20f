"""``http_post``: a built-in task type that POSTs a JSON body to a business system (a webhook, a REST endpoint).

Workflows persist their results and notify other systems through it (the lesson-preparation example's
``persist`` step). The call is made the way task callbacks are (:mod:`hearth.tasks.callbacks`): the URL is
checked by the outbound :class:`~hearth.capabilities.address_guard.AddressGuard` (``http``/``https`` only,
private addresses refused unless in ``HEARTH_CALLBACK_URL_ALLOW``) before every attempt, the resolved
address pinned (the scheme is checked when the task is submitted; a refused address fails the task at once,
``http_call_refused``); the body is signed under ``HEARTH_CALLBACK_SIGNING_KEY``
when one is set (``X-Timestamp``, ``X-Nonce``, ``X-Signature``, docs/signing.md).

Payload ``{"url": "...", "body": <any JSON>, "event": "lesson.persist"?, "timeout_s": 10?}``. The receiver
gets ``X-Hearth-Event`` (the event, if given) and ``X-Hearth-Delivery: <task id>`` — the same on every
attempt, so it can deduplicate a POST repeated after a worker died mid-call. Its answer decides:

* 2xx — the task succeeds with ``{"status": <code>, "body": <the answer's JSON, or its text (16 KiB at
  most), or null>}``;
* 408, 429, 5xx, a refused connection, a timeout — ``upstream_error`` / ``upstream_timeout``: retried by
  the engine's retry classes (exponential backoff, up to the task's ``max_attempts``);
* any other status — ``http_call_rejected``: the receiver refused the request, so it fails at once.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
from pydantic import BaseModel, ConfigDict, Field
from yarl import URL

from hearth.capabilities.address_guard import AddressGuard, CheckedTarget
from hearth.errors import HearthError
from hearth.tasks.types import TaskContext, TaskType, TaskTypes
from hearth.tasks.webhook_post import post_json
from hearth.validation import parse_model

__all__ = ["HTTP_POST", "HttpPost", "register_http_tasks"]

HTTP_POST = "http_post"
_KEPT_TEXT = 16 * 1024
_RETRIED_STATUSES = frozenset({408, 425, 429})


class HttpPost(BaseModel):
    """The payload of an ``http_post`` task."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(min_length=1, max_length=2048)
    body: Any = None
    event: str | None = Field(default=None, max_length=128)
    timeout_s: float = Field(default=10.0, gt=0, le=120)


def register_http_tasks(types: TaskTypes, *, guard: AddressGuard, signing_key: str | None,
                        queue: str = "ai.default") -> None:
    """Register ``http_post``, its URLs checked by ``guard`` and its bodies signed with ``signing_key``."""

    def validate(payload: dict[str, Any]) -> dict[str, Any]:
        body = parse_model(HttpPost, payload, "payload")
        if URL(body.url).scheme not in ("http", "https"):
            raise HearthError("http_call_refused", "The URL must be http or https.", param="payload.url")
        return payload

    async def run(ctx: TaskContext) -> dict[str, Any]:
        call = parse_model(HttpPost, ctx.payload, "payload")
        ctx.check_cancel()
        return await post(call, guard=guard, signing_key=signing_key, delivery_id=ctx.task.id)

    types.register(TaskType(HTTP_POST, run, queue=queue, validate=validate,
                            description="POST a JSON body to a URL (address-guarded, signed, retried)"))


async def _checked(guard: AddressGuard, url: str) -> CheckedTarget:
    try:
        return await guard.check_url(url)
    except HearthError as exc:
        if exc.retryable:  # a name that does not resolve now may resolve on the next attempt
            raise HearthError("upstream_error", f"The URL's host cannot be reached now: {exc.message}",
                              details={"url": url}) from None
        raise HearthError("http_call_refused", f"The URL is refused: {exc.message}", param="payload.url",
                          details={"url": url, **exc.details}) from None


async def post(call: HttpPost, *, guard: AddressGuard, signing_key: str | None, delivery_id: str) -> dict[str, Any]:
    """One POST of ``call``; its outcome as the module's docstring says."""
    target = await _checked(guard, call.url)
    body = orjson.dumps(call.body)
    try:
        async with aiohttp.ClientSession() as session, post_json(
                session, target, body, delivery_id=delivery_id, event=call.event, signing_key=signing_key,
                timeout_s=call.timeout_s) as resp:
            raw = await resp.content.read(_KEPT_TEXT + 1)
            status = resp.status
    except TimeoutError:
        raise HearthError("upstream_timeout", f"{target.host_header} did not answer within {call.timeout_s:g} s.",
                          details={"url": call.url}) from None
    except aiohttp.ClientError as exc:
        raise HearthError("upstream_error", f"POST to {target.host_header} failed: {type(exc).__name__}.",
                          details={"url": call.url}) from None
    if 200 <= status < 300:
        return {"status": status, "body": _answer(raw)}
    details = {"url": call.url, "status": status}
    if status >= 500 or status in _RETRIED_STATUSES:
        raise HearthError("upstream_error", f"{target.host_header} answered {status}.", details=details)
    raise HearthError("http_call_rejected", f"{target.host_header} refused the request ({status}).", details=details)


def _answer(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:_KEPT_TEXT].decode("utf-8", "replace")
