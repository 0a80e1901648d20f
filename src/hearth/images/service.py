"""Image generation as the route and the task both run it: one gateway call, then the images kept.

:meth:`ImageService.generate` sends the checked request through :meth:`Gateway.generate_images` (admission,
per-image budgets, routing by capability and size, failover, the request log) and shapes the answer:

* ``b64_json`` — the upstream's images as they came (base64 checked);
* ``url`` — each image put in the blob store (content addressed: the same bytes are one object) and
  returned as a signed, expiring Hearth URL (:mod:`hearth.images.urls`). An upstream that ignored
  ``b64_json`` and answered with its own URL has that URL passed on as is (Hearth never fetches it).

:meth:`ImageService.generate_stored` is the task's variant: every image is stored and described by its blob
key, SHA-256, size, content type and a signed path, so the task's result names what it produced.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from hearth.documents.blobs import BlobCorrupted, BlobNotFound, BlobRef, BlobStore, blob_key
from hearth.documents.sniff import JPEG, PNG
from hearth.errors import HearthError
from hearth.gateway.context import CallContext
from hearth.gateway.service import Gateway
from hearth.images.requests import ImageRequest
from hearth.images.urls import ImageUrls

__all__ = ["ImageService", "StoredImage"]

WEBP = "image/webp"
_EXTENSIONS = {PNG: "png", JPEG: "jpg", WEBP: "webp"}
_TYPES = {ext: media for media, ext in _EXTENSIONS.items()}


def image_type(data: bytes) -> str | None:
    """PNG, JPEG or WebP by their signatures; None for anything else."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return PNG
    if data.startswith(b"\xff\xd8\xff"):
        return JPEG
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return WEBP
    return None


@dataclass(frozen=True, slots=True)
class StoredImage:
    """One image kept in the blob store, as a task's result names it."""

    ref: BlobRef
    path: str  # the signed path (no host): GET it on any Hearth process until it expires
    revised_prompt: str | None

    def as_dict(self) -> dict[str, Any]:
        return {"blob_key": self.ref.key, "sha256": self.ref.sha256, "size": self.ref.size,
                "content_type": self.ref.content_type, "url": self.path, "revised_prompt": self.revised_prompt}


@dataclass(slots=True)
class ImageService:
    blobs: BlobStore
    urls: ImageUrls
    now: Callable[[], float] = field(default=time.time)

    async def generate(self, gateway: Gateway, ctx: CallContext, request: ImageRequest, *,
                       base_url: str) -> dict[str, Any]:
        """OpenAI's images response for ``request`` (``url`` items are ``base_url`` + a signed path)."""
        answer = await self._call(gateway, ctx, request)
        if request.response_format == "b64_json":
            for item in answer["data"]:
                if isinstance(item.get("b64_json"), str):
                    _decoded(item["b64_json"])  # the caller gets valid base64 or an error, never garbage
            return answer
        data = []
        for item in answer["data"]:
            if isinstance(item.get("b64_json"), str):
                stored = await self._store(item)
                item = {k: v for k, v in item.items() if k != "b64_json"}
                item["url"] = base_url.rstrip("/") + stored.path
            data.append(item)
        return {**answer, "data": data}

    async def generate_stored(self, gateway: Gateway, ctx: CallContext, request: ImageRequest) -> list[StoredImage]:
        """Every image of the answer kept in the blob store (an upstream's own URL cannot be: upstream_error)."""
        answer = await self._call(gateway, ctx, request)
        out = []
        for item in answer["data"]:
            if not isinstance(item.get("b64_json"), str):
                raise HearthError("upstream_error", "The upstream answered with an image URL instead of the image; "
                                  "a task stores only images it received.")
            out.append(await self._store(item))
        return out

    async def read(self, name: str, *, expires: str | None, signature: str | None) -> tuple[bytes, str, int]:
        """The bytes, content type and expiry (unix time) of a signed image URL's file."""
        sha256 = self.urls.verify(name, expires, signature, now=self.now())
        try:
            data = await self.blobs.get(blob_key(sha256))
        except BlobNotFound:
            raise HearthError("image_not_found") from None
        except BlobCorrupted:
            raise HearthError("internal_error", "The stored image is damaged.") from None
        media = _TYPES[name.rsplit(".", 1)[1]]
        return data, media, int(expires or 0)

    async def _call(self, gateway: Gateway, ctx: CallContext, request: ImageRequest) -> dict[str, Any]:
        reply = await gateway.generate_images(ctx, request.upstream)
        answer = orjson.loads(reply.body)
        if not isinstance(answer, dict) or not isinstance(answer.get("data"), list) \
                or not all(isinstance(item, dict) for item in answer["data"]):
            raise HearthError("upstream_error", "The upstream's images answer has no `data` list.")
        answer.setdefault("created", int(self.now()))
        return answer

    async def _store(self, item: dict[str, Any]) -> StoredImage:
        data = _decoded(item["b64_json"])
        media = image_type(data)
        if media is None:
            raise HearthError("upstream_error", "The upstream sent an image that is not PNG, JPEG or WebP.")
        ref = await self.blobs.put(data, content_type=media)
        revised = item.get("revised_prompt")
        return StoredImage(ref, self.urls.path(ref.sha256, _EXTENSIONS[media], now=self.now()),
                           revised if isinstance(revised, str) else None)


def _decoded(b64: str) -> bytes:
    try:
        return base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        raise HearthError("upstream_error", "The upstream sent an image that is not valid base64.") from None
