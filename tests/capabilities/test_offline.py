"""The offline fallback: extractive summaries of Chinese, English and mixed text, and rule-based bills."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearth.capabilities.bill import BILL_SCHEMA, check_bill
from hearth.capabilities.offline import extract_bill, split_sentences, summarize
from tests.support import examples

VALIDATOR = jsonschema.Draft202012Validator(BILL_SCHEMA)

ZH_TEXT = (
    "人工智能正在改变软件开发的方式。"
    "越来越多的团队使用人工智能助手编写代码、审查代码和生成测试。"
    "今天天气很好，我们去公园散步了。"
    "人工智能助手可以减少重复劳动，但也可能引入难以察觉的错误。"
    "因此，团队需要为人工智能生成的代码建立审查流程。"
    "午饭吃了面条。"
    "总之，人工智能是软件开发的有力工具，但不能替代工程师的判断。"
)
ZH_OFF_TOPIC = ("今天天气很好，我们去公园散步了。", "午饭吃了面条。")

EN_TEXT = (
    "Dr. Smith arrived in the U.S. on Monday. "
    "The company grew revenue by 3.5 percent, e.g. through new products. "
    "Mr. Jones, the CFO, said the results beat expectations! "
    "Analysts at Acme Inc. were surprised. "
    "Is growth sustainable? "
    "Revenue growth depends on new products and on the U.S. market."
)

MIXED_TEXT = (
    "Hearth 是一个自托管的 AI 网关。"
    "It routes requests to model endpoints and records every call. "
    "当模型不可用时，Hearth 返回降级的摘要和账单结果。"
    "Lunch was pasta. "
    "The degraded summaries and bills are deterministic and need no model."
)


def in_original_order(summary: str, text: str) -> list[str]:
    """The summary's sentences, each checked to be a sentence of ``text`` appearing after the previous one."""
    sentences = split_sentences(summary)
    position = -1
    for sentence in sentences:
        found = text.find(sentence, position + 1)
        assert found > position, f"{sentence!r} is not in the text after position {position}"
        position = found
    return sentences


# --- sentences ------------------------------------------------------------------------------------------


def test_chinese_splits_after_full_stops_exclamation_question_and_semicolon_marks() -> None:
    assert split_sentences("第一句。第二句！第三句？第四句；第五句") == [
        "第一句。", "第二句！", "第三句？", "第四句；", "第五句"]
    assert split_sentences("他说：“走吧。”然后离开了。") == ["他说：“走吧。”", "然后离开了。"]


def test_english_abbreviations_initials_and_decimals_do_not_end_sentences() -> None:
    assert split_sentences(EN_TEXT) == [
        "Dr. Smith arrived in the U.S. on Monday.",
        "The company grew revenue by 3.5 percent, e.g. through new products.",
        "Mr. Jones, the CFO, said the results beat expectations!",
        "Analysts at Acme Inc. were surprised.",
        "Is growth sustainable?",
        "Revenue growth depends on new products and on the U.S. market.",
    ]
    assert split_sentences("Ask J. R. Smith i.e. the owner. Version 2.0.1 shipped.") == [
        "Ask J. R. Smith i.e. the owner.", "Version 2.0.1 shipped."]


def test_an_abbreviation_that_ends_a_sentence_still_ends_it() -> None:
    assert split_sentences("He moved to the U.S. The weather was nice.") == ["He moved to the U.S.",
                                                                             "The weather was nice."]
    assert split_sentences("We sell pens, paper etc. We also repair.") == ["We sell pens, paper etc.",
                                                                          "We also repair."]
    assert split_sentences("See No. 5 below. No. That is wrong.") == ["See No. 5 below.", "No.", "That is wrong."]


def test_paragraph_breaks_separate_and_wrapped_lines_join() -> None:
    text = "第一段标题\n这是第一段的内容。\n\nThis is a wrapped line that continues\nonto the next line. 第二句。"
    assert split_sentences(text) == ["第一段标题", "这是第一段的内容。",
                                     "This is a wrapped line that continues onto the next line.", "第二句。"]


def test_english_followed_directly_by_chinese_is_two_sentences() -> None:
    assert split_sentences("It works.然后呢？Fine!") == ["It works.", "然后呢？", "Fine!"]


# --- summaries ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_a_chinese_paragraph_is_summarized_to_n_of_its_sentences_in_original_order(n: int) -> None:
    summary = summarize(ZH_TEXT, max_sentences=n)
    sentences = in_original_order(summary, ZH_TEXT)
    assert len(sentences) == n
    assert " " not in summary
    assert not any(off in summary for off in ZH_OFF_TOPIC)


def test_the_lead_sentence_and_the_topic_sentences_win_in_chinese() -> None:
    assert summarize(ZH_TEXT, max_sentences=2) == (
        "人工智能正在改变软件开发的方式。越来越多的团队使用人工智能助手编写代码、审查代码和生成测试。")


def test_english_summaries_keep_whole_sentences_joined_by_one_space() -> None:
    summary = summarize(EN_TEXT, max_sentences=2)
    assert summary == ("The company grew revenue by 3.5 percent, e.g. through new products. "
                       "Revenue growth depends on new products and on the U.S. market.")


def test_mixed_text_keeps_its_topic_and_joins_each_language_its_own_way() -> None:
    summary = summarize(MIXED_TEXT, max_sentences=3)
    assert len(in_original_order(summary, MIXED_TEXT)) == 3
    assert summary == ("Hearth 是一个自托管的 AI 网关。It routes requests to model endpoints and records every call. "
                       "当模型不可用时，Hearth 返回降级的摘要和账单结果。")
    assert "Lunch was pasta." not in summarize(MIXED_TEXT, max_sentences=4)


def test_summaries_are_deterministic() -> None:
    for text in (ZH_TEXT, EN_TEXT, MIXED_TEXT):
        assert len({summarize(text, max_sentences=2) for _ in range(5)}) == 1


def test_empty_and_whitespace_text_summarize_to_nothing() -> None:
    assert summarize("") == ""
    assert summarize(" \n\t　\n ") == ""


def test_text_within_the_limit_comes_back_trimmed_as_written() -> None:
    assert summarize("  Short text.  Two  sentences.\n") == "Short text.  Two  sentences."
    assert summarize("\n只有一句话。\n", max_sentences=1) == "只有一句话。"


def test_max_chars_cuts_at_the_last_whole_sentence_that_fits() -> None:
    full = summarize(EN_TEXT, max_sentences=2)
    first = "The company grew revenue by 3.5 percent, e.g. through new products."
    assert summarize(EN_TEXT, max_sentences=2, max_chars=len(full)) == full
    assert summarize(EN_TEXT, max_sentences=2, max_chars=len(full) - 1) == first


def test_max_chars_shorter_than_any_sentence_cuts_inside_it() -> None:
    cut = summarize(EN_TEXT, max_chars=20)
    assert len(cut) <= 20 and cut.endswith("…") and EN_TEXT.startswith(cut[:-1])
    assert summarize(ZH_TEXT, max_chars=10) == "人工智能正在改变软…"


def test_max_chars_also_shortens_text_that_has_few_sentences() -> None:
    assert summarize("One sentence. Two sentences here.", max_chars=14) == "One sentence."


@pytest.mark.parametrize("kwargs", [{"max_sentences": 0}, {"max_chars": 0}])
def test_limits_below_one_are_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        summarize(EN_TEXT, **kwargs)


@settings(max_examples=examples(100), deadline=None)
@given(text=st.text(), n=st.integers(1, 5), max_chars=st.none() | st.integers(1, 200))
def test_any_text_summarizes_within_its_limits(text: str, n: int, max_chars: int | None) -> None:
    summary = summarize(text, max_sentences=n, max_chars=max_chars)
    assert summary == summary.strip()
    assert max_chars is None or len(summary) <= max_chars
    assert bool(summary) == bool(text.strip())


# --- bills ----------------------------------------------------------------------------------------------

EN_INVOICE = """ACME Widgets Ltd.
123 Industrial Way, Springfield
INVOICE
Invoice No: INV-2026-001
Date: 2026-03-01
Due Date: 2026-03-31
Bill To: Globex Corporation

Description        Qty   Unit Price    Amount
Widget             2 x 10.00           20.00
Gadget Pro         3     150.00        450.00
Consulting hours   10    76.45         764.50

Subtotal: $1,234.50
Tax 5%: 61.73
Total: $1,296.23
Notes: Payment by bank transfer within 30 days.
"""

ZH_VAT_INVOICE = """上海增值税电子普通发票
发票代码：031002100111  发票号码：12345678
开票日期：2026年3月1日
购买方 名称：北京某某科技有限公司  纳税人识别号：91110108MA01ABCDE
销售方 名称：上海示例贸易有限公司  纳税人识别号：91310000MA1FL12345
项目名称 规格型号 单位 数量 单价 金额 税率 税额
*文具*笔记本 A5 本 10 50.00 500.00 13% 65.00
*文具*签字笔 0.5mm 支 20 25.00 500.00 13% 65.00
合计 ¥1,000.00 ¥130.00
价税合计（大写）壹仟壹佰叁拾元整 （小写）¥1,130.00
备注：三月办公用品
"""

ZH_RECEIPT = """某某便利店
收据号：20260301-0007
日期：2026/03/01
矿泉水 3 2.50 7.50
合计：￥1234.50
税额：50.00
"""

EU_INVOICE = """Müller Bürobedarf GmbH
Invoice Number: RE-4711
Invoice Date: 15.02.2026
Payment due: 15 March 2026
Papier A4   5   4,50   22,50
Toner       2   1.234,50   2.469,00
Subtotal: 2.491,50 €
VAT 19%: 473,39 €
Total: 2.964,89 €
"""

US_RECEIPT = """STARBUCKS COFFEE
Receipt #: 88231
03/04/2026 10:32
Latte 2 @ 4.75 9.50
Muffin 1 3.25 3.25
SUBTOTAL 12.75
SALES TAX 1.13
TOTAL US$13.88
"""


def test_an_english_invoice() -> None:
    bill = extract_bill(EN_INVOICE)
    assert {k: bill[k] for k in ("vendor", "bill_number", "issue_date", "due_date", "currency", "buyer")} == {
        "vendor": "ACME Widgets Ltd.", "bill_number": "INV-2026-001", "issue_date": "2026-03-01",
        "due_date": "2026-03-31", "currency": "USD", "buyer": "Globex Corporation"}
    assert (bill["subtotal"], bill["tax"], bill["total"]) == (1234.50, 61.73, 1296.23)
    assert bill["line_items"] == [
        {"description": "Widget", "quantity": 2, "unit_price": 10.0, "amount": 20.0},
        {"description": "Gadget Pro", "quantity": 3, "unit_price": 150.0, "amount": 450.0},
        {"description": "Consulting hours", "quantity": 10, "unit_price": 76.45, "amount": 764.5},
    ]
    assert bill["notes"] == "Payment by bank transfer within 30 days."
    assert check_bill(bill) == []


def test_a_chinese_vat_invoice() -> None:
    bill = extract_bill(ZH_VAT_INVOICE)
    assert bill["bill_number"] == "12345678"
    assert bill["issue_date"] == "2026-03-01"
    assert bill["vendor"] == "上海示例贸易有限公司"
    assert bill["buyer"] == "北京某某科技有限公司"
    assert bill["currency"] == "CNY"
    assert (bill["subtotal"], bill["tax"], bill["total"]) == (1000.0, 130.0, 1130.0)
    assert [(i["description"], i["quantity"], i["amount"]) for i in bill["line_items"]] == [
        ("*文具*笔记本 A5 本", 10, 500.0), ("*文具*签字笔 0.5mm 支", 20, 500.0)]
    assert bill["notes"] == "三月办公用品"
    assert check_bill(bill) == []


def test_a_chinese_receipt_with_a_full_width_yuan_sign() -> None:
    bill = extract_bill(ZH_RECEIPT)
    assert bill["vendor"] == "某某便利店"
    assert bill["bill_number"] == "20260301-0007"
    assert bill["issue_date"] == "2026-03-01"
    assert (bill["currency"], bill["total"], bill["tax"], bill["subtotal"]) == ("CNY", 1234.50, 50.0, None)
    assert bill["line_items"] == [{"description": "矿泉水", "quantity": 3, "unit_price": 2.5, "amount": 7.5}]


def test_a_european_invoice_with_decimal_commas_and_day_first_dates() -> None:
    bill = extract_bill(EU_INVOICE)
    assert (bill["vendor"], bill["bill_number"], bill["currency"]) == ("Müller Bürobedarf GmbH", "RE-4711", "EUR")
    assert (bill["issue_date"], bill["due_date"]) == ("2026-02-15", "2026-03-15")
    assert (bill["subtotal"], bill["tax"], bill["total"]) == (2491.50, 473.39, 2964.89)
    assert [i["amount"] for i in bill["line_items"]] == [22.5, 2469.0]
    assert check_bill(bill) == []


def test_a_us_receipt_reads_dates_month_first_and_us_dollars() -> None:
    bill = extract_bill(US_RECEIPT)
    assert (bill["vendor"], bill["bill_number"], bill["currency"]) == ("STARBUCKS COFFEE", "88231", "USD")
    assert bill["issue_date"] == "2026-03-04"
    assert (bill["subtotal"], bill["tax"], bill["total"]) == (12.75, 1.13, 13.88)
    assert [i["description"] for i in bill["line_items"]] == ["Latte", "Muffin"]


@pytest.mark.parametrize(("line", "currency"), [
    ("Total: $10.00", "USD"), ("Total: HK$10.00", "HKD"), ("Total: C$10.00", "CAD"), ("Total: €10.00", "EUR"),
    ("Total: £10.00", "GBP"), ("合计：¥10.00", "CNY"), ("合计：10.00元", "CNY"), ("Total: RMB 10.00", "CNY"),
    ("Total: 10.00 CHF", "CHF"), ("Total (JPY): 1000", "JPY"), ("Currency: SEK\nTotal: $10.00", "SEK"),
    ("Total: 10.00", None),
])
def test_the_currency_comes_from_codes_labels_and_symbols(line: str, currency: str | None) -> None:
    assert extract_bill(line)["currency"] == currency


@pytest.mark.parametrize(("line", "date"), [
    ("Date: 2026-03-01", "2026-03-01"), ("Date: 2026/3/1", "2026-03-01"), ("开票日期：2026年3月1日", "2026-03-01"),
    ("Date: March 1, 2026", "2026-03-01"), ("Date: 1 Mar 2026", "2026-03-01"), ("Date: 01-Mar-2026", "2026-03-01"),
    ("Date: 13/02/2026", "2026-02-13"), ("Date: 02/13/2026", "2026-02-13"), ("Date: 2026-02-30", None),
])
def test_dates_are_normalised_and_impossible_ones_dropped(line: str, date: str | None) -> None:
    assert extract_bill(line)["issue_date"] == date


@pytest.mark.parametrize(("line", "total"), [
    ("Total: $1,234.50", 1234.50), ("Total: 1.234,50 €", 1234.50), ("Total: 1'234.50 CHF", 1234.50),
    ("Grand Total 1234.5", 1234.5), ("合计：¥1234.50", 1234.50), ("TOTAL (3 items) 24.00", 24.0),
    ("Total due: 1,000", 1000.0), ("Total: USD1,234.50", 1234.50),
])
def test_totals_accept_thousands_separators(line: str, total: float) -> None:
    assert extract_bill(line)["total"] == total


def test_labels_that_look_like_amount_labels_are_not_read_as_amounts() -> None:
    bill = extract_bill("Tax ID: 12-3456789\nVAT No: GB123456789\nTax Rate: 5%\nTotal tax: 5.00\nSubtotal: 100.00")
    assert (bill["tax"], bill["subtotal"], bill["total"]) == (5.0, 100.0, None)


def test_a_line_is_an_item_only_when_its_numbers_multiply_out() -> None:
    assert extract_bill("Widget 2 10.00 25.00\nPhone 555 1234 5678")["line_items"] == []


def test_text_without_a_bill_gives_nulls_and_no_items() -> None:
    bill = extract_bill("Dear team, see you tomorrow.")
    assert bill == {"vendor": None, "bill_number": None, "issue_date": None, "due_date": None, "currency": None,
                    "subtotal": None, "tax": None, "total": None, "line_items": [], "buyer": None, "notes": None}


@pytest.mark.parametrize("text", [EN_INVOICE, ZH_VAT_INVOICE, ZH_RECEIPT, EU_INVOICE, US_RECEIPT, ""], ids=range(6))
def test_extracted_bills_validate_against_the_schema(text: str) -> None:
    VALIDATOR.validate(extract_bill(text))


BILL_WORDS = st.sampled_from([
    "Total", "Subtotal", "Tax", "VAT 19%", "合计", "价税合计", "税额", "发票号码", "Invoice No", "Date", "Due Date",
    "开票日期", "Seller", "销售方名称", "Bill To", ":", "：", " ", "  ", "\n", "$", "¥", "€", "RMB", "USD", "1,234.50",
    "1.234,50", "2026-02-30", "2026-03-01", "2026年3月1日", "13/02/2026", "99999999999999999999", "9" * 400, "2 x",
    "10.00", "20.00", "0", "-5.00", "5%", "Widget", "March", "No.", "Notes:",
])
BILL_LIKE_TEXT = st.lists(BILL_WORDS | st.text(max_size=5), max_size=60).map("".join)


@settings(max_examples=examples(120), deadline=None)
@given(text=st.text() | BILL_LIKE_TEXT)
def test_any_text_extracts_without_raising_to_a_valid_bill(text: str) -> None:
    VALIDATOR.validate(extract_bill(text))
