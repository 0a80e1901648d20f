"""Pages packed into model-sized chunks that still say which page each line came from.

Each page's text is preceded by a header line ``[page N]`` (1-based), so a model asked for a
``source_page`` reads it from the text it was given. Pages are packed greedily, in order, into chunks of
at most ``max_chars`` characters (headers and separators included); a page is never split unless it
alone does not fit, and then it is cut at the last paragraph break, else line break, else space before
the limit (a hard cut only for a run with no whitespace), each further part headed
``[page N, continued]``. Pages without text (blank, or image-only and not OCR'd) are left out, since
there is nothing to cite on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hearth.documents.pdf_text import PageText

MIN_CHUNK_CHARS = 100
_SEPARATOR = "\n\n"


@dataclass(frozen=True, slots=True)
class Chunk:
    """``index`` counts from 0; ``first_page``..``last_page`` are the pages whose text is in ``text``."""

    index: int
    first_page: int
    last_page: int
    text: str

    def as_dict(self) -> dict[str, int | str]:
        return {"index": self.index, "first_page": self.first_page, "last_page": self.last_page, "text": self.text}


def page_header(number: int, *, continued: bool = False) -> str:
    return f"[page {number}, continued]\n" if continued else f"[page {number}]\n"


def chunk_pages(pages: Sequence[PageText], *, max_chars: int) -> list[Chunk]:
    """The pages' text in chunks of at most ``max_chars`` characters (see the module docstring)."""
    if max_chars < MIN_CHUNK_CHARS:
        raise ValueError(f"max_chars must be at least {MIN_CHUNK_CHARS}")
    sections: list[tuple[int, str]] = []
    for page in pages:
        text = page.text.strip()
        if not text:
            continue
        block = page_header(page.number) + text
        if len(block) <= max_chars:
            sections.append((page.number, block))
        else:
            sections += [(page.number, part) for part in _split_page(page.number, text, max_chars)]
    chunks: list[Chunk] = []
    current: list[tuple[int, str]] = []
    size = 0
    for number, block in sections:
        extra = len(block) + (len(_SEPARATOR) if current else 0)
        if current and size + extra > max_chars:
            chunks.append(_chunk(len(chunks), current))
            current, size, extra = [], 0, len(block)
        current.append((number, block))
        size += extra
    if current:
        chunks.append(_chunk(len(chunks), current))
    return chunks


def _chunk(index: int, sections: list[tuple[int, str]]) -> Chunk:
    return Chunk(index=index, first_page=sections[0][0], last_page=sections[-1][0],
                 text=_SEPARATOR.join(block for _, block in sections))


def _split_page(number: int, text: str, max_chars: int) -> list[str]:
    parts: list[str] = []
    rest = text
    while rest:
        header = page_header(number, continued=bool(parts))
        room = max_chars - len(header)
        if len(rest) <= room:
            piece, rest = rest, ""
        else:
            cut = _cut(rest, room)
            piece, rest = rest[:cut].rstrip(), rest[cut:].lstrip()
        parts.append(header + piece)
    return parts


def _cut(text: str, room: int) -> int:
    """Where to cut ``text`` so the first part fits in ``room``: the latest natural break in its second
    half, else ``room`` itself."""
    for sep in ("\n\n", "\n", " "):
        at = text.rfind(sep, room // 2, room)
        if at > 0:
            return at
    return room
