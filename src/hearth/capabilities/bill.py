"""The built-in bill (invoice / receipt) extraction schema and the business rules checked on top of it.

:data:`BILL_SCHEMA` is what bill extraction returns, whether a model produced it or the offline rules in
:mod:`hearth.capabilities.offline` did. A JSON Schema only checks shapes; :func:`check_bill` checks what a
schema cannot say: that the numbers add up, that dates are real calendar dates, that the currency exists.
Its messages are shown to the model in a corrective retry, so each one names the field, the values seen
and what would be right.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

BILL_SCHEMA_CODE: Final = "bill"

_NULLABLE_AMOUNT: Final[dict[str, Any]] = {"type": ["number", "null"], "minimum": 0}
_NULLABLE_DATE: Final[dict[str, Any]] = {
    "type": ["string", "null"],
    "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$",
    "description": "ISO date YYYY-MM-DD, or null when the bill does not show it",
}

BILL_SCHEMA: Final[dict[str, Any]] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Bill",
    "description": "An invoice or receipt. Use null for anything the document does not show; never guess.",
    "type": "object",
    "additionalProperties": False,
    "required": ["total", "currency", "line_items"],
    "properties": {
        "vendor": {"type": ["string", "null"], "description": "Who issued the bill (seller)"},
        "bill_number": {"type": ["string", "null"], "description": "Invoice or receipt number as printed"},
        "issue_date": _NULLABLE_DATE,
        "due_date": _NULLABLE_DATE,
        "currency": {
            "type": ["string", "null"],
            "pattern": "^[A-Z]{3}$",
            "description": "ISO 4217 code such as USD, CNY or EUR",
        },
        "subtotal": {**_NULLABLE_AMOUNT, "description": "Amount before tax"},
        "tax": {**_NULLABLE_AMOUNT, "description": "Total tax amount"},
        "total": {**_NULLABLE_AMOUNT, "description": "Amount payable including tax"},
        "line_items": {
            "type": "array",
            "description": "One entry per billed line; an empty array when there are none",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["description", "amount"],
                "properties": {
                    "description": {"type": "string"},
                    "quantity": _NULLABLE_AMOUNT,
                    "unit_price": _NULLABLE_AMOUNT,
                    "amount": {"type": "number", "minimum": 0, "description": "Line total"},
                },
            },
        },
        "buyer": {"type": ["string", "null"], "description": "Who the bill is addressed to"},
        "notes": {"type": ["string", "null"]},
    },
}


@dataclass(frozen=True, slots=True)
class BillProblem:
    """One broken rule: where (a JSON-pointer-like ``path``), which rule (a stable id) and what to fix."""

    path: str
    rule: str
    message: str


def check_bill(data: Mapping[str, Any], *, tolerance: float = 0.01) -> list[BillProblem]:
    """Business rules for an extracted bill; an empty list means it passes.

    Meant to run after schema validation but safe on any mapping: a field of the wrong shape is reported
    (``not_a_number``, ``bad_date``, ``unknown_currency``) or skipped, never raised on. Absent and null
    fields are not checked. Two amounts agree when they differ by at most ``tolerance`` times the
    aggregate side of the comparison (the subtotal, the total, the line amount), and never by less than
    0.01, so rounding to cents always passes. A sum is only compared when every amount in it is valid,
    so one bad number yields one problem, not a cascade.
    """
    problems: list[BillProblem] = []
    subtotal = _amount(data, "subtotal", "/subtotal", problems)
    tax = _amount(data, "tax", "/tax", problems)
    total = _amount(data, "total", "/total", problems)

    line_amounts: list[float | None] = []
    raw_items = data.get("line_items")
    items: Sequence[Any] = raw_items if isinstance(raw_items, list | tuple) else ()
    for index, item in enumerate(items):
        if not isinstance(item, Mapping):
            line_amounts.append(None)
            continue
        base = f"/line_items/{index}"
        quantity = _amount(item, "quantity", f"{base}/quantity", problems)
        unit_price = _amount(item, "unit_price", f"{base}/unit_price", problems)
        amount = _amount(item, "amount", f"{base}/amount", problems)
        line_amounts.append(amount)
        if quantity is not None and unit_price is not None and amount is not None:
            expected = quantity * unit_price
            if not _close(expected, amount, reference=amount, tolerance=tolerance):
                problems.append(BillProblem(
                    f"{base}/amount", "line_amount_mismatch",
                    f"amount {_fmt(amount)} ≠ quantity {_plain(quantity)} × unit_price {_fmt(unit_price)}"
                    f" = {_fmt(expected)}; fix the amount, the quantity or the unit price"))

    if subtotal is not None and line_amounts and all(a is not None for a in line_amounts):
        lines_sum = math.fsum(a for a in line_amounts if a is not None)
        if not _close(lines_sum, subtotal, reference=subtotal, tolerance=tolerance):
            problems.append(BillProblem(
                "/line_items", "lines_do_not_sum",
                f"line_items amounts sum to {_fmt(lines_sum)} ≠ subtotal {_fmt(subtotal)};"
                " add the missing lines or fix the subtotal"))

    if subtotal is not None and tax is not None and total is not None:
        if not _close(subtotal + tax, total, reference=total, tolerance=tolerance):
            problems.append(BillProblem(
                "/total", "total_mismatch",
                f"total {_fmt(total)} ≠ subtotal {_fmt(subtotal)} + tax {_fmt(tax)} = {_fmt(subtotal + tax)};"
                " fix whichever was misread"))

    issue = _date(data, "issue_date", problems)
    due = _date(data, "due_date", problems)
    if issue is not None and due is not None and due < issue:
        problems.append(BillProblem(
            "/due_date", "due_before_issue",
            f"due_date {due.isoformat()} is before issue_date {issue.isoformat()}; check both dates"))

    currency = data.get("currency")
    if currency is not None and (not isinstance(currency, str) or currency not in ISO_4217_CODES):
        problems.append(BillProblem(
            "/currency", "unknown_currency",
            f"currency {currency!r:.40} is not an ISO 4217 code; use three upper-case letters such as USD, CNY"
            " or EUR, or null if the bill does not show it"))
    return problems


def _amount(data: Mapping[str, Any], key: str, path: str, problems: list[BillProblem]) -> float | None:
    """The field as a usable number, or None (absent, null, or reported as a problem)."""
    value = data.get(key)
    if value is None:
        return None
    number: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:
            number = None
    if number is None or not math.isfinite(number):
        problems.append(BillProblem(
            path, "not_a_number",
            f"{key} must be a plain JSON number (no quotes, symbols or separators) or null, got {value!r:.40}"))
        return None
    if number < 0:
        problems.append(BillProblem(
            path, "negative_amount", f"{key} is {_fmt(number)} but must be ≥ 0; report amounts without a sign"))
        return None
    return number


_ISO_DATE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


def _date(data: Mapping[str, Any], key: str, problems: list[BillProblem]) -> dt.date | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, str) and _ISO_DATE.fullmatch(value):
        try:
            return dt.date.fromisoformat(value)
        except ValueError:
            pass
    problems.append(BillProblem(
        f"/{key}", "bad_date",
        f"{key} {value!r} is not a real calendar date; use YYYY-MM-DD as printed on the bill, or null"))
    return None


def _close(value: float, expected: float, *, reference: float, tolerance: float) -> bool:
    # The 1e-9 keeps a difference of exactly the allowance (0.01 read back from binary floats) inside it.
    allowed = max(abs(reference) * tolerance, 0.01)
    return abs(value - expected) <= allowed + 1e-9


def _fmt(value: float) -> str:
    """Two decimals for money-like values, more only when the value has them (0.125, 1e-05)."""
    if abs(value - round(value, 2)) < 1e-9:
        return f"{value:.2f}"
    return f"{value:.6f}".rstrip("0")


def _plain(value: float) -> str:
    """A count as people write it: 2, 1.5, 0.25."""
    return f"{value:.6f}".rstrip("0").rstrip(".")


# Active ISO 4217 codes (List One, as maintained by SIX for ISO, late 2026): every circulating currency
# and the fund codes (BOV, CHE, CHW, CLF, COU, MXV, USN, UYI, UYW), but not the codes that name no money
# a bill is paid in (XAG, XAU, XBA–XBD, XDR, XPD, XPT, XSU, XTS, XUA, XXX). Withdrawn, so absent: ANG
# (now XCG), BGN (Bulgaria uses EUR since 2026), CUC, HRK (EUR since 2023), SLL (now SLE), ZWL (now ZWG).
ISO_4217_CODES: Final[frozenset[str]] = frozenset("""
AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BHD BIF BMD BND BOB BOV BRL BSD BTN BWP BYN BZD
CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP
GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW
KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN
NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD
SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD USN UYI UYU UYW
UZS VED VES VND VUV WST XAF XCD XCG XOF XPF YER ZAR ZMW ZWG
""".split())
