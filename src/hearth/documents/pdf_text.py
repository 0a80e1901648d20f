"""The text layer of a PDF, page by page, with PDFium (``pypdfium2``).

:func:`parse_pdf` walks the pages in order; each page and its text page are closed before the next is
loaded, the document is reopened every :data:`REOPEN_EVERY` pages (PDFium otherwise keeps every content
stream it loaded until the end), and nothing is rendered unless an OCR engine is given (then only the
pages that need it, one at a time). Memory therefore stays at the file itself plus a window of pages,
whatever the page count (bench/BENCHMARKS.md, issue 12).

What it does not do: layout analysis (columns, reading order beyond PDFium's own), tables (see
:mod:`hearth.documents.pdf_tables`) or OCR by itself. A page whose text layer is empty or almost empty
while it draws images or vector graphics is returned with ``needs_ocr=True`` — most likely a scan; an
:class:`OcrEngine` can be plugged in to read such pages, and without one they simply stay flagged.

Errors (never retryable — the same bytes fail the same way): ``pdf_corrupted`` when PDFium cannot open
the file, ``pdf_encrypted`` when it needs a password (or uses a security handler PDFium does not
support), ``document_too_many_pages`` above ``max_pages`` (checked before any page is read).

**Threads.** PDFium is not thread-safe: two threads must never be inside it at once, even on
different documents. Every function of this package that calls PDFium holds :data:`PDFIUM_LOCK` for the
whole call, so callers may use them from worker threads (``asyncio.to_thread``) without more care; they
must not be called on the event loop's thread, since a large document holds the lock for a while.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import pypdfium2 as pdfium
import pypdfium2.raw as pdfium_c

from hearth.errors import HearthError

PDFIUM_LOCK = threading.RLock()
"""Held around every PDFium call of this package (PDFium is not thread-safe)."""

OCR_CHAR_THRESHOLD = 20
"""A page with fewer non-whitespace characters than this and some drawing on it needs OCR."""

REOPEN_EVERY = 50
"""Pages read per opening of the document (see :func:`parse_pdf`)."""

_GRAPHIC_OBJECT_TYPES = frozenset({pdfium_c.FPDF_PAGEOBJ_IMAGE, pdfium_c.FPDF_PAGEOBJ_PATH,
                                   pdfium_c.FPDF_PAGEOBJ_SHADING, pdfium_c.FPDF_PAGEOBJ_FORM})
_PASSWORD_ERRORS = frozenset({pdfium_c.FPDF_ERR_PASSWORD, pdfium_c.FPDF_ERR_SECURITY})
# PDFium's markers (a hyphen it joined at a line end, NUL padding) are not text.
_DROP = str.maketrans({"\x00": None, "\x02": None, "\ufffe": None, "\r": None})


@dataclass(frozen=True, slots=True)
class PageText:
    """One page's text. ``number`` is 1-based (what a reader and a ``source_page`` say); ``chars`` counts
    the non-whitespace characters of ``text``; ``from_ocr`` says the text came from an OCR engine."""

    number: int
    text: str
    needs_ocr: bool
    chars: int
    from_ocr: bool = False


@dataclass(frozen=True, slots=True)
class ParsedPdf:
    page_count: int
    pages: list[PageText] = field(default_factory=list)

    def text_by_page(self) -> dict[int, str]:
        """``{page number: text}``, the shape :func:`hearth.documents.evidence.check_value` takes."""
        return {p.number: p.text for p in self.pages}

    @property
    def pages_needing_ocr(self) -> list[int]:
        return [p.number for p in self.pages if p.needs_ocr]

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON (a step's stored output, so a later step never parses the PDF again)."""
        return {"page_count": self.page_count,
                "pages": [{"number": p.number, "text": p.text, "needs_ocr": p.needs_ocr, "chars": p.chars,
                           "from_ocr": p.from_ocr} for p in self.pages]}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> ParsedPdf:
        return cls(page_count=int(raw["page_count"]),
                   pages=[PageText(number=int(p["number"]), text=str(p["text"]), needs_ocr=bool(p["needs_ocr"]),
                                   chars=int(p["chars"]), from_ocr=bool(p.get("from_ocr", False)))
                          for p in raw["pages"]])


@dataclass(frozen=True, slots=True)
class PageImage:
    """A page rendered for OCR: 8-bit grayscale, ``width`` bytes per row, ``height`` rows."""

    number: int
    width: int
    height: int
    dpi: int
    pixels: bytes


class OcrEngine(Protocol):
    """Reads the text of a page image. Optional: without one, image-only pages stay ``needs_ocr``.

    Called once per page that needs OCR, in the thread that runs :func:`parse_pdf` (PDFium's lock is
    held; the engine itself must not call PDFium). Return ``""`` when nothing can be read.
    """

    def recognize(self, image: PageImage) -> str: ...


def parse_pdf(data: bytes, *, max_pages: int, ocr: OcrEngine | None = None, ocr_dpi: int = 200) -> ParsedPdf:
    """The text of every page of ``data`` (a whole PDF file), in page order.

    Raises ``pdf_corrupted``, ``pdf_encrypted`` or ``document_too_many_pages`` (:class:`HearthError`).
    """
    if max_pages < 1:
        raise ValueError("max_pages must be at least 1")
    with PDFIUM_LOCK:
        with open_pdf(data) as pdf:
            count = len(pdf)
        check_page_count(count, max_pages)
        # closing(): PDFium objects are released here, under the lock, even when a page (or the OCR
        # engine) raises — not whenever the exception's traceback lets go of the generator
        with closing(each_page(data, range(1, count + 1))) as each:
            pages = [_page_text(page, number, ocr=ocr, ocr_dpi=ocr_dpi) for number, page in each]
        return ParsedPdf(page_count=count, pages=pages)


def each_page(data: bytes, numbers: Sequence[int]) -> Generator[tuple[int, Any], None, None]:
    """``(number, pypdfium2 page)`` for the 1-based ``numbers``, in turn; each page is closed once the
    loop moves on. The caller holds :data:`PDFIUM_LOCK`, uses the page only inside its iteration, and
    wraps the generator in :func:`contextlib.closing` so an exception releases PDFium's objects at once.

    PDFium keeps every object it loaded (content streams, inline images) until the document is closed:
    the document is reopened every :data:`REOPEN_EVERY` pages, which bounds that to a window of pages
    (a 48 MB scan-heavy PDF: +52 MB held to the end without, +11 MB with).
    """
    for start in range(0, len(numbers), REOPEN_EVERY):
        with open_pdf(data) as pdf:
            for number in numbers[start: start + REOPEN_EVERY]:
                page = _load_page(pdf, number - 1)
                try:
                    yield number, page
                finally:
                    page.close()


def check_page_count(count: int, max_pages: int) -> None:
    if count > max_pages:
        raise HearthError("document_too_many_pages", f"The document has {count} pages; at most {max_pages} "
                          "are allowed.", details={"page_count": count, "max_pages": max_pages})


@contextmanager
def open_pdf(data: bytes) -> Iterator[Any]:
    """A ``pypdfium2.PdfDocument`` over ``data``, closed on exit; the caller holds :data:`PDFIUM_LOCK`.

    Maps PDFium's load errors to ``pdf_encrypted`` / ``pdf_corrupted``.
    """
    if not isinstance(data, bytes | bytearray):
        raise TypeError("data must be bytes")
    try:
        pdf = pdfium.PdfDocument(bytes(data))
    except pdfium.PdfiumError as exc:
        code = getattr(exc, "err_code", None)
        if code in _PASSWORD_ERRORS:
            raise HearthError("pdf_encrypted", details={"reason": "password_required" if code ==
                                                        pdfium_c.FPDF_ERR_PASSWORD else "unsupported_security"}
                              ) from None
        raise HearthError("pdf_corrupted", details={"reason": _load_error_name(code)}) from None
    try:
        yield pdf
    finally:
        pdf.close()


def _load_error_name(code: int | None) -> str:
    return {pdfium_c.FPDF_ERR_FILE: "file", pdfium_c.FPDF_ERR_FORMAT: "format",
            pdfium_c.FPDF_ERR_PAGE: "page"}.get(code or -1, "unknown")


def _load_page(pdf: Any, index: int) -> Any:
    try:
        return pdf[index]
    except pdfium.PdfiumError:
        raise HearthError("pdf_corrupted", f"Page {index + 1} of the PDF cannot be read.",
                          details={"reason": "page", "page": index + 1}) from None


def _page_text(page: Any, number: int, *, ocr: OcrEngine | None, ocr_dpi: int) -> PageText:
    textpage = page.get_textpage()
    try:
        text = str(textpage.get_text_range()).translate(_DROP)
    finally:
        textpage.close()
    chars = count_chars(text)
    needs_ocr = chars < OCR_CHAR_THRESHOLD and _has_graphics(page)
    if needs_ocr and ocr is not None:
        recognised = ocr.recognize(_render_gray(page, number, ocr_dpi)).strip()
        if recognised:
            return PageText(number=number, text=recognised, needs_ocr=False, chars=count_chars(recognised),
                            from_ocr=True)
    return PageText(number=number, text=text, needs_ocr=needs_ocr, chars=chars)


def count_chars(text: str) -> int:
    """Non-whitespace characters: what "how much text does this page have" means here."""
    return len(text) - sum(1 for c in text if c.isspace())


def _has_graphics(page: Any) -> bool:
    """Whether the page draws anything besides text (top-level objects; a form XObject counts whole)."""
    raw = page.raw
    for i in range(int(pdfium_c.FPDFPage_CountObjects(raw))):
        obj = pdfium_c.FPDFPage_GetObject(raw, i)
        if obj and pdfium_c.FPDFPageObj_GetType(obj) in _GRAPHIC_OBJECT_TYPES:
            return True
    return False


def _render_gray(page: Any, number: int, dpi: int) -> PageImage:
    bitmap = page.render(scale=dpi / 72, grayscale=True)
    try:
        width, height, stride = int(bitmap.width), int(bitmap.height), int(bitmap.stride)
        buffer = ctypes.string_at(bitmap.buffer, stride * height)
    finally:
        bitmap.close()
    if stride != width:
        buffer = b"".join(buffer[row * stride: row * stride + width] for row in range(height))
    return PageImage(number=number, width=width, height=height, dpi=dpi, pixels=buffer)
