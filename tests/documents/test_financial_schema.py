"""The financial-report example: the KPI schema is valid draft 2020-12 and accepts a faithful result,
the prompts render with the capability built-ins only, and the walk over cited values and the merge of
per-chunk results."""

from __future__ import annotations

import copy
import json

import pytest
from jsonschema import Draft202012Validator

from hearth.capabilities.structured import check_schema, validate
from hearth.documents.financial_schema import FINANCIAL_KPI_SCHEMA, KPI_NAMES, PROMPTS, cited_values, merge_results
from hearth.prompts.rendering import BUILTINS, check_templates
from tests.documents import pdf_factory


def test_the_schema_is_a_valid_2020_12_schema_and_a_faithful_result_matches_it() -> None:
    check_schema(FINANCIAL_KPI_SCHEMA)
    assert validate(pdf_factory.financial_result(), FINANCIAL_KPI_SCHEMA) == []
    json.dumps(FINANCIAL_KPI_SCHEMA)  # plain JSON, storable as a prompt's output schema


@pytest.mark.parametrize(("path", "bad", "pointer"), [
    (("kpis", "revenue", 0, "unit"), "millions", "/kpis/revenue/0/unit"),
    (("kpis", "revenue", 0, "currency"), "usd", "/kpis/revenue/0/currency"),
    (("kpis", "eps", 0, "confidence"), 1.5, "/kpis/eps/0/confidence"),
    (("kpis", "net_income", 0, "value"), "29,760", "/kpis/net_income/0/value"),
    (("risk_factors", 0, "quote"), "", "/risk_factors/0/quote"),
])
def test_the_schema_refuses_wrong_fields(path: tuple[str | int, ...], bad: object, pointer: str) -> None:
    result = copy.deepcopy(pdf_factory.financial_result())
    target: object = result
    for key in path[:-1]:
        target = target[key]  # type: ignore[index]
    target[path[-1]] = bad  # type: ignore[index]
    assert [p.path for p in validate(result, FINANCIAL_KPI_SCHEMA)] == [pointer]


def test_a_null_source_page_is_valid_for_the_schema_and_left_to_the_review_trigger() -> None:
    result = copy.deepcopy(pdf_factory.financial_result())
    result["kpis"]["revenue"][0]["source_page"] = None  # type: ignore[index]
    assert Draft202012Validator(FINANCIAL_KPI_SCHEMA).is_valid(result)


def test_the_prompts_use_only_the_capability_builtins_in_both_languages() -> None:
    assert set(PROMPTS) == {"en", "zh"}
    check_templates({locale: {"system": None, "user": text} for locale, text in PROMPTS.items()}, declared=())
    for text in PROMPTS.values():
        assert "{{ schema }}" in text and "{{ text }}" in text and "[page N]" in text
    assert {"schema", "text"} <= BUILTINS
    assert "营业收入" in PROMPTS["zh"] and "revenue" in PROMPTS["en"]


def test_cited_values_walks_kpis_in_schema_order_then_risk_factors() -> None:
    values = cited_values(pdf_factory.financial_result())
    assert [v.path for v in values] == ["/kpis/revenue/0", "/kpis/revenue/1", "/kpis/net_income/0",
                                        "/kpis/net_income/1", "/kpis/operating_cash_flow/0", "/kpis/eps/0",
                                        "/risk_factors/0"]
    first = values[0]
    assert (first.kind, first.name, first.value, first.source_page, first.confidence) == (
        "kpi", "revenue", 60922.0, 4, 0.95)
    assert values[-1].kind == "risk_factor" and values[-1].value == "A few suppliers make most components."


@pytest.mark.parametrize("broken", [None, [], "text", {"kpis": "x"}, {"kpis": {"revenue": "x"}},
                                    {"kpis": {"revenue": [1, None, {"value": 1}]}, "risk_factors": {"a": 1}}])
def test_cited_values_skips_what_is_not_shaped_like_an_entry(broken: object) -> None:
    values = cited_values(broken)
    assert all(isinstance(v.entry, dict) for v in values)
    assert [v.path for v in values] in ([], ["/kpis/revenue/2"])


def test_merge_keeps_the_most_confident_entry_per_period_and_one_risk_per_title() -> None:
    def entry(year: int, value: float, confidence: float) -> dict[str, object]:
        return {"period": f"FY{year}", "fiscal_year": year, "fiscal_period": "FY", "value": value, "unit": "million",
                "currency": "USD", "source_page": 1, "quote": "q", "confidence": confidence}

    risk = {"title": "Supply", "text": "t", "source_page": 2, "quote": "q", "confidence": 0.7}
    first = {"company": None, "kpis": {"revenue": [entry(2024, 1.0, 0.8)]}, "risk_factors": [risk]}
    second = {"company": "Example", "kpis": {"revenue": [entry(2024, 2.0, 0.9), entry(2023, 3.0, 0.9)],
                                             "eps": [entry(2024, 4.0, 0.5)]},
              "risk_factors": [{**risk, "title": " supply ", "confidence": 0.95}]}
    merged = merge_results([first, second])
    assert merged["company"] == "Example"
    assert [e["value"] for e in merged["kpis"]["revenue"]] == [2.0, 3.0]
    assert merged["kpis"]["eps"][0]["value"] == 4.0 and set(merged["kpis"]) == set(KPI_NAMES)
    assert merged["risk_factors"] == [{**risk, "title": " supply ", "confidence": 0.95}]
    assert validate(merged, FINANCIAL_KPI_SCHEMA) == []
