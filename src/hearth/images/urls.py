"""Signed, expiring URLs for stored images — what ``response_format: url`` returns.

A generated image is stored in the blob store (content addressed, :mod:`hearth.documents.blobs`) and handed
back as ``/v1/images/files/<sha256>.png?expires=<unix time>&signature=<HMAC>``. The signature is
HMAC-SHA256 over the file name and the expiry, keyed with a key derived from the master key (never the
master key itself), so:

* the URL works without an ``Authorization`` header — in an ``<img>`` tag, a browser, a downstream service
  — like OpenAI's own image URLs, and only until ``expires`` (``HEARTH_IMAGE_URL_TTL_S``, 1 hour by default);
* nobody can name another blob: a document's SHA-256, however it is learnt, has no valid signature;
* every process of a deployment verifies every other's URLs (same master key), with no lookup.

Whoever holds the URL can fetch the image until it expires: treat it as a bearer secret (as OpenAI's are).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from dataclasses import dataclass
from typing import Final

from hearth.errors import HearthError

__all__ = ["FILES_PATH", "ImageUrls", "derive_key"]

FILES_PATH: Final = "/v1/images/files/"
_KEY_LABEL: Final = b"hearth/images/url-key/v1"
_NAME: Final = re.compile(r"([0-9a-f]{64})\.(png|jpg|webp)")


def derive_key(master_key: bytes) -> bytes:
    """The URL-signing key: HMAC(master key, a fixed label), a one-way derivation."""
    return hmac.new(master_key, _KEY_LABEL, hashlib.sha256).digest()


@dataclass(frozen=True, slots=True)
class ImageUrls:
    key: bytes
    ttl_s: float

    def _mac(self, name: str, expires: int) -> str:
        digest = hmac.new(self.key, f"image:{name}:{expires}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()

    def path(self, sha256: str, extension: str, *, now: float) -> str:
        """The signed path (no scheme or host) of the stored image, valid for :attr:`ttl_s` from ``now``."""
        name = f"{sha256}.{extension}"
        expires = int(now + self.ttl_s)
        return f"{FILES_PATH}{name}?expires={expires}&signature={self._mac(name, expires)}"

    def verify(self, name: str, expires: str | None, signature: str | None, *, now: float) -> str:
        """The SHA-256 the signed ``name`` stands for; 403 ``image_url_invalid`` unless the signature is this
        deployment's and ``expires`` has not passed (checked in constant time; a malformed URL is the same 403)."""
        match = _NAME.fullmatch(name)
        if match is None or expires is None or signature is None or not expires.isdigit() or len(expires) > 12:
            raise HearthError("image_url_invalid")
        if not hmac.compare_digest(self._mac(name, int(expires)), signature) or int(expires) < now:
            raise HearthError("image_url_invalid")
        return match[1]
