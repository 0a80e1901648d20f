"""Evidence: the normal form, exact / fuzzy / not_found quote matching (full-width characters, CJK line
breaks, a changed digit), the source_page cases, and the speed of 100 values against 20 pages."""

from __future__ import annotations

import time

import pytest

from hearth.documents.evidence import FUZZY_THRESHOLD, check_quote, check_value, normalise, value_in_quote
from hearth.documents.pdf_text import parse_pdf
from tests.documents import pdf_factory


@pytest.fixture(scope="module")
def report_pages() -> dict[int, str]:
    return parse_pdf(pdf_factory.financial_report(), max_pages=50).text_by_page()


@pytest.fixture(scope="module")
def chinese_pages() -> dict[int, str]:
    return parse_pdf(pdf_factory.chinese_report(), max_pages=5).text_by_page()


@pytest.mark.parametrize(("raw", "expected"), [
    ("Ｒｅｖｅｎｕｅ　１２３", "Revenue 123"),  # full-width letters, digits and ideographic space
    ("净利润：５６７亿元（全角）", "净利润:567亿元(全角)"),
    ("a \n\t b\r\n\nc", "a b c"),
    ("“quoted” ‘single’", "\"quoted\" 'single'"),
    ("他说 「好」。", "他说\"好\"。"),
    ("2023–2024 — −5 ‐ x", "2023-2024 - -5 - x"),
    ("营业收\n入为 1,234 亿元，\n同比增长", "营业收入为1,234亿元,同比增长"),
    ("soft\u00adhyphen zero\u200bwidth\ufeff", "softhyphen zerowidth"),
    ("ﬁnance", "finance"),
    ("  ", ""),
])
def test_normalise(raw: str, expected: str) -> None:
    assert normalise(raw) == expected
    assert normalise(expected) == expected  # idempotent: a normalised quote can be normalised again


def test_an_exact_quote_is_found_across_the_line_breaks_of_the_page(report_pages: dict[int, str]) -> None:
    fact = pdf_factory.FINANCIAL_FACTS[0]
    assert "\n" in report_pages[fact.page][report_pages[fact.page].index("Revenue for fiscal year 2024"):][:80]
    match = check_quote(fact.quote, report_pages[fact.page])
    assert (match.kind, match.score, match.reason) == ("exact", 1.0, None)
    assert match.span is not None
    assert normalise(report_pages[fact.page])[match.span[0]: match.span[1]] == normalise(fact.quote) == match.matched


def test_exact_ignores_letter_case(report_pages: dict[int, str]) -> None:
    assert check_quote("NET INCOME FOR FISCAL YEAR 2024 WAS $29,760 MILLION", report_pages[7]).kind == "exact"


def test_a_full_width_quote_matches_the_half_width_page_exactly(report_pages: dict[int, str]) -> None:
    assert check_quote("Ｎｅｔ ｉｎｃｏｍｅ ｆｏｒ ｆｉｓｃａｌ ｙｅａｒ ２０２４ ｗａｓ ＄２９，７６０ ｍｉｌｌｉｏｎ",
                       report_pages[7]).kind == "exact"


def test_chinese_quotes_match_across_a_line_break_and_full_width_digits(chinese_pages: dict[int, str]) -> None:
    across = check_quote("公司营业收入为1,234.5亿元，同比增长12.3%", chinese_pages[1])
    assert across.kind == "exact"
    assert across.matched == "公司营业收入为1,234.5亿元,同比增长12.3%"
    assert check_quote("净利润：567亿元", chinese_pages[2]).kind == "exact"  # page prints ５６７
    assert check_quote("净利润： 567 亿元", chinese_pages[2]).kind == "exact"
    assert check_quote("净利润 567 亿元（全角数字）", chinese_pages[2]).kind == "fuzzy"  # no colon


def test_a_slightly_different_quote_is_fuzzy_with_its_score_and_span(report_pages: dict[int, str]) -> None:
    quote = "Revenue for fiscal year 2024 was $60,922 millon, up 126 percent from a year ago"
    match = check_quote(quote, report_pages[4])
    assert match.kind == "fuzzy" and FUZZY_THRESHOLD <= match.score < 1.0
    assert match.span is not None and "Revenue for fiscal year 2024 was $60,922 million" in match.matched
    assert normalise(report_pages[4])[match.span[0]: match.span[1]] == match.matched


def test_a_chinese_quote_with_one_character_changed_is_fuzzy(chinese_pages: dict[int, str]) -> None:
    match = check_quote("本公司主要从事人工智能运算平台的研发与销售", chinese_pages[1])
    assert match.kind == "fuzzy" and match.score >= FUZZY_THRESHOLD


def test_a_quote_that_differs_only_in_a_number_is_not_found(report_pages: dict[int, str]) -> None:
    match = check_quote("Revenue for fiscal year 2024 was $60,923 million, up 126% from a year ago.", report_pages[4])
    assert match.kind == "not_found" and match.reason == "numbers_differ"
    assert match.score > FUZZY_THRESHOLD  # similar text, wrong figure: exactly what must not pass


def test_a_quote_from_another_page_is_not_found(report_pages: dict[int, str]) -> None:
    fact = pdf_factory.FINANCIAL_FACTS[2]  # page 7
    match = check_quote(fact.quote, report_pages[4])
    assert match.kind == "not_found" and match.score < FUZZY_THRESHOLD


@pytest.mark.parametrize(("quote", "page", "reason"), [
    ("", "some text", "empty_quote"), ("  \n", "some text", "empty_quote"), ("text", "", "empty_page"),
    ("Revenux", "Revenue 12", "too_short"),
])
def test_degenerate_inputs_are_not_found_with_the_reason(quote: str, page: str, reason: str) -> None:
    match = check_quote(quote, page)
    assert (match.kind, match.reason) == ("not_found", reason)


def test_check_value_on_the_right_page(report_pages: dict[int, str]) -> None:
    fact = pdf_factory.FINANCIAL_FACTS[4]
    evidence = check_value(fact.value, source_page=fact.page, quote=fact.quote, pages=report_pages)
    assert evidence.found and evidence.kind == "exact" and evidence.page_status == "ok"
    assert evidence.source_page == 11 and evidence.value == 28090.0
    assert normalise(fact.quote) in evidence.context and len(evidence.context) <= len(normalise(fact.quote)) + 400
    assert evidence.as_dict()["match"]["kind"] == "exact"


def test_check_value_on_the_wrong_page_says_where_the_quote_is(report_pages: dict[int, str]) -> None:
    fact = pdf_factory.FINANCIAL_FACTS[2]
    evidence = check_value(fact.value, source_page=5, quote=fact.quote, pages=report_pages)
    assert not evidence.found and evidence.kind == "not_found" and evidence.page_status == "ok"
    assert evidence.found_on_pages == (7,)
    assert check_value(1, source_page=5, quote=fact.quote, pages=report_pages,
                       search_other_pages=False).found_on_pages == ()


@pytest.mark.parametrize(("source_page", "status", "number"), [
    (None, "missing", None), ("7", "missing", None), (True, "missing", None), (7.5, "missing", None),
    (0, "non_positive", 0), (-3, "non_positive", -3), (21, "out_of_range", 21), (7.0, "ok", 7),
])
def test_check_value_source_page_cases(report_pages: dict[int, str], source_page: object, status: str,
                                       number: int | None) -> None:
    fact = pdf_factory.FINANCIAL_FACTS[2]
    evidence = check_value(fact.value, source_page=source_page, quote=fact.quote, pages=report_pages)
    assert (evidence.page_status, evidence.source_page) == (status, number)
    assert evidence.found is (status == "ok")
    if status != "ok":
        assert evidence.match is None and evidence.found_on_pages == (7,)


def test_check_value_without_a_quote_is_not_found(report_pages: dict[int, str]) -> None:
    evidence = check_value(1.0, source_page=4, quote=None, pages=report_pages)
    assert not evidence.found and evidence.match is not None and evidence.match.reason == "empty_quote"


def test_100_values_against_20_pages_is_fast(report_pages: dict[int, str]) -> None:
    quotes = [f.quote.replace("million", "millions") for f in pdf_factory.FINANCIAL_FACTS] * 17
    started = time.process_time()
    results = [check_quote(q, text) for q in quotes[:100] for text in report_pages.values()]
    elapsed = time.process_time() - started
    assert len(results) == 2000 and sum(r.found for r in results) == 100  # each on its own page only
    assert elapsed < 5.0  # ~0.5 s on the development machine; a generous bound for a loaded CI


def test_a_number_cut_short_in_the_quote_does_not_match_the_longer_number_on_the_page() -> None:
    page = "In the fourth quarter the units shipped in the quarter totalled 12345 across all regions."
    match = check_quote("the units shipped in the quarter totalled 1234", page)
    assert (match.kind, match.reason) == ("not_found", "numbers_differ")
    assert check_quote("the units shipped in the quarter totalled 12,345", page).kind == "fuzzy"
    assert check_quote("the units shipped in the quarter totalled 12345", page).kind == "exact"
    assert check_quote("2345 across all regions", page).reason == "numbers_differ"  # cut at the start
    twice = "Sold 12345 units, then 1234 units."
    assert check_quote("1234 units", twice).span == (23, 33)  # the second occurrence is the whole number


def test_a_quote_sharing_nothing_with_the_page_scores_zero() -> None:
    match = check_quote("zzzz qqqq xxxx wwww", "Revenue grew in every region.")
    assert (match.kind, match.score, match.reason, match.span) == ("not_found", 0.0, "below_threshold", None)


@pytest.mark.parametrize(("value", "quote", "expected"), [
    (60922, "Revenue was $60,922 million.", True), (60922.0, "Revenue was $60,922 million.", True),
    (6092.2, "Revenue was $60,922 million.", False), (11.93, "EPS was $11.93.", True),
    (567, "净利润：５６７亿元", True), (1234.5, "营业收入为 1,234.5 亿元", True),
    (-1234, "Net loss of $(1,234) million", True), (5, "Dated 2024.12.31, 5 segments", True),
    ("60922", "Revenue was $60,922 million.", None), (True, "1", None), (None, "1", None),
])
def test_value_in_quote(value: object, quote: str, expected: bool | None) -> None:
    assert value_in_quote(value, quote) is expected


def test_check_value_reports_whether_the_quote_prints_the_value(report_pages: dict[int, str]) -> None:
    fact = pdf_factory.FINANCIAL_FACTS[0]
    assert check_value(fact.value, source_page=4, quote=fact.quote, pages=report_pages).value_in_quote is True
    wrong = check_value(6092.2, source_page=4, quote=fact.quote, pages=report_pages)
    assert wrong.found and wrong.value_in_quote is False and wrong.as_dict()["value_in_quote"] is False
