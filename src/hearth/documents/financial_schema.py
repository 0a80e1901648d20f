"""The financial-report example: the KPI JSON Schema a model fills per chunk, its prompts in English and
Chinese, and the walk over an extracted result's cited values that evidence checks and review triggers use.

**The result shape** (JSON Schema draft 2020-12, :data:`FINANCIAL_KPI_SCHEMA`)::

    {"company": "Example Corp" | null,
     "kpis": {"revenue": [KpiValue, ...], "net_income": [...], "operating_cash_flow": [...], "eps": [...]},
     "risk_factors": [RiskFactor, ...]}

    KpiValue   = {"period": "FY2024", "fiscal_year": 2024, "fiscal_period": "FY" | "H1" | "H2" | "Q1".."Q4",
                  "value": 60922, "unit": "million", "currency": "USD",
                  "source_page": 4, "quote": "Revenue for fiscal year 2024 was $60,922 million", "confidence": 0.93}
    RiskFactor = {"title": "Supply concentration", "text": "...", "source_page": 18, "quote": "...",
                  "confidence": 0.9}

Each KPI is a list, one entry per period the report states (this year and the comparison year, so a
year-over-year change can be computed). ``value`` is the number as printed, scaled by ``unit``
(:data:`UNIT_SCALE`: ``ten_thousand`` = 万, ``hundred_million`` = 亿); EPS uses ``unit: "one"`` and is per
share. ``source_page`` is the number in the ``[page N]`` header the chunk gave the model; it may be null
(the model could not tell) — a review trigger, not a schema error. ``quote`` is the sentence or table row
copied verbatim.

The prompts (:data:`PROMPTS`, ``{"en": ..., "zh": ...}``) are Jinja2 user templates using only the
capability built-ins ``{{ schema }}`` and ``{{ text }}`` (a chunk from
:func:`hearth.documents.chunking.chunk_pages`), ready to be registered in the prompt catalog.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from hearth.documents.evidence import normalise

KPI_NAMES = ("revenue", "net_income", "operating_cash_flow", "eps")
FISCAL_PERIODS = ("FY", "H1", "H2", "Q1", "Q2", "Q3", "Q4")
UNIT_SCALE: dict[str, float] = {"one": 1.0, "thousand": 1e3, "ten_thousand": 1e4, "million": 1e6,
                                "hundred_million": 1e8, "billion": 1e9}

_CITATION: dict[str, Any] = {
    "source_page": {"type": ["integer", "null"],
                    "description": "the N of the [page N] header above the quoted text; null if unknown"},
    "quote": {"type": "string", "minLength": 1, "maxLength": 500,
              "description": "the sentence or table row that states it, copied verbatim from the text"},
    "confidence": {"type": "number", "minimum": 0, "maximum": 1,
                   "description": "how sure you are that value and quote are right, 0 to 1"},
}

FINANCIAL_KPI_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Financial report KPIs",
    "type": "object",
    "additionalProperties": False,
    "required": ["company", "kpis", "risk_factors"],
    "properties": {
        "company": {"type": ["string", "null"], "maxLength": 200},
        "kpis": {
            "type": "object",
            "additionalProperties": False,
            "required": list(KPI_NAMES),
            "properties": {name: {"type": "array", "maxItems": 12, "items": {"$ref": "#/$defs/kpi_value"}}
                           for name in KPI_NAMES},
        },
        "risk_factors": {"type": "array", "maxItems": 50, "items": {"$ref": "#/$defs/risk_factor"}},
    },
    "$defs": {
        "kpi_value": {
            "type": "object",
            "additionalProperties": False,
            "required": ["period", "fiscal_year", "fiscal_period", "value", "unit", "currency", "source_page",
                         "quote", "confidence"],
            "properties": {
                "period": {"type": "string", "minLength": 1, "maxLength": 50,
                           "description": "the period as the report names it, e.g. FY2024 or 2024年度"},
                "fiscal_year": {"type": "integer", "minimum": 1900, "maximum": 2200},
                "fiscal_period": {"enum": list(FISCAL_PERIODS)},
                "value": {"type": "number", "description": "the number as printed, in `unit`"},
                "unit": {"enum": list(UNIT_SCALE),
                         "description": "the scale of value: one, thousand, ten_thousand (万), million, "
                                        "hundred_million (亿), billion; EPS is per share in `one`"},
                "currency": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code"},
                **_CITATION,
            },
        },
        "risk_factor": {
            "type": "object",
            "additionalProperties": False,
            "required": ["title", "text", "source_page", "quote", "confidence"],
            "properties": {
                "title": {"type": "string", "minLength": 1, "maxLength": 200},
                "text": {"type": "string", "minLength": 1, "maxLength": 2000,
                         "description": "the risk in one or two sentences of your own"},
                **_CITATION,
            },
        },
    },
}

PROMPT_EN = """\
You read part of a company's financial report. Extract the key figures and the risk factors as one JSON \
document that matches this JSON Schema:
{{ schema }}

Rules:
- The text is split into pages; each starts with a header line "[page N]". For every value, set \
source_page to the N of the page where you read it, and quote to the sentence or table row that states \
it, copied character for character (same numbers, same words, no ellipsis).
- kpis: revenue, net income, operating cash flow and diluted EPS. Give one entry per period the text \
states (the current year and the comparison year). value is the number as printed; unit is its scale \
(for "$60,922 million" value 60922 and unit "million"); currency is the ISO 4217 code.
- risk_factors: the main risks the text names, each with a short title and one or two sentences.
- If the text does not state a figure, leave its list empty. Never estimate or compute a figure.
- confidence is 0 to 1: how sure you are that the value and the quote are right.
Answer with the JSON only.

Text:
{{ text }}"""

PROMPT_ZH = """\
下面是一家公司财务报告的一部分。请提取关键财务指标和风险因素，输出一个符合以下 JSON Schema 的 JSON 文档：
{{ schema }}

规则：
- 文本按页分隔，每页以“[page N]”开头。每个数值的 source_page 填写读到它的那一页的 N，quote 填写说明该数值的\
原句或表格行，逐字照抄（数字、用词完全一致，不要省略）。
- kpis：营业收入（revenue）、净利润（net_income）、经营活动产生的现金流量净额（operating_cash_flow）、\
稀释每股收益（eps）。文本给出的每个期间（本期和对比期）各写一条。value 为原文数字；unit 为其单位\
（“1,234.5 亿元”即 value 1234.5、unit "hundred_million"；“万元”为 "ten_thousand"）；currency 为 ISO 4217 代码\
（人民币为 CNY）。
- risk_factors：文本提到的主要风险，每条给出简短标题和一两句说明。
- 文本没有给出的指标，其列表留空。不要估算或自行计算任何数字。
- confidence 取 0 到 1，表示你对数值和引文都正确的把握。
只输出 JSON。

文本：
{{ text }}"""

PROMPTS: dict[str, str] = {"en": PROMPT_EN, "zh": PROMPT_ZH}


@dataclass(frozen=True, slots=True)
class CitedValue:
    """One value of a result that cites a page: a KPI entry or a risk factor, at JSON pointer ``path``
    (``/kpis/revenue/0``, ``/risk_factors/2``). Fields are as the model gave them, unchecked."""

    path: str
    kind: Literal["kpi", "risk_factor"]
    name: str  # the KPI name, or "risk_factor"
    entry: Mapping[str, Any]

    @property
    def value(self) -> Any:
        return self.entry.get("value") if self.kind == "kpi" else self.entry.get("text")

    @property
    def source_page(self) -> Any:
        return self.entry.get("source_page")

    @property
    def quote(self) -> Any:
        return self.entry.get("quote")

    @property
    def confidence(self) -> Any:
        return self.entry.get("confidence")


def cited_values(result: Any) -> list[CitedValue]:
    """Every KPI entry and risk factor of ``result``, in schema order. Tolerant of a result that does
    not match the schema (a review may still need to show it): anything not shaped like an entry is
    skipped."""
    if not isinstance(result, Mapping):
        return []
    out: list[CitedValue] = []
    kpis = result.get("kpis")
    if isinstance(kpis, Mapping):
        for name in KPI_NAMES:
            out += [CitedValue(f"/kpis/{name}/{i}", "kpi", name, entry)
                    for i, entry in enumerate(_entries(kpis.get(name)))]
    out += [CitedValue(f"/risk_factors/{i}", "risk_factor", "risk_factor", entry)
            for i, entry in enumerate(_entries(result.get("risk_factors")))]
    return [c for c in out if isinstance(c.entry, Mapping)]


def _entries(raw: Any) -> list[Any]:
    return list(raw) if isinstance(raw, list) else []


def merge_results(results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One result from the per-chunk results: the first non-null company; per KPI one entry per
    (fiscal_year, fiscal_period) — the one with the highest confidence, the earliest chunk on a tie;
    risk factors deduplicated by their normalised title. Entries keep their order of first appearance."""
    company: Any = None
    kpis: dict[str, dict[tuple[Any, Any], Mapping[str, Any]]] = {name: {} for name in KPI_NAMES}
    risks: dict[str, Mapping[str, Any]] = {}
    for result in results:
        if company is None and isinstance(result.get("company"), str):
            company = result["company"]
        for cited in cited_values(result):
            if cited.kind == "kpi":
                _keep_best(kpis[cited.name], (cited.entry.get("fiscal_year"), cited.entry.get("fiscal_period")),
                           cited.entry)
            else:
                title = cited.entry.get("title") or cited.entry.get("text") or ""
                _keep_best(risks, normalise(str(title)).lower(), cited.entry)
    return {"company": company,
            "kpis": {name: [dict(e) for e in kpis[name].values()] for name in KPI_NAMES},
            "risk_factors": [dict(e) for e in risks.values()]}


def _keep_best(slot: dict[Any, Mapping[str, Any]], key: Any, entry: Mapping[str, Any]) -> None:
    if key not in slot or _confidence(entry) > _confidence(slot[key]):
        slot[key] = entry


def _confidence(entry: Mapping[str, Any]) -> float:
    raw = entry.get("confidence")
    return float(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else -1.0
