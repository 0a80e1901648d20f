"""OpenAPI documentation models of ``/v1/files`` and ``/v1/batches`` (OpenAI's File and Batch objects).

The routes check bodies by hand (:mod:`hearth.batches.service`) and render the objects the services build;
these models describe them so the published document matches what is sent.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class FileObject(BaseModel):
    id: str
    object: Literal["file"]
    bytes: int
    created_at: int
    filename: str
    purpose: str
    status: Literal["processed"]
    status_details: None = None
    expires_at: int | None = None


class FileList(BaseModel):
    object: Literal["list"]
    data: list[FileObject]
    first_id: str | None
    last_id: str | None
    has_more: bool


class FileDeleted(BaseModel):
    id: str
    object: Literal["file"]
    deleted: bool


class BatchCreate(BaseModel):
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"input_file_id": "file-abc123", "endpoint": "/v1/chat/completions", "completion_window": "24h"}]})

    input_file_id: str = Field(min_length=1, description="a file uploaded with purpose `batch`")
    endpoint: Literal["/v1/chat/completions", "/v1/embeddings"] = Field(description="what every line calls")
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = Field(default=None, description="up to 16 pairs")


class BatchError(BaseModel):
    code: str
    message: str
    param: str | None = None
    line: int | None = None


class BatchErrors(BaseModel):
    object: Literal["list"]
    data: list[BatchError]


class RequestCounts(BaseModel):
    total: int
    completed: int
    failed: int


class BatchObject(BaseModel):
    id: str
    object: Literal["batch"]
    endpoint: str
    errors: BatchErrors | None
    input_file_id: str
    completion_window: str
    status: Literal["validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling",
                    "cancelled"]
    output_file_id: str | None
    error_file_id: str | None
    created_at: int
    in_progress_at: int | None
    expires_at: int | None
    finalizing_at: int | None
    completed_at: int | None
    failed_at: int | None
    expired_at: int | None
    cancelling_at: int | None
    cancelled_at: int | None
    request_counts: RequestCounts
    metadata: dict[str, Any] | None


class BatchList(BaseModel):
    object: Literal["list"]
    data: list[BatchObject]
    first_id: str | None
    last_id: str | None
    has_more: bool
