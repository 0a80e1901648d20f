"""The bill schema (shapes) and check_bill (what a schema cannot say: sums, real dates, real currencies)."""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import jsonschema
import pytest

from hearth.capabilities.bill import BILL_SCHEMA, BILL_SCHEMA_CODE, ISO_4217_CODES, BillProblem, check_bill

GOOD_BILL: dict[str, Any] = {
    "vendor": "ACME Widgets Ltd.",
    "bill_number": "INV-2026-001",
    "issue_date": "2026-03-01",
    "due_date": "2026-03-31",
    "currency": "USD",
    "subtotal": 470.0,
    "tax": 23.5,
    "total": 493.5,
    "line_items": [
        {"description": "Widget", "quantity": 2, "unit_price": 10.0, "amount": 20.0},
        {"description": "Gadget Pro", "quantity": 3, "unit_price": 150.0, "amount": 450.0},
    ],
    "buyer": "Globex Corporation",
    "notes": None,
}


def bill(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD_BILL)
    data.update(changes)
    return data


def rules(data: dict[str, Any], **kwargs: Any) -> list[tuple[str, str]]:
    return [(p.path, p.rule) for p in check_bill(data, **kwargs)]


def schema_errors(data: Any) -> list[str]:
    return [e.message for e in jsonschema.Draft202012Validator(BILL_SCHEMA).iter_errors(data)]


# --- the schema ---------------------------------------------------------------------------------------


def test_the_schema_is_a_valid_draft_2020_12_schema_registered_as_bill() -> None:
    jsonschema.Draft202012Validator.check_schema(BILL_SCHEMA)
    assert BILL_SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert BILL_SCHEMA_CODE == "bill"


def test_the_schema_accepts_a_good_bill_and_one_with_only_the_required_fields() -> None:
    assert schema_errors(GOOD_BILL) == []
    assert schema_errors({"total": None, "currency": None, "line_items": []}) == []


@pytest.mark.parametrize("required", ["total", "currency", "line_items"])
def test_the_schema_requires_total_currency_and_line_items(required: str) -> None:
    data = bill()
    del data[required]
    assert schema_errors(data)


@pytest.mark.parametrize("bad", [
    {"total": "493.50"},
    {"total": -1},
    {"total": True},
    {"currency": "usd"},
    {"currency": "US"},
    {"issue_date": "2026/03/01"},
    {"due_date": "1 March 2026"},
    {"vendor": 42},
    {"line_items": None},
    {"line_items": [{"description": "Widget"}]},
    {"line_items": [{"amount": 1.0}]},
    {"line_items": [{"description": "Widget", "amount": 1.0, "sku": "W-1"}]},
    {"line_items": [{"description": "Widget", "amount": 1.0, "quantity": -1}]},
    {"discount": 5.0},
], ids=repr)
def test_the_schema_refuses_bad_shapes(bad: dict[str, Any]) -> None:
    assert schema_errors(bill(**bad))


# --- check_bill: one failing and one passing case per rule ----------------------------------------------


def test_a_consistent_bill_has_no_problems() -> None:
    assert check_bill(GOOD_BILL) == []


def test_absent_and_null_fields_are_not_checked() -> None:
    assert check_bill({"total": None, "currency": None, "line_items": []}) == []
    assert check_bill({}) == []


def test_negative_amounts_are_refused_wherever_they_are() -> None:
    lines = copy.deepcopy(GOOD_BILL["line_items"])
    lines[0]["quantity"] = -2
    assert rules(bill(tax=-5.0, line_items=lines)) == [("/tax", "negative_amount"),
                                                       ("/line_items/0/quantity", "negative_amount")]
    assert rules(bill(tax=0.0, total=470.0)) == []


@pytest.mark.parametrize("value", ["493.50", "$493.50", True, math.nan, math.inf, -math.inf, [493.5], 10**400])
def test_a_total_that_is_not_a_plain_finite_number_is_not_a_number(value: Any) -> None:
    assert rules(bill(total=value)) == [("/total", "not_a_number")]


def test_integers_and_floats_are_numbers() -> None:
    assert rules(bill(subtotal=470, tax=23.5, total=493.5)) == []


def test_line_amounts_must_sum_to_the_subtotal() -> None:
    assert rules(bill(subtotal=500.0, total=523.5)) == [("/line_items", "lines_do_not_sum")]
    assert rules(bill(subtotal=470.0)) == []


def test_lines_are_not_summed_when_there_are_none_or_one_is_unusable() -> None:
    assert rules(bill(line_items=[])) == []
    broken = [{"description": "Widget", "amount": "20.00"}, {"description": "Gadget", "amount": 1.0}]
    assert rules(bill(line_items=broken)) == [("/line_items/0/amount", "not_a_number")]


def test_subtotal_plus_tax_must_equal_the_total() -> None:
    assert rules(bill(total=503.5)) == [("/total", "total_mismatch")]
    assert rules(bill(total=493.5)) == []
    assert rules(bill(tax=None, total=503.5)) == []


def test_each_line_amount_must_be_quantity_times_unit_price() -> None:
    lines = [{"description": "Widget", "quantity": 2, "unit_price": 10.0, "amount": 25.0},
             {"description": "Gadget Pro", "quantity": 3, "unit_price": 150.0, "amount": 450.0}]
    sums = {"subtotal": 475.0, "total": 498.5}
    assert rules(bill(line_items=lines, **sums)) == [("/line_items/0/amount", "line_amount_mismatch")]
    lines[0]["quantity"] = None
    assert rules(bill(line_items=lines, **sums)) == []


def test_dates_must_be_real_calendar_dates() -> None:
    assert rules(bill(issue_date="2026-02-30", due_date=None)) == [("/issue_date", "bad_date")]
    assert rules(bill(due_date="2026-13-01")) == [("/due_date", "bad_date")]
    assert rules(bill(issue_date="1 March 2026")) == [("/issue_date", "bad_date")]
    assert rules(bill(issue_date=20260301)) == [("/issue_date", "bad_date")]
    assert rules(bill(issue_date="2024-02-29", due_date="2024-03-29")) == []


def test_the_due_date_must_not_be_before_the_issue_date() -> None:
    assert rules(bill(issue_date="2026-03-01", due_date="2026-02-28")) == [("/due_date", "due_before_issue")]
    assert rules(bill(issue_date="2026-03-01", due_date="2026-03-01")) == []


@pytest.mark.parametrize("code", ["USD", "CNY", "EUR", "JPY", "GBP", "CHF", "XCG", "ZWG"])
def test_active_iso_4217_codes_pass(code: str) -> None:
    assert rules(bill(currency=code)) == []


@pytest.mark.parametrize("code", ["XYZ", "usd", "US", "RMB", "USDT", "", 840, "HRK", "XXX", "XTS"])
def test_anything_else_is_an_unknown_currency(code: Any) -> None:
    assert rules(bill(currency=code)) == [("/currency", "unknown_currency")]


def test_the_code_list_is_the_full_current_list() -> None:
    assert 150 <= len(ISO_4217_CODES) <= 185
    assert all(len(code) == 3 and code.isascii() and code.isupper() for code in ISO_4217_CODES)


# --- tolerance --------------------------------------------------------------------------------------------


def test_a_cent_of_rounding_always_passes_even_with_no_relative_tolerance() -> None:
    assert rules(bill(total=493.51), tolerance=0) == []
    assert rules(bill(total=493.52), tolerance=0) == [("/total", "total_mismatch")]


def test_the_tolerance_is_relative_to_the_total() -> None:
    big = bill(line_items=[], subtotal=10_000.0, tax=0.0, total=10_100.0)
    assert rules(big) == []
    assert rules(big, tolerance=0.005) == [("/total", "total_mismatch")]
    assert rules(bill(line_items=[], subtotal=10_000.0, tax=0.0, total=10_102.0)) == [("/total", "total_mismatch")]


# --- what the model is told -------------------------------------------------------------------------------


def test_messages_name_the_values_so_the_model_can_correct_them() -> None:
    [problem] = check_bill(bill(subtotal=100.0, tax=5.0, total=110.0, line_items=[]))
    assert problem == BillProblem("/total", "total_mismatch", problem.message)
    assert "total 110.00 ≠ subtotal 100.00 + tax 5.00" in problem.message
    [line] = check_bill(bill(line_items=[{"description": "W", "quantity": 2, "unit_price": 10.0, "amount": 25.0}],
                             subtotal=25.0, total=48.5))
    assert "amount 25.00 ≠ quantity 2 × unit_price 10.00" in line.message
    [date] = check_bill(bill(issue_date="2026-02-30", due_date=None))
    assert "'2026-02-30'" in date.message and "YYYY-MM-DD" in date.message


def test_problems_are_frozen_values() -> None:
    problem = BillProblem("/total", "total_mismatch", "m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.rule = "other"  # type: ignore[misc]
    assert problem == BillProblem("/total", "total_mismatch", "m")


def test_check_bill_never_raises_on_shapes_the_schema_would_refuse() -> None:
    junk: dict[str, Any] = {"line_items": ["not an item", {"amount": {}}], "currency": ["USD"], "due_date": {}}
    assert sorted(rules(junk)) == [("/currency", "unknown_currency"), ("/due_date", "bad_date"),
                                   ("/line_items/1/amount", "not_a_number")]
    assert rules({"line_items": "none", "subtotal": 5.0}) == []
