"""Tables found from where the characters sit on the page — no ruling lines, no model, no guessing of
merged cells.

The method, per page, from PDFium's text page (each character's Unicode value, baseline origin, font
size and *loose* box, i.e. its advance width, so letters of a word touch and a space is a gap):

1. **Lines.** Characters are grouped by baseline: a character whose baseline is within
   ``0.3 × font size`` of a line's is on that line. Whitespace characters are dropped; words are rebuilt
   from gaps.
2. **Cells.** Along a line, left to right, a horizontal gap wider than ``column_gap × font size``
   (default 1.0 — wider than a word space, even a double one) starts a new cell; a smaller gap above
   ``0.1 × font size`` is a space inside the cell.
3. **Tables.** Consecutive lines (each at most ``2.5 × font size`` below the previous one) with the same
   number of cells, at least two, and the cells aligned column by column — overlapping horizontally or
   with left or right edges within one font size (left-aligned labels, right-aligned numbers) — form a
   block; a block of at least ``min_rows`` (default 2) lines is a :class:`Table`.

What it does not do: a row with an empty cell has fewer cells and ends the table there; a cell that
wraps onto two lines becomes two rows; two text columns of prose side by side look like a two-column
table. Good enough to hand a model a financial statement's rows in order, which is what it is for.
Threads: holds :data:`hearth.documents.pdf_text.PDFIUM_LOCK` like every PDFium call of this package.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from contextlib import closing
from dataclasses import dataclass
from typing import Any

import pypdfium2.raw as pdfium_c

from hearth.documents.pdf_text import PDFIUM_LOCK, each_page, open_pdf

_SKIP = frozenset({0, 2, 0xFFFE})
_LINE_TOLERANCE = 0.3
_WORD_GAP = 0.1
_MAX_LINE_GAP = 2.5


@dataclass(frozen=True, slots=True)
class Table:
    """A table on ``page`` (1-based): its rows top to bottom, each the cells' text left to right."""

    page: int
    rows: list[list[str]]

    def as_dict(self) -> dict[str, Any]:
        return {"page": self.page, "rows": [list(r) for r in self.rows]}


@dataclass(slots=True)
class _Char:
    text: str
    x: float  # baseline origin
    y: float
    left: float
    right: float
    size: float


@dataclass(frozen=True, slots=True)
class _Cell:
    text: str
    left: float
    right: float


@dataclass(frozen=True, slots=True)
class _Line:
    y: float
    size: float
    cells: list[_Cell]


def extract_tables(data: bytes, *, pages: Sequence[int] | None = None, column_gap: float = 1.0,
                   min_rows: int = 2) -> list[Table]:
    """The tables of ``pages`` (1-based numbers; all pages when None), in page order, top to bottom.

    Raises ``pdf_corrupted`` / ``pdf_encrypted`` like :func:`hearth.documents.pdf_text.parse_pdf`, and
    ``ValueError`` for a page number the document does not have.
    """
    found: list[Table] = []
    with PDFIUM_LOCK:
        with open_pdf(data) as pdf:
            count = len(pdf)
        numbers = list(range(1, count + 1)) if pages is None else list(pages)
        wrong = [n for n in numbers if not 1 <= n <= count]
        if wrong:
            raise ValueError(f"pages {wrong} are not in the document (1..{count})")
        with closing(each_page(data, numbers)) as each:
            for number, page in each:
                textpage = page.get_textpage()
                try:
                    chars = _chars(textpage)
                finally:
                    textpage.close()
                lines = [_line(group, column_gap) for group in _group_lines(chars)]
                found += [Table(page=number, rows=rows) for rows in _tables(lines, min_rows)]
    return found


def _chars(textpage: Any) -> list[_Char]:
    raw = textpage.raw
    x, y = ctypes.c_double(), ctypes.c_double()
    rect = pdfium_c.FS_RECTF()
    px, py, prect = ctypes.byref(x), ctypes.byref(y), ctypes.byref(rect)
    unicode, origin, box, font_size = (pdfium_c.FPDFText_GetUnicode, pdfium_c.FPDFText_GetCharOrigin,
                                       pdfium_c.FPDFText_GetLooseCharBox, pdfium_c.FPDFText_GetFontSize)
    out = []
    for i in range(int(pdfium_c.FPDFText_CountChars(raw))):
        code = unicode(raw, i)
        if code in _SKIP or chr(code).isspace() or not origin(raw, i, px, py) or not box(raw, i, prect):
            continue
        size = font_size(raw, i) or max(rect.top - rect.bottom, 1.0)
        out.append(_Char(chr(code), x.value, y.value, rect.left, rect.right, size))
    return out


def _group_lines(chars: list[_Char]) -> list[list[_Char]]:
    """Characters by baseline, lines top to bottom, each left to right."""
    lines: list[list[_Char]] = []
    for char in sorted(chars, key=lambda c: -c.y):
        if lines and abs(lines[-1][0].y - char.y) <= _LINE_TOLERANCE * max(char.size, lines[-1][0].size):
            lines[-1].append(char)
        else:
            lines.append([char])
    return [sorted(line, key=lambda c: c.x) for line in lines]


def _line(chars: list[_Char], column_gap: float) -> _Line:
    size = max(c.size for c in chars)
    cells: list[_Cell] = []
    text, left, right = chars[0].text, chars[0].left, chars[0].right
    for char in chars[1:]:
        gap = char.left - right
        if gap > column_gap * size:
            cells.append(_Cell(text, left, right))
            text, left = char.text, char.left
        else:
            text += (" " if gap > _WORD_GAP * size else "") + char.text
        right = max(right, char.right)
    cells.append(_Cell(text, left, right))
    return _Line(y=chars[0].y, size=size, cells=cells)


def _aligned(a: _Cell, b: _Cell, tolerance: float) -> bool:
    overlap = min(a.right, b.right) - max(a.left, b.left) > 0
    return overlap or abs(a.left - b.left) <= tolerance or abs(a.right - b.right) <= tolerance


def _same_structure(upper: _Line, lower: _Line) -> bool:
    if len(upper.cells) != len(lower.cells) or len(upper.cells) < 2:
        return False
    size = max(upper.size, lower.size)
    if upper.y - lower.y > _MAX_LINE_GAP * size:
        return False
    return all(_aligned(a, b, size) for a, b in zip(upper.cells, lower.cells, strict=True))


def _tables(lines: list[_Line], min_rows: int) -> list[list[list[str]]]:
    tables: list[list[list[str]]] = []
    block: list[_Line] = []
    for line in [*lines, None]:
        if line is not None and block and _same_structure(block[-1], line):
            block.append(line)
            continue
        if len(block) >= min_rows:
            tables.append([[c.text for c in b.cells] for b in block])
        block = [line] if line is not None and len(line.cells) >= 2 else []
    return tables
