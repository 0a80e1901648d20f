"""Document types come from the bytes: signatures, UTF-8 text, and declared types that lie are refused."""

from __future__ import annotations

import pytest

from hearth.documents.sniff import DOCUMENT_TYPES, JPEG, PDF, PNG, TEXT, checked_type, sniff
from hearth.errors import HearthError

PDF_BYTES = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n%%EOF\n"
PNG_BYTES = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + b"\x00" * 17
JPEG_BYTES = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01"


@pytest.mark.parametrize(("data", "media"), [
    (PDF_BYTES, PDF), (PNG_BYTES, PNG), (JPEG_BYTES, JPEG),
    (b"revenue grew 12%\n", TEXT), ("营业收入同比增长 12%".encode(), TEXT), (b"\xef\xbb\xbfwith a BOM", TEXT),
    (b"", TEXT), (b"col\tcol\r\nnext page\x0c\x0bend", TEXT),
])
def test_known_types_are_recognised_by_their_bytes(data: bytes, media: str) -> None:
    assert sniff(data) == media


@pytest.mark.parametrize("data", [
    b"PK\x03\x04\x14\x00\x00\x00",  # a ZIP (docx, xlsx)
    b"text with a \x00 NUL", b"text with a \x1b escape",
    "GB18030 文本".encode("gb18030"),  # not UTF-8
    b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1",  # an OLE2 .doc
    b" %PDF-1.4 not at the start",  # text, in fact — but see the next test: declared as PDF it is refused
])
def test_anything_else_is_not_a_document_type(data: bytes) -> None:
    assert sniff(data) in (None, TEXT)
    if sniff(data) is None:
        with pytest.raises(HearthError) as caught:
            checked_type(data)
        assert caught.value.code == "document_type_unsupported" and caught.value.status == 415
        assert caught.value.details["reason"] == "unrecognised"


@pytest.mark.parametrize("declared", ["application/pdf", "Application/PDF; charset=binary", "application/x-pdf"])
def test_text_declared_as_a_pdf_is_refused_as_a_lie(declared: str) -> None:
    with pytest.raises(HearthError) as caught:
        checked_type(b"Just text pretending to be a PDF.", declared=declared)
    assert caught.value.code == "document_type_unsupported"
    assert caught.value.details == {"reason": "declared_type_mismatch", "declared": PDF, "content_type": TEXT}


@pytest.mark.parametrize("declared", [None, "", "application/octet-stream", "binary/octet-stream", "text/markdown",
                                      "application/pdf-ish", "image/jpg"])
def test_generic_or_unknown_declarations_say_nothing_and_aliases_count(declared: str | None) -> None:
    assert checked_type(JPEG_BYTES, declared=declared) == JPEG
    if declared != "image/jpg":
        assert checked_type(PDF_BYTES, declared=declared) == PDF


def test_a_type_the_operator_did_not_allow_is_refused() -> None:
    with pytest.raises(HearthError) as caught:
        checked_type(PNG_BYTES, allowed=(PDF, TEXT))
    assert caught.value.details["reason"] == "not_allowed"
    assert set(DOCUMENT_TYPES) == {PDF, PNG, JPEG, TEXT}
