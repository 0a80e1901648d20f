"""The six review triggers of seed 003 §8 against the generated 20-page report: a faithful result needs
no review; each trigger fires on its own fault, names the field and the facts, and is silent when
switched off."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hearth.documents.pdf_text import parse_pdf
from hearth.documents.review_triggers import (
    EVIDENCE_NOT_FOUND,
    KPI_ANOMALY,
    LOW_CONFIDENCE,
    RISK_FACTOR_BLOCKED,
    SCHEMA_INVALID,
    SOURCE_PAGE_MISSING,
    TRIGGER_CODES,
    ReviewReason,
    ReviewRules,
    check_evidence,
    review_reasons,
)
from tests.documents import pdf_factory


@pytest.fixture(scope="module")
def pages() -> dict[int, str]:
    return parse_pdf(pdf_factory.financial_report(), max_pages=50).text_by_page()


def _result() -> dict[str, Any]:
    return copy.deepcopy(pdf_factory.financial_result())


def _reasons(result: dict[str, Any], pages: dict[int, str], *, schema_errors: tuple[str, ...] = (),
             rules: ReviewRules | None = None) -> list[ReviewReason]:
    return review_reasons(result, evidence=check_evidence(result, pages=pages), schema_errors=schema_errors,
                          rules=rules)


def _off(code: str) -> ReviewRules:
    return ReviewRules(**{code: False})


def test_a_faithful_result_needs_no_review(pages: dict[int, str]) -> None:
    result = _result()
    evidence = check_evidence(result, pages=pages)
    assert set(evidence) == {"/kpis/revenue/0", "/kpis/revenue/1", "/kpis/net_income/0", "/kpis/net_income/1",
                             "/kpis/operating_cash_flow/0", "/kpis/eps/0", "/risk_factors/0"}
    assert {e.kind for e in evidence.values()} == {"exact"}
    assert review_reasons(result, evidence=evidence) == []


@pytest.mark.parametrize("source_page", [None, 0, -1, "4", True])
def test_missing_or_non_positive_source_page(pages: dict[int, str], source_page: object) -> None:
    result = _result()
    result["kpis"]["revenue"][0]["source_page"] = source_page
    reasons = _reasons(result, pages)
    assert [(r.code, r.field) for r in reasons] == [(SOURCE_PAGE_MISSING, "/kpis/revenue/0")]  # not twice
    assert reasons[0].details == {"source_page": source_page}
    assert _reasons(result, pages, rules=_off(SOURCE_PAGE_MISSING)) == []


def test_a_quote_not_on_its_page(pages: dict[int, str]) -> None:
    result = _result()
    result["kpis"]["net_income"][0]["source_page"] = 5  # the sentence is on page 7
    reasons = _reasons(result, pages)
    assert [(r.code, r.field) for r in reasons] == [(EVIDENCE_NOT_FOUND, "/kpis/net_income/0")]
    details = reasons[0].details
    assert details["kind"] == "not_found" and details["source_page"] == 5 and details["found_on_pages"] == [7]
    assert "found on page 7" in reasons[0].message
    assert _reasons(result, pages, rules=_off(EVIDENCE_NOT_FOUND)) == []


def test_a_quote_with_a_changed_figure_and_a_page_beyond_the_document(pages: dict[int, str]) -> None:
    result = _result()
    result["kpis"]["revenue"][0]["quote"] = "Revenue for fiscal year 2024 was $61,922 million, up 126% from a year ago."
    result["kpis"]["eps"][0]["source_page"] = 99
    reasons = _reasons(result, pages)
    assert [(r.code, r.field, r.details["page_status"]) for r in reasons] == [
        (EVIDENCE_NOT_FOUND, "/kpis/revenue/0", "ok"), (EVIDENCE_NOT_FOUND, "/kpis/eps/0", "out_of_range")]
    assert reasons[0].details["reason"] == "numbers_differ"


def test_a_fuzzy_quote_passes_unless_fuzzy_is_not_accepted(pages: dict[int, str]) -> None:
    result = _result()
    result["kpis"]["revenue"][0]["quote"] = "Revenue for fiscal year 2024 was $60,922 millions, up 126% from a year ago"
    assert _reasons(result, pages) == []
    reasons = _reasons(result, pages, rules=ReviewRules(accept_fuzzy=False))
    assert [(r.code, r.details["kind"]) for r in reasons] == [(EVIDENCE_NOT_FOUND, "fuzzy")]


def test_a_value_its_quote_does_not_print(pages: dict[int, str]) -> None:
    result = _result()
    result["kpis"]["revenue"][0]["value"] = 6092.2  # the quote says 60,922
    reasons = _reasons(result, pages)
    assert [(r.code, r.field, r.details["rule"]) for r in reasons] == [
        (EVIDENCE_NOT_FOUND, "/kpis/revenue/0", "value_not_in_quote")]
    assert reasons[0].details["kind"] == "exact" and reasons[0].details["value"] == 6092.2
    assert _reasons(result, pages, rules=ReviewRules(value_in_quote=False)) == []
    assert _reasons(result, pages, rules=_off(EVIDENCE_NOT_FOUND)) == []


def test_evidence_that_was_not_checked_is_a_reason() -> None:
    result = _result()
    reasons = review_reasons(result, evidence={})
    assert {r.code for r in reasons} == {EVIDENCE_NOT_FOUND} and len(reasons) == 7
    assert all(r.details["checked"] is False for r in reasons)


def test_a_year_over_year_change_beyond_the_limit(pages: dict[int, str]) -> None:
    result = _result()
    result["kpis"]["revenue"][1]["value"] = 9000.0  # 60,922 against 9,000: +577 %
    reasons = [r for r in _reasons(result, pages) if r.code == KPI_ANOMALY]
    assert [(r.field, r.details["rule"]) for r in reasons] == [("/kpis/revenue/0", "yoy_change")]
    assert reasons[0].details["change"] == pytest.approx(5.769, abs=1e-3)
    assert reasons[0].details["previous_field"] == "/kpis/revenue/1"
    assert "+577%" in reasons[0].message
    assert [r for r in _reasons(result, pages, rules=ReviewRules(yoy_change_limit=6.0)) if r.code == KPI_ANOMALY] == []
    assert [r for r in _reasons(result, pages, rules=_off(KPI_ANOMALY)) if r.code == KPI_ANOMALY] == []


def test_year_over_year_compares_scaled_values_and_only_like_with_like() -> None:
    def entry(year: int, value: float, unit: str, currency: str = "CNY", period: str = "FY") -> dict[str, Any]:
        return {"period": str(year), "fiscal_year": year, "fiscal_period": period, "value": value, "unit": unit,
                "currency": currency, "source_page": 1, "quote": "q", "confidence": 0.99}

    rules = ReviewRules(source_page_missing=False, evidence_not_found=False)
    same = {"kpis": {"revenue": [entry(2024, 1.2, "hundred_million"), entry(2023, 11000, "ten_thousand")]}}
    assert review_reasons(same, evidence={}, rules=rules) == []  # 1.2 亿 against 1.1 亿: +9 %
    drop = {"kpis": {"net_income": [entry(2024, -60, "million"), entry(2023, 10, "million")]}}
    assert [r.details["change"] for r in review_reasons(drop, evidence={}, rules=rules)] == [-7.0]
    unlike = {"kpis": {"revenue": [entry(2024, 900, "million"), entry(2023, 1, "million", currency="USD"),
                                   entry(2023, 1, "million", period="Q4"), entry(2022, 0, "million")]}}
    assert review_reasons(unlike, evidence={}, rules=rules) == []  # other currency, other period
    from_zero = {"kpis": {"revenue": [entry(2024, 900, "million"), entry(2023, 0, "million")]}}
    assert review_reasons(from_zero, evidence={}, rules=rules) == []  # no change can be computed from zero


def test_a_negative_revenue(pages: dict[int, str]) -> None:
    result = _result()
    result["kpis"]["revenue"][1]["value"] = -26974.0
    reasons = [r for r in _reasons(result, pages) if r.code == KPI_ANOMALY]
    assert [(r.field, r.details["rule"]) for r in reasons] == [("/kpis/revenue/1", "negative")]
    result["kpis"]["revenue"][1]["value"] = 26974.0
    result["kpis"]["net_income"][1]["value"] = -100.0  # a loss is not an anomaly by default
    assert [r.details["rule"] for r in _reasons(result, pages) if r.code == KPI_ANOMALY] == ["yoy_change"]
    assert [r for r in _reasons(result, pages, rules=_off(KPI_ANOMALY)) if r.code == KPI_ANOMALY] == []


@pytest.mark.parametrize("confidence", [0.84, 0.0, None, "high"])
def test_low_or_missing_confidence(pages: dict[int, str], confidence: object) -> None:
    result = _result()
    result["kpis"]["eps"][0]["confidence"] = confidence
    reasons = _reasons(result, pages)
    assert [(r.code, r.field) for r in reasons] == [(LOW_CONFIDENCE, "/kpis/eps/0")]
    assert reasons[0].details == {"confidence": confidence, "threshold": 0.85}
    assert _reasons(result, pages, rules=_off(LOW_CONFIDENCE)) == []
    lenient = [r.code for r in _reasons(result, pages, rules=ReviewRules(confidence_threshold=0.0))]
    assert lenient == ([] if isinstance(confidence, float) else [LOW_CONFIDENCE])  # no number is never enough


def test_exactly_the_threshold_is_enough(pages: dict[int, str]) -> None:
    result = _result()
    result["kpis"]["eps"][0]["confidence"] = 0.85
    assert _reasons(result, pages) == []


def test_schema_still_invalid_after_the_retry(pages: dict[int, str]) -> None:
    errors = ("/kpis/revenue/0/unit: 'millions' is not one of [...]",)
    reasons = _reasons(_result(), pages, schema_errors=errors)
    assert [(r.code, r.field, r.details) for r in reasons] == [(SCHEMA_INVALID, None, {"errors": list(errors)})]
    assert _reasons(_result(), pages, schema_errors=errors, rules=_off(SCHEMA_INVALID)) == []


@pytest.mark.parametrize(("field", "text", "term"), [
    ("text", "There is substantial doubt about our ability to continue as a Going  Concern.", "going concern"),
    ("title", "Material weakness in internal control", "material weakness"),
    ("text", "公司存在财务重述的风险。", "财务重述"),
    ("text", "公司可能被退 市。", "退市"),  # a line break inside the term
])
def test_a_risk_factor_on_the_block_list(pages: dict[int, str], field: str, text: str, term: str) -> None:
    result = _result()
    result["risk_factors"][0][field] = text
    reasons = _reasons(result, pages)
    assert [(r.code, r.field) for r in reasons] == [(RISK_FACTOR_BLOCKED, "/risk_factors/0")]
    assert reasons[0].details["terms"] == [term]
    assert _reasons(result, pages, rules=_off(RISK_FACTOR_BLOCKED)) == []
    assert _reasons(result, pages, rules=ReviewRules(blocked_risk_terms=("cyber attack",))) == []


def test_every_trigger_at_once_in_trigger_order_and_all_switched_off(pages: dict[int, str]) -> None:
    result = _result()
    result["kpis"]["revenue"][0]["source_page"] = None
    result["kpis"]["net_income"][0]["source_page"] = 5
    result["kpis"]["revenue"][1]["value"] = -1.0
    result["kpis"]["eps"][0]["confidence"] = 0.5
    result["risk_factors"][0]["text"] = "Fraud by a supplier."
    reasons = _reasons(result, pages, schema_errors=("x",))
    assert [(r.code, r.field) for r in reasons] == [
        (SOURCE_PAGE_MISSING, "/kpis/revenue/0"), (EVIDENCE_NOT_FOUND, "/kpis/revenue/1"),  # -1 is not in its quote
        (EVIDENCE_NOT_FOUND, "/kpis/net_income/0"), (KPI_ANOMALY, "/kpis/revenue/1"),  # negative
        (KPI_ANOMALY, "/kpis/revenue/0"), (LOW_CONFIDENCE, "/kpis/eps/0"), (SCHEMA_INVALID, None),  # from -1
        (RISK_FACTOR_BLOCKED, "/risk_factors/0")]
    assert [r.as_dict()["code"] for r in reasons] == [r.code for r in reasons]
    everything_off = ReviewRules(**{code: False for code in TRIGGER_CODES})
    assert _reasons(result, pages, schema_errors=("x",), rules=everything_off) == []


def test_rules_from_configuration() -> None:
    rules = ReviewRules.from_mapping({"low_confidence": False, "confidence_threshold": 1,
                                      "blocked_risk_terms": ["sanctions"]})
    assert rules == ReviewRules(low_confidence=False, confidence_threshold=1.0, blocked_risk_terms=("sanctions",))
    with pytest.raises(ValueError, match="unknown review rule 'colour'"):
        ReviewRules.from_mapping({"colour": "red"})
    for bad in ({"low_confidence": "no"}, {"yoy_change_limit": True}, {"blocked_risk_terms": "fraud"}):
        with pytest.raises(ValueError, match="wrong type"):
            ReviewRules.from_mapping(bad)
