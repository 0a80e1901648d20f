"""An image generation request in OpenAI's format, checked before anything is charged.

The same checks serve ``POST /v1/images/generations`` and the ``image_generate_async`` task's payload (at
submission, so a bad payload is a 400 and never a dead letter). What the caller asked for is split in two:
the body sent through the gateway to the upstream (always asking for ``b64_json``: Hearth keeps the bytes
itself, see :mod:`hearth.images.service`) and how the caller wants the images back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from hearth.errors import HearthError
from hearth.gateway.image_calls import MAX_IMAGES
from hearth.wire.image_size import AUTO, MAX_SIDE, parse_size

__all__ = ["ImageRequest", "check_image_request"]

MAX_PROMPT_CHARS: Final = 32_000  # gpt-image-1's limit (dall-e-3: 4,000; the upstream refuses what it cannot take)
ResponseFormat = Literal["url", "b64_json"]
_CHOICES: Final = {
    "quality": ("auto", "standard", "hd", "low", "medium", "high"),
    "style": ("vivid", "natural"),
    "background": ("auto", "transparent", "opaque"),
    "moderation": ("auto", "low"),
}
_KNOWN: Final = frozenset({"prompt", "model", "n", "size", "response_format", "user", "output_format",
                           "output_compression", "stream", *_CHOICES})


@dataclass(frozen=True, slots=True)
class ImageRequest:
    """``upstream``: the body for the gateway (``model`` as the caller named it); ``response_format``: how the
    images go back; ``user``: the end user the request names (limits and budgets per user)."""

    upstream: dict[str, Any]
    response_format: ResponseFormat
    user: str | None


def _bad(message: str, param: str) -> HearthError:
    return HearthError("invalid_request", message, param=param)


def check_image_request(body: dict[str, Any], *, param_prefix: str = "") -> ImageRequest:
    """The checked request; 400 ``invalid_request`` (with ``param``) for anything OpenAI would refuse too,
    400 ``unsupported_feature`` for what Hearth does not do (streaming, other formats than PNG)."""
    p = param_prefix
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise _bad(f"Unrecognized request argument supplied: {unknown[0]}", p + unknown[0])
    prompt = body.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        raise _bad("`prompt` is required and must be a non-empty string.", p + "prompt")
    if len(prompt) > MAX_PROMPT_CHARS:
        raise _bad(f"`prompt` is longer than {MAX_PROMPT_CHARS} characters.", p + "prompt")
    upstream: dict[str, Any] = {"prompt": prompt}
    model = body.get("model")
    if model is not None:
        if not isinstance(model, str) or not model:
            raise _bad("`model` must be a non-empty string.", p + "model")
        upstream["model"] = model
    n = body.get("n")
    if n is not None:
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_IMAGES:
            raise _bad(f"`n` must be an integer from 1 to {MAX_IMAGES}.", p + "n")
        upstream["n"] = n
    size = body.get("size")
    if size is not None:
        if not isinstance(size, str) or (size != AUTO and parse_size(size) is None):
            raise _bad(f"`size` must be `auto` or WIDTHxHEIGHT (e.g. 1024x1024, each side at most {MAX_SIDE}).",
                       p + "size")
        upstream["size"] = size
    for name, allowed in _CHOICES.items():
        value = body.get(name)
        if value is not None:
            if value not in allowed:
                raise _bad(f"`{name}` must be one of: {', '.join(allowed)}.", p + name)
            upstream[name] = value
    asked = body.get("response_format") or "url"
    if asked not in ("url", "b64_json"):
        raise _bad("`response_format` must be `url` or `b64_json`.", p + "response_format")
    response_format: ResponseFormat = "url" if asked == "url" else "b64_json"
    output_format = body.get("output_format")
    if output_format is not None and output_format != "png":
        raise HearthError("unsupported_feature", "Hearth keeps and serves PNG images only: `output_format` must be "
                          "`png`.", param=p + "output_format")
    if body.get("output_compression") is not None:
        raise HearthError("unsupported_feature", "`output_compression` applies to JPEG and WebP only; Hearth "
                          "serves PNG.", param=p + "output_compression")
    if body.get("stream"):
        raise HearthError("unsupported_feature", "Image generation cannot stream through Hearth.", param=p + "stream")
    user = body.get("user")
    if user is not None and not isinstance(user, str):
        raise _bad("`user` must be a string.", p + "user")
    if user:
        upstream["user"] = user
    upstream["response_format"] = "b64_json"
    return ImageRequest(upstream, response_format, user[:256] if user else None)
