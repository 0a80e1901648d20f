"""The ``image_generate_async`` task type: an image generation run by a worker, its images kept in the
blob store and named in the task's result.

The payload is the body of ``POST /v1/images/generations`` (checked at submission: a bad one is a 400, never
a dead letter). The result::

    {"created": 1733220000, "model": "demo-image", "images": 2,
     "blob_keys": ["sha256/ab/cd/…", …],
     "data": [{"blob_key": "sha256/ab/cd/…", "sha256": "…", "size": 5120, "content_type": "image/png",
               "url": "/v1/images/files/<sha256>.png?expires=…&signature=…", "revised_prompt": null}, …]}

An image costs money every time it is drawn, so the type is **not safe to repeat**:

* ``repeat_safe=False`` — an attempt cut short by a dead worker (or handed back at shutdown) goes to
  ``hold`` for an operator, who checks the upstream's bill and releases or finishes it; it is never re-run
  blindly (:mod:`hearth.tasks.worker`);
* errors that leave the call *in doubt* (the upstream may have drawn and billed the images: a timeout, the
  deadline, an unexpected failure) are not retried: the task fails and opens a dead letter, which an operator
  may redrive knowingly. Errors where the upstream certainly drew nothing (429, a 5xx answer, no endpoint
  free) are retried like any model call;
* once the images are back they are kept and returned even if a cancel arrived meanwhile (they are paid for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from hearth.errors import HearthError
from hearth.gateway.context import CallContext
from hearth.images.requests import check_image_request
from hearth.images.service import ImageService
from hearth.tasks.capability_tasks import CapabilityServices
from hearth.tasks.retry import RetryPolicy
from hearth.tasks.types import TaskContext, TaskType, TaskTypes

__all__ = ["IMAGE_RETRY", "IMAGE_TASK", "ImageTasks"]

IMAGE_TASK: Final = "image_generate_async"
IN_DOUBT_CODES: Final = ("upstream_timeout", "deadline_exceeded", "internal_error", "upstream_stream_interrupted")
IMAGE_RETRY: Final = RetryPolicy(overrides=dict.fromkeys(IN_DOUBT_CODES, "fail"))


def validate_payload(payload: dict[str, Any]) -> dict[str, Any]:
    check_image_request(payload, param_prefix="payload.")
    if payload.get("response_format") not in (None, "url"):
        raise HearthError("invalid_request", "A task keeps its images in the blob store: `response_format` can only "
                          "be `url` (the result names each image's blob and a signed URL).",
                          param="payload.response_format")
    return payload


@dataclass(frozen=True, slots=True)
class ImageTasks:
    images: ImageService
    queue: str = "ai.default"

    def register(self, types: TaskTypes) -> None:
        types.register(TaskType(IMAGE_TASK, self.run, queue=self.queue, retry=IMAGE_RETRY, repeat_safe=False,
                                validate=validate_payload,
                                description="image generation, the images kept in the blob store (not safe to "
                                            "repeat: a crashed attempt is held for an operator)"))

    async def run(self, ctx: TaskContext) -> dict[str, Any]:
        svc: CapabilityServices = ctx.services
        request = check_image_request(ctx.payload, param_prefix="payload.")
        task = ctx.task
        caller = svc.gateway.registry.callers_by_name.get(task.caller)
        if caller is None or not caller.enabled:
            raise HearthError("caller_disabled", f"The caller `{task.caller}` that submitted the task is disabled "
                              "or gone.")
        call = CallContext(request_id=f"{task.id}.{task.attempt}", caller=caller, route="images",
                           end_user=request.user or task.end_user, tenant=task.tenant, task_id=task.id)
        ctx.check_cancel()
        ctx.progress(10, "generating")
        stored = await self.images.generate_stored(svc.gateway, call, request)
        ctx.record_versions(model=call.model)
        ctx.progress(95, "stored")
        return {"created": int(self.images.now()), "model": call.model, "images": len(stored),
                "blob_keys": [s.ref.key for s in stored], "data": [s.as_dict() for s in stored]}
