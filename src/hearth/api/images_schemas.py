"""Documentation models of the images door (``/openapi.json``); requests are checked by
:func:`hearth.images.requests.check_image_request`, which these models describe."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from hearth.gateway.image_calls import MAX_IMAGES
from hearth.images.requests import MAX_PROMPT_CHARS


class ImageGenerationRequest(BaseModel):
    """What ``POST /v1/images/generations`` accepts (OpenAI's format)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [
        {"model": "demo-image", "prompt": "A lighthouse at dawn", "size": "256x256", "response_format": "b64_json"},
    ]})
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    model: str = Field(min_length=1, examples=["demo-image"], description="A public model of kind `image`.")
    n: int | None = Field(default=None, ge=1, le=MAX_IMAGES)
    size: str | None = Field(default=None, pattern=r"^(auto|[1-9][0-9]{0,3}x[1-9][0-9]{0,3})$",
                             description="`WIDTHxHEIGHT`; routed only to endpoints whose `image_sizes` list it.")
    response_format: Literal["url", "b64_json"] | None = Field(
        default=None, description="`url` (default): a signed Hearth URL, valid for `HEARTH_IMAGE_URL_TTL_S`.")
    quality: Literal["auto", "standard", "hd", "low", "medium", "high"] | None = None
    style: Literal["vivid", "natural"] | None = None
    background: Literal["auto", "transparent", "opaque"] | None = None
    moderation: Literal["auto", "low"] | None = None
    output_format: Literal["png"] | None = None
    user: str | None = None


class Image(BaseModel):
    b64_json: str | None = None
    url: str | None = None
    revised_prompt: str | None = None


class ImagesResponse(BaseModel):
    model_config = ConfigDict(extra="allow")
    created: int
    data: list[Image]
