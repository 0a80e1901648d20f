"""The capability requests' bodies (validated, unknown fields refused) and the call each one describes.

One definition serves the synchronous API (``/api/v1/ai/summarize`` …), whose OpenAPI document they
describe, and the task engine's capability tasks (``summarize_async`` …), whose payloads are the same
bodies — so an async task means exactly what the sync call means.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hearth.capabilities import bill
from hearth.capabilities.service import CapabilityCall
from hearth.capabilities.structured import check_schema
from hearth.errors import HearthError
from hearth.prompts.catalog import CatalogSnapshot
from hearth.registry.snapshot import Caller


class CapabilityRequest(BaseModel):
    """The fields every capability request takes."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    locale: str | None = Field(default=None, max_length=35, description="e.g. `zh-CN`: picks the prompt's "
                               "localized content (zh-CN → zh → the prompt's default)", examples=["zh-CN"])
    scene: str | None = Field(default=None, max_length=128, description="the business scene (model rules)")
    model: str | None = Field(default=None, max_length=128, description="a public model name allowed in the scene; "
                              "default: the prompt's, the role's, or the scene's default model")
    max_tokens: int | None = Field(default=None, ge=1, le=2**31 - 1)
    user: str | None = Field(default=None, max_length=256, description="the end user (limits, budgets)")
    tenant: str | None = Field(default=None, max_length=256)
    prompt_code: str | None = Field(default=None, max_length=128, description="default: the capability's own")
    variables: dict[str, Any] | None = Field(default=None, description="the prompt's declared variables")


class _Input(CapabilityRequest):
    text: str | None = Field(default=None, description="the input text (first of text, ocr_text, file_id, "
                             "file_url that is given)")
    ocr_text: str | None = None
    file_id: str | None = Field(default=None, description="a relative path inside HEARTH_FILE_ROOT")
    file_url: str | None = Field(default=None, description="http(s); private addresses refused unless "
                                 "allowlisted (HEARTH_FILE_URL_ALLOW)")


class SummarizeRequest(_Input):
    max_sentences: int | None = Field(default=None, ge=1, le=50)

    model_config = ConfigDict(json_schema_extra={"examples": [{"text": "Hearth is a self-hosted AI service. ...",
                                                               "locale": "en", "max_sentences": 2}]})


class ExtractRequest(_Input):
    schema_: dict[str, Any] | None = Field(default=None, alias="schema", description="an inline JSON Schema")
    schema_code: str | None = Field(default=None, max_length=128, description="`bill`, or a prompt code whose "
                                    "active version has an output schema")

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "text": "Order 42 shipped to Alice on 2026-03-01.",
        "schema": {"type": "object", "properties": {"order": {"type": "integer"}, "name": {"type": "string"}},
                   "required": ["order", "name"]}}]})


class BillRequest(_Input):
    model_config = ConfigDict(json_schema_extra={"examples": [{"ocr_text": "Invoice INV-7\nTotal: $12.50"}]})


class GenerateRequest(CapabilityRequest):
    role: str | None = Field(default=None, max_length=128, description="a role bound to a prompt")

    model_config = ConfigDict(json_schema_extra={"examples": [{"prompt_code": "question_generation",
                                                               "variables": {"topic": "fractions", "count": 3}}]})


class CapabilityChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant", "system"]
    content: str


class ChatRequest(CapabilityRequest):
    role: str | None = Field(default=None, max_length=128, description="the persona (system prompt), its "
                             "default prompt and model")
    messages: list[CapabilityChatMessage] = Field(min_length=1, max_length=500)
    stream: bool = False
    request_id: str | None = Field(default=None, max_length=64, description="makes the call idempotent (planned)")

    model_config = ConfigDict(json_schema_extra={"examples": [{"messages": [{"role": "user", "content": "Hi"}]}]})



REQUEST_MODELS: dict[str, type[CapabilityRequest]] = {
    "summarize": SummarizeRequest, "extract": ExtractRequest, "extract_bill": BillRequest,
    "generate": GenerateRequest, "chat": ChatRequest,
}


def call_from_body(capability: str, body: CapabilityRequest, *, caller: Caller, request_id: str,
                   snapshot: CatalogSnapshot, tenant: str | None = None, user: str | None = None,
                   scene: str | None = None, client_ip: str | None = None, nonce: Any = None,
                   timeout_s: float | None = None) -> CapabilityCall:
    """The :class:`CapabilityCall` a validated body asks for (input text not yet read: see ``sources``).

    ``tenant``, ``user`` and ``scene`` are the request's headers' values, used when the body has none.
    Raises 400/404 for a body that is valid JSON but asks for something that does not exist.
    """
    tenant = body.tenant or tenant
    user = body.user or user
    call = CapabilityCall(capability=capability, request_id=request_id, caller=caller, prompt_code=body.prompt_code,
                          role=getattr(body, "role", None), variables=dict(body.variables or {}), locale=body.locale,
                          scene=body.scene or scene, model=body.model, max_tokens=body.max_tokens,
                          end_user=user[:256] if user else None, tenant=tenant[:256] if tenant else None,
                          client_ip=client_ip, nonce=nonce, timeout_s=timeout_s)
    if isinstance(body, SummarizeRequest) and body.max_sentences is not None:
        call.variables.setdefault("max_sentences", body.max_sentences)
    elif isinstance(body, ExtractRequest):
        if body.schema_ is not None:
            check_schema(body.schema_)
            call.schema = body.schema_
        elif body.schema_code is not None:
            call.schema = schema_by_code(snapshot, body.schema_code)
    elif isinstance(body, GenerateRequest) and body.prompt_code is None and body.role is None:
        raise HearthError("invalid_request", "`prompt_code` or `role` is required.", param="prompt_code")
    elif isinstance(body, ChatRequest):
        call.messages = [m.model_dump() for m in body.messages]
    return call


def schema_by_code(snapshot: CatalogSnapshot, code: str) -> dict[str, Any]:
    """A built-in schema (``bill``) or the output schema of an active prompt of that code."""
    if code == bill.BILL_SCHEMA_CODE:
        return bill.BILL_SCHEMA
    version = snapshot.active.get(code)
    if version is None or version.output_schema is None:
        raise HearthError("schema_not_found", f"No schema `{code}`: use `bill` or the code of an active prompt "
                          "with an output schema.", param="schema_code")
    return dict(version.output_schema)
