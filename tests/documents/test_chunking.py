"""Chunks: page headers a model can cite, whole pages packed up to the limit, a page split only when it
alone does not fit, and never a chunk over the limit."""

from __future__ import annotations

import re

import pytest

from hearth.documents.chunking import Chunk, chunk_pages
from hearth.documents.pdf_text import PageText, parse_pdf
from tests.documents import pdf_factory


def _page(number: int, text: str) -> PageText:
    return PageText(number=number, text=text, needs_ocr=False, chars=len("".join(text.split())))


def test_small_pages_share_one_chunk_each_under_its_page_header() -> None:
    chunks = chunk_pages([_page(1, "Alpha."), _page(2, "Beta.\n"), _page(3, " Gamma.")], max_chars=1000)
    assert chunks == [Chunk(index=0, first_page=1, last_page=3,
                            text="[page 1]\nAlpha.\n\n[page 2]\nBeta.\n\n[page 3]\nGamma.")]


def test_a_page_that_does_not_fit_starts_the_next_chunk_whole() -> None:
    pages = [_page(n, f"Page {n} " + "x" * 80) for n in range(1, 6)]  # 97 chars with header each
    chunks = chunk_pages(pages, max_chars=200)
    assert [(c.index, c.first_page, c.last_page) for c in chunks] == [(0, 1, 2), (1, 3, 4), (2, 5, 5)]
    for chunk in chunks:
        assert len(chunk.text) <= 200
        numbers = [int(n) for n in re.findall(r"^\[page (\d+)\]$", chunk.text, re.M)]
        assert numbers == list(range(chunk.first_page, chunk.last_page + 1))
        for n in numbers:
            assert f"[page {n}]\nPage {n} " + "x" * 80 in chunk.text  # never split


def test_exactly_at_the_limit_fits() -> None:
    one = _page(1, "a" * 91)  # "[page 1]\n" is 9 characters
    assert [c.text for c in chunk_pages([one], max_chars=100)] == ["[page 1]\n" + "a" * 91]
    two = [_page(1, "a" * 40), _page(2, "b" * 40)]  # 49 + 2 + 49 = 100
    assert len(chunk_pages(two, max_chars=100)) == 1
    assert len(chunk_pages([_page(1, "a" * 40), _page(2, "b" * 41)], max_chars=100)) == 2


def test_a_page_larger_than_the_limit_is_split_at_line_breaks_with_continued_headers() -> None:
    lines = [f"line {i:03d} " + "y" * 40 for i in range(30)]
    big = _page(7, "\n".join(lines))
    chunks = chunk_pages([_page(6, "before"), big, _page(8, "after")], max_chars=300)
    assert all(len(c.text) <= 300 for c in chunks)
    assert chunks[0].text.startswith("[page 6]\nbefore")
    assert "[page 7]\nline 000 " in chunks[0].text  # the page's first part fills the room after page 6
    continued = [c for c in chunks if "[page 7, continued]" in c.text]
    assert continued and all(c.first_page == 7 for c in continued)
    rebuilt = [ln for c in chunks for ln in c.text.split("\n") if ln.startswith("line ")]
    assert rebuilt == lines  # nothing lost, nothing cut inside a line
    assert chunks[-1].last_page == 8 and chunks[-1].text.endswith("[page 8]\nafter")
    assert [c.index for c in chunks] == list(range(len(chunks)))


def test_a_run_without_whitespace_is_cut_hard_at_the_limit() -> None:
    chunks = chunk_pages([_page(1, "z" * 500)], max_chars=120)
    assert all(len(c.text) <= 120 for c in chunks)
    assert "".join(c.text.split("\n", 1)[1] for c in chunks) == "z" * 500
    assert chunks[1].text.startswith("[page 1, continued]\n")


def test_pages_without_text_are_left_out() -> None:
    parsed = parse_pdf(pdf_factory.mixed_pdf(), max_pages=5)
    chunks = chunk_pages(parsed.pages, max_chars=10_000)
    assert len(chunks) == 1 and (chunks[0].first_page, chunks[0].last_page) == (1, 3)
    assert "[page 2]" not in chunks[0].text
    assert chunk_pages([_page(1, "  \n ")], max_chars=1000) == []


def test_the_financial_report_in_chunks_cites_every_page_once() -> None:
    parsed = parse_pdf(pdf_factory.financial_report(), max_pages=50)
    chunks = chunk_pages(parsed.pages, max_chars=6000)
    assert len(chunks) > 1 and all(len(c.text) <= 6000 for c in chunks)
    cited = [int(n) for c in chunks for n in re.findall(r"^\[page (\d+)\]$", c.text, re.M)]
    assert cited == list(range(1, 21))


def test_a_limit_too_small_for_a_header_and_some_text_is_refused() -> None:
    with pytest.raises(ValueError, match="max_chars"):
        chunk_pages([_page(1, "x")], max_chars=50)


def test_a_chunk_as_plain_json() -> None:
    chunk = chunk_pages([_page(2, "Text.")], max_chars=100)[0]
    assert chunk.as_dict() == {"index": 0, "first_page": 2, "last_page": 2, "text": "[page 2]\nText."}
