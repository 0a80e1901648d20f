"""Tables from character positions: the generated tables are found cell by cell, prose is not a table,
and the documented limits (an empty cell ends a block, one line is not a table) hold."""

from __future__ import annotations

import pytest

from hearth.documents import pdf_text
from hearth.documents.pdf_tables import Table, extract_tables
from hearth.errors import HearthError
from tests.documents import pdf_factory


def test_the_table_of_the_generated_pdf_is_found_with_every_cell() -> None:
    tables = extract_tables(pdf_factory.table_pdf())
    assert tables == [Table(page=2, rows=pdf_factory.TABLE_ROWS)]


def test_the_table_on_page_9_of_the_financial_report_and_nothing_in_its_prose() -> None:
    tables = extract_tables(pdf_factory.financial_report())
    assert tables == [Table(page=pdf_factory.FINANCIAL_TABLE_PAGE, rows=pdf_factory.TABLE_ROWS)]


def test_a_chinese_table_keeps_its_characters_together_in_cells() -> None:
    assert extract_tables(pdf_factory.chinese_table_pdf()) == [Table(page=1, rows=pdf_factory.CHINESE_TABLE_ROWS)]


def test_only_the_requested_pages_are_read() -> None:
    data = pdf_factory.table_pdf()
    assert extract_tables(data, pages=[1]) == []
    assert extract_tables(data, pages=[2]) == [Table(page=2, rows=pdf_factory.TABLE_ROWS)]
    with pytest.raises(ValueError, match=r"\[3\]"):
        extract_tables(data, pages=[2, 3])


def test_prose_and_image_pages_have_no_tables() -> None:
    assert extract_tables(pdf_factory.english_report(2)) == []
    assert extract_tables(pdf_factory.chinese_report()) == []
    assert extract_tables(pdf_factory.mixed_pdf()) == []


def test_a_row_with_an_empty_cell_ends_the_block_and_a_lone_line_is_not_a_table() -> None:
    tables = extract_tables(pdf_factory.table_with_gap_pdf())
    assert tables == [
        Table(page=1, rows=[["Segment", "2024", "2023"], ["Data centre", "47,525", "15,005"]]),
        Table(page=1, rows=[["Automotive", "1,091", "903"], ["Other", "1,859", "1,066"]]),
    ]


def test_min_rows_and_column_gap_are_the_knobs() -> None:
    data = pdf_factory.table_with_gap_pdf()
    assert [len(t.rows) for t in extract_tables(data, min_rows=3)] == []
    # a column gap wider than the widest gap between label and number: every line is one cell
    assert extract_tables(pdf_factory.table_pdf(), column_gap=40) == []


def test_refusals_are_the_parsers() -> None:
    for data, code in ((pdf_factory.corrupt_pdf(), "pdf_corrupted"), (pdf_factory.encrypted_pdf(), "pdf_encrypted")):
        with pytest.raises(HearthError) as caught:
            extract_tables(data)
        assert caught.value.code == code


def test_tables_are_the_same_across_reopening_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdf_text, "REOPEN_EVERY", 4)
    tables = extract_tables(pdf_factory.financial_report(), pages=[1, 2, 3, 8, 9, 10, 20])
    assert tables == [Table(page=pdf_factory.FINANCIAL_TABLE_PAGE, rows=pdf_factory.TABLE_ROWS)]


def test_a_table_as_plain_json() -> None:
    assert extract_tables(pdf_factory.chinese_table_pdf())[0].as_dict() == {
        "page": 1, "rows": pdf_factory.CHINESE_TABLE_ROWS}
