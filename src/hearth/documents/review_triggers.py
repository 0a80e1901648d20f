"""When an extracted financial result goes to a human instead of straight to the caller (seed 003 §8).

Six triggers, each switched on by default and each with a switch in :class:`ReviewRules`:

==========================  ==================================================================================
code                        fires for
==========================  ==================================================================================
``source_page_missing``     a KPI entry or risk factor whose ``source_page`` is null, not an integer, or <= 0
``evidence_not_found``      a value whose quote is not on the page it cites (``not_found``; with
                            ``accept_fuzzy=False`` a ``fuzzy`` match too), or whose page is beyond the document;
                            and (``value_in_quote``) a numeric value its quote does not print
``kpi_anomaly``             a year-over-year change beyond ±``yoy_change_limit`` (5.0 = ±500 %) between the same
                            KPI, fiscal period and currency in consecutive fiscal years (values scaled by unit;
                            a zero base is skipped), or a negative value of a KPI in ``non_negative_kpis``
                            (revenue)
``low_confidence``          a value whose ``confidence`` is below ``confidence_threshold`` (0.85), or missing
``schema_invalid``          the result still does not match the schema after the corrective retry
``risk_factor_blocked``     a risk factor whose title, text or quote contains a term of ``blocked_risk_terms``
                            (compared after :func:`~hearth.documents.evidence.normalise`, ignoring case)
==========================  ==================================================================================

A value without a usable page is reported once, as ``source_page_missing``: its evidence cannot be
checked, so ``evidence_not_found`` does not repeat it. The result's shape is the one of
:mod:`hearth.documents.financial_schema`; evidence comes from :func:`check_evidence` (the pipeline's
``checking_evidence`` step), keyed by the value's JSON pointer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hearth.documents.evidence import Evidence, check_value, normalise
from hearth.documents.financial_schema import UNIT_SCALE, CitedValue, cited_values

SOURCE_PAGE_MISSING = "source_page_missing"
EVIDENCE_NOT_FOUND = "evidence_not_found"
KPI_ANOMALY = "kpi_anomaly"
LOW_CONFIDENCE = "low_confidence"
SCHEMA_INVALID = "schema_invalid"
RISK_FACTOR_BLOCKED = "risk_factor_blocked"
TRIGGER_CODES = (SOURCE_PAGE_MISSING, EVIDENCE_NOT_FOUND, KPI_ANOMALY, LOW_CONFIDENCE, SCHEMA_INVALID,
                 RISK_FACTOR_BLOCKED)

DEFAULT_BLOCKED_RISK_TERMS = (
    "fraud", "going concern", "material weakness", "restatement", "delisting", "bankruptcy", "insolvency",
    "欺诈", "持续经营", "重大缺陷", "财务重述", "退市", "破产",
)


@dataclass(frozen=True, slots=True)
class ReviewRules:
    """The six triggers' switches and settings (see the module docstring)."""

    source_page_missing: bool = True
    evidence_not_found: bool = True
    accept_fuzzy: bool = True
    value_in_quote: bool = True
    kpi_anomaly: bool = True
    yoy_change_limit: float = 5.0
    non_negative_kpis: tuple[str, ...] = ("revenue",)
    low_confidence: bool = True
    confidence_threshold: float = 0.85
    schema_invalid: bool = True
    risk_factor_blocked: bool = True
    blocked_risk_terms: tuple[str, ...] = DEFAULT_BLOCKED_RISK_TERMS

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> ReviewRules:
        """Rules from configuration (a workflow step's JSON). An unknown key, or a value of the wrong
        type (switches are booleans, limits numbers, lists lists of strings), is a ``ValueError``."""
        defaults = cls()
        kwargs: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in cls.__dataclass_fields__:
                raise ValueError(f"unknown review rule {key!r}")
            default = getattr(defaults, key)
            if isinstance(default, bool):
                ok = isinstance(value, bool)
            elif isinstance(default, float):
                ok = isinstance(value, int | float) and not isinstance(value, bool)
            else:
                ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
                value = tuple(value) if ok else value
            if not ok:
                raise ValueError(f"review rule {key!r} has a value of the wrong type")
            kwargs[key] = float(value) if isinstance(default, float) else value
        return dataclasses.replace(defaults, **kwargs)


@dataclass(frozen=True, slots=True)
class ReviewReason:
    """Why a result needs a human: the trigger ``code``, the JSON pointer of the value at fault
    (``field``; None for the whole result), a sentence for the reviewer and the facts behind it."""

    code: str
    field: str | None
    message: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "field": self.field, "message": self.message, "details": self.details}


def check_evidence(result: Any, *, pages: Mapping[int, str], search_other_pages: bool = True
                   ) -> dict[str, Evidence]:
    """The evidence of every cited value of ``result`` against ``pages`` (``{1-based number: text}``),
    keyed by the value's JSON pointer."""
    return {c.path: check_value(c.value, source_page=c.source_page, quote=c.quote, pages=pages,
                                search_other_pages=search_other_pages) for c in cited_values(result)}


def review_reasons(result: Any, *, evidence: Mapping[str, Evidence], schema_errors: Sequence[str] = (),
                   rules: ReviewRules | None = None) -> list[ReviewReason]:
    """Every reason ``result`` needs review, in trigger order then value order; empty means it does not.

    ``evidence`` is :func:`check_evidence`'s answer for this result; ``schema_errors`` the problems
    still left after the corrective retry (empty when the result is valid).
    """
    rules = rules or ReviewRules()
    values = cited_values(result)
    reasons: list[ReviewReason] = []
    if rules.source_page_missing:
        reasons += [r for c in values if (r := _missing_page(c)) is not None]
    if rules.evidence_not_found:
        reasons += [r for c in values if (r := _evidence(c, evidence.get(c.path), rules)) is not None]
    if rules.kpi_anomaly:
        reasons += _anomalies(values, rules)
    if rules.low_confidence:
        reasons += [r for c in values if (r := _low_confidence(c, rules.confidence_threshold)) is not None]
    if rules.schema_invalid and schema_errors:
        reasons.append(ReviewReason(SCHEMA_INVALID, None, "The result does not match the schema, even after the "
                                    "corrective retry.", {"errors": list(schema_errors)}))
    if rules.risk_factor_blocked:
        reasons += _blocked_risks(values, rules.blocked_risk_terms)
    return reasons


def _page_number(raw: Any) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not float(raw).is_integer():
        return None
    return int(raw)


def _missing_page(c: CitedValue) -> ReviewReason | None:
    page = _page_number(c.source_page)
    if page is not None and page > 0:
        return None
    return ReviewReason(SOURCE_PAGE_MISSING, c.path, f"{_label(c)} does not say which page it comes from.",
                        {"source_page": c.source_page})


def _evidence(c: CitedValue, ev: Evidence | None, rules: ReviewRules) -> ReviewReason | None:
    page = _page_number(c.source_page)
    if page is None or page <= 0:
        return None  # reported as source_page_missing
    if ev is None:
        return ReviewReason(EVIDENCE_NOT_FOUND, c.path, f"The quote of {_label(c)} was not checked.",
                            {"source_page": page, "checked": False})
    if ev.found and (rules.accept_fuzzy or ev.kind == "exact"):
        if rules.value_in_quote and ev.value_in_quote is False:
            return ReviewReason(EVIDENCE_NOT_FOUND, c.path,
                                f"The quote of {_label(c)} does not contain its value {ev.value!r}.",
                                {"rule": "value_not_in_quote", "source_page": page, "quote": ev.quote,
                                 "value": ev.value, "kind": ev.kind, "context": ev.context})
        return None
    if ev.page_status == "out_of_range":
        message = f"{_label(c)} cites page {page}, which the document does not have."
    else:
        message = f"The quote of {_label(c)} is not on page {page}" + (
            f" (found on page {', '.join(map(str, ev.found_on_pages))})." if ev.found_on_pages else ".")
    return ReviewReason(EVIDENCE_NOT_FOUND, c.path, message, {
        "rule": "quote_not_on_page", "source_page": page, "quote": ev.quote, "kind": ev.kind,
        "page_status": ev.page_status,
        "score": round(ev.match.score, 4) if ev.match else 0.0,
        "reason": ev.match.reason if ev.match else None, "found_on_pages": list(ev.found_on_pages),
        "context": ev.context})


def _anomalies(values: list[CitedValue], rules: ReviewRules) -> list[ReviewReason]:
    out: list[ReviewReason] = []
    for c in values:
        value = _number(c.value)
        if c.kind == "kpi" and c.name in rules.non_negative_kpis and value is not None and value < 0:
            out.append(ReviewReason(KPI_ANOMALY, c.path, f"{_label(c)} is negative.",
                                    {"rule": "negative", "value": c.value}))
    by_key: dict[tuple[str, Any, Any, int], CitedValue] = {}
    for c in values:
        year = _page_number(c.entry.get("fiscal_year"))
        if c.kind == "kpi" and year is not None and _absolute(c) is not None:
            by_key.setdefault((c.name, c.entry.get("fiscal_period"), c.entry.get("currency"), year), c)
    for (name, period, currency, year), current in by_key.items():
        previous = by_key.get((name, period, currency, year - 1))
        if previous is None:
            continue
        now, before = _absolute(current), _absolute(previous)
        if now is None or before is None or before == 0:
            continue
        change = (now - before) / abs(before)
        if abs(change) > rules.yoy_change_limit:
            out.append(ReviewReason(
                KPI_ANOMALY, current.path,
                f"{_label(current)} changed {change:+.0%} from {previous.entry.get('period') or year - 1}, "
                f"beyond ±{rules.yoy_change_limit:.0%}.",
                {"rule": "yoy_change", "previous_field": previous.path, "previous_value": previous.value,
                 "value": current.value, "change": round(change, 4), "limit": rules.yoy_change_limit}))
    return out


def _low_confidence(c: CitedValue, threshold: float) -> ReviewReason | None:
    confidence = _number(c.confidence)
    if confidence is not None and confidence >= threshold:
        return None
    message = (f"The model gave no confidence for {_label(c)}." if confidence is None else
               f"The model's confidence in {_label(c)} is {confidence:.2f}, below {threshold:.2f}.")
    return ReviewReason(LOW_CONFIDENCE, c.path, message, {"confidence": c.confidence, "threshold": threshold})


def _blocked_risks(values: list[CitedValue], terms: Sequence[str]) -> list[ReviewReason]:
    wanted = [(term, normalise(term).lower()) for term in terms if normalise(term)]
    out = []
    for c in values:
        if c.kind != "risk_factor":
            continue
        text = normalise(" ".join(str(c.entry.get(k) or "") for k in ("title", "text", "quote"))).lower()
        hits = [term for term, folded in wanted if folded in text]
        if hits:
            out.append(ReviewReason(RISK_FACTOR_BLOCKED, c.path,
                                    f"The risk factor mentions {', '.join(repr(h) for h in hits)}.",
                                    {"terms": hits, "title": c.entry.get("title")}))
    return out


def _number(raw: Any) -> float | None:
    return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else None


def _absolute(c: CitedValue) -> float | None:
    value, scale = _number(c.value), UNIT_SCALE.get(str(c.entry.get("unit")))
    return None if value is None or scale is None else value * scale


def _label(c: CitedValue) -> str:
    if c.kind == "risk_factor":
        return f"risk factor {c.entry.get('title') or c.path}"
    period = c.entry.get("period") or c.entry.get("fiscal_year") or "?"
    return f"{c.name.replace('_', ' ')} ({period})"

