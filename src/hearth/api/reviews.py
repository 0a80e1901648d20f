"""The human review queue (admin): raise, list, read, claim, release and decide review items.

Reviewers are named in each request (Hearth does not sign reviewers in yet; the operator console in front
of this API does): a claim is a lease in that name, and only its holder can decide. See
:mod:`hearth.workflows.reviews` for the rules — among them, a timer never approves anything.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import Depends, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from hearth.api.admin_schemas import ADMIN_ERROR_RESPONSES
from hearth.api.deps import read_json_object, require_admin, runtime
from hearth.api.envelope import ok
from hearth.api.openai_schemas import request_body
from hearth.api.request_body import parse_model
from hearth.api.route_defaults import api_router
from hearth.errors import HearthError
from hearth.registry.names import RegistryName
from hearth.workflows.reviews import STATES, ReviewRequest, ReviewService

router = api_router(prefix="/api/v1/reviews", tags=["reviews"], dependencies=[Depends(require_admin)],
                   responses=ADMIN_ERROR_RESPONSES)

Reviewer = RegistryName


class ReviewCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{
        "title": "Approve the lesson plan for class 3B", "queue": "teachers", "subject_kind": "external",
        "payload": {"plan": "…"}, "evidence": [{"source_page": 3, "quote": "…"}], "timeout_s": 86400,
        "form": {"type": "object", "required": ["plan"], "properties": {"plan": {"type": "string"}}}}]})

    title: str = Field(min_length=1, max_length=256)
    payload: dict[str, Any] = Field(description="the thing to decide")
    timeout_s: float = Field(gt=0, le=31 * 86400, description="undecided this long after it is raised, it expires "
                             "(never approved)")
    queue: RegistryName = "default"
    subject_kind: Literal["task", "workflow_step", "document", "external"] = "external"
    subject_id: str | None = Field(default=None, max_length=128)
    evidence: list[Any] | dict[str, Any] = Field(default_factory=list)
    form: dict[str, Any] | None = Field(default=None, description="JSON Schema a `modify` decision's payload "
                                        "must satisfy")
    caller: RegistryName | None = None


class Claim(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reviewer: Reviewer
    lease_s: float = Field(default=300.0, gt=0, le=86400, description="how long the claim holds without renewal")


class Release(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reviewer: Reviewer


class Decide(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reviewer: Reviewer
    decision: Literal["approve", "modify", "reject"]
    reason: str = Field(min_length=1, max_length=2000)
    payload: dict[str, Any] | None = Field(default=None, description="the modified payload (modify only)")


def _service(request: Request) -> ReviewService:
    return runtime(request).reviews


def review_view(row: Any) -> dict[str, Any]:
    return {k: row[k] for k in ("id", "queue", "caller", "subject_kind", "subject_id", "title", "payload", "evidence",
                                "form", "state", "assignee", "claim_until", "decision", "decided_by", "reason",
                                "history", "created_at", "expires_at", "decided_at", "updated_at")}


@router.post("", summary="Raise a review item", openapi_extra=request_body(ReviewCreate))
async def raise_review(request: Request) -> Response:
    body = parse_model(ReviewCreate, await read_json_object(request), "review")
    row = await _service(request).raise_item(ReviewRequest(
        title=body.title, payload=body.payload, timeout_s=body.timeout_s, queue=body.queue,
        subject_kind=body.subject_kind, subject_id=body.subject_id, evidence=body.evidence, form=body.form,
        caller=body.caller))
    return ok(request, review_view(row), status=201)


@router.get("", summary="Review items, oldest first (filters: queue, state, assignee, age; keyset `cursor`)")
async def list_reviews(request: Request, *, queue: str | None = None, state: str | None = None,
                       assignee: str | None = None, older_than_s: float | None = None, cursor: str | None = None,
                       limit: int = 50) -> Response:
    if state is not None and state not in STATES:
        raise HearthError("invalid_request", f"`state` is one of {', '.join(STATES)}.", param="state")
    if not 1 <= limit <= 500:
        raise HearthError("invalid_request", "`limit` is between 1 and 500.", param="limit")
    if older_than_s is not None and not 0 <= older_than_s <= 10 * 365 * 86400:
        raise HearthError("invalid_request", "`older_than_s` is between 0 and ten years.", param="older_than_s")
    rows, next_cursor = await _service(request).page(queue=queue, state=state, assignee=assignee,
                                                     older_than_s=older_than_s, cursor=cursor, limit=limit)
    return ok(request, {"reviews": [review_view(r) for r in rows], "next_cursor": next_cursor})


@router.get("/{review_id}", summary="One review item with its history")
async def get_review(review_id: str, request: Request) -> Response:
    return ok(request, review_view(await _service(request).get(review_id)))


@router.post("/{review_id}/claim", summary="Take (or renew) the item's lease; 409 if another reviewer holds it",
             openapi_extra=request_body(Claim))
async def claim_review(review_id: str, request: Request) -> Response:
    body = parse_model(Claim, await read_json_object(request), "claim")
    return ok(request, review_view(await _service(request).claim(review_id, reviewer=body.reviewer,
                                                                 lease_s=body.lease_s)))


@router.post("/{review_id}/release", summary="Give the claim back", openapi_extra=request_body(Release))
async def release_review(review_id: str, request: Request) -> Response:
    body = parse_model(Release, await read_json_object(request), "release")
    return ok(request, review_view(await _service(request).release(review_id, reviewer=body.reviewer)))


@router.post("/{review_id}/decide", summary="Approve, modify (payload checked against the form) or reject — once, "
             "by the claim's holder", openapi_extra=request_body(Decide))
async def decide_review(review_id: str, request: Request) -> Response:
    body = parse_model(Decide, await read_json_object(request), "decision")
    return ok(request, review_view(await _service(request).decide(
        review_id, reviewer=body.reviewer, decision=body.decision, reason=body.reason, payload=body.payload)))
