"""A document's content type, decided from its bytes — never from its file name or a declared type.

A name (``report.pdf``) and a declared type (a multipart part's ``Content-Type``, a server's header) are
claims anyone can make; the parser that runs later trusts the type recorded here, so it must be what the
bytes are. Recognised: PDF (``%PDF-`` at the start), PNG (its 8-byte signature), JPEG (``FF D8 FF``) and
plain text (valid UTF-8, a BOM allowed, without NUL bytes or other C0 control characters than tab, line
and page breaks — binary formats such as ZIP carry them in their first bytes). Anything else is refused with
``document_type_unsupported`` (415).

A declared type is still checked against the bytes when it names one of these types: a part sent as
``application/pdf`` holding text is a lie (a broken export, a renamed file) and is refused rather than
stored as text the caller did not mean to send. Generic declarations (``application/octet-stream``, none)
say nothing and are ignored.
"""

from __future__ import annotations

import re

from hearth.errors import HearthError

PDF = "application/pdf"
PNG = "image/png"
JPEG = "image/jpeg"
TEXT = "text/plain"
DOCUMENT_TYPES: tuple[str, ...] = (PDF, PNG, JPEG, TEXT)

_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (b"%PDF-", PDF),
    (b"\x89PNG\r\n\x1a\n", PNG),
    (b"\xff\xd8\xff", JPEG),
)
# What a declared type may be spelled as (lower case, parameters dropped) for each sniffed type.
_BINARY_CONTROLS = re.compile(rb"[\x00-\x08\x0e-\x1f]")  # all of C0 but \t \n \v \f \r
_ALIASES: dict[str, str] = {"image/jpg": JPEG, "image/pjpeg": JPEG, "application/x-pdf": PDF,
                            "text/x-plain": TEXT}


def sniff(data: bytes) -> str | None:
    """The content type of ``data`` (one of :data:`DOCUMENT_TYPES`), or None if it is none of them."""
    for signature, media in _SIGNATURES:
        if data.startswith(signature):
            return media
    if _BINARY_CONTROLS.search(data):
        return None
    try:
        data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
    return TEXT


def checked_type(data: bytes, *, declared: str | None = None,
                 allowed: tuple[str, ...] = DOCUMENT_TYPES) -> str:
    """The sniffed type of ``data`` if it is in ``allowed`` and agrees with ``declared`` (when that names
    a known type); else ``document_type_unsupported`` with ``details.reason``: ``unrecognised``,
    ``not_allowed`` or ``declared_type_mismatch``."""
    media = sniff(data)
    if media is None:
        raise HearthError("document_type_unsupported", details={"reason": "unrecognised",
                                                                "allowed": sorted(allowed)})
    if media not in allowed:
        raise HearthError("document_type_unsupported", f"Documents of type {media} are not accepted.",
                          details={"reason": "not_allowed", "content_type": media, "allowed": sorted(allowed)})
    claim = _declared(declared)
    if claim is not None and claim != media:
        raise HearthError("document_type_unsupported", f"The document was declared as {claim} but its bytes are "
                          f"{media}.", details={"reason": "declared_type_mismatch", "declared": claim,
                                               "content_type": media})
    return media


def _declared(declared: str | None) -> str | None:
    """The known type a declaration names, or None (absent, generic, unknown)."""
    if not declared:
        return None
    media = declared.split(";", 1)[0].strip().lower()
    media = _ALIASES.get(media, media)
    return media if media in DOCUMENT_TYPES else None
