"""Test PDFs generated with reportlab: nothing is downloaded, every byte is made here.

Chinese text uses reportlab's built-in CID font ``STSong-Light`` (Adobe-GB1, not embedded, with a
``ToUnicode`` map PDFium reads back exactly — no system font is needed). Plain functions returning
``bytes`` (and, for the financial report, where each fact is printed), usable from tests and bench/.
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image
from reportlab.lib.pagesizes import A4
from reportlab.lib.pdfencrypt import StandardEncryption
from reportlab.pdfbase import pdfmetrics
from reportlab.pdfbase.cidfonts import UnicodeCIDFont
from reportlab.pdfgen import canvas

CJK_FONT = "STSong-Light"
pdfmetrics.registerFont(UnicodeCIDFont(CJK_FONT))

_WIDTH, _HEIGHT = A4
_MARGIN = 60.0

LOREM = ("The company designs and sells accelerated computing platforms for data centres, gaming and "
         "professional visualisation. Demand for data centre products grew strongly during the year, while "
         "supply constraints eased in the second half. Management continues to invest in research and "
         "development, and expects operating expenses to increase in line with headcount. ")


def _canvas(buffer: io.BytesIO, *, encrypt: StandardEncryption | None = None) -> canvas.Canvas:
    # invariant=True: the same call makes the same bytes (no timestamps or random ids)
    return canvas.Canvas(buffer, pagesize=A4, invariant=True, encrypt=encrypt)


def _draw_lines(c: canvas.Canvas, lines: Sequence[str], *, font: str, size: float, top: float | None = None
                ) -> float:
    y = top if top is not None else _HEIGHT - _MARGIN
    c.setFont(font, size)
    for line in lines:
        c.drawString(_MARGIN, y, line)
        y -= size * 1.4
    return y


def text_pdf(pages: Sequence[Sequence[str]], *, font: str = "Helvetica", size: float = 10,
             encrypt: StandardEncryption | None = None) -> bytes:
    """One page per entry, each a list of lines drawn top to bottom (no wrapping here)."""
    buffer = io.BytesIO()
    c = _canvas(buffer, encrypt=encrypt)
    for lines in pages:
        _draw_lines(c, lines, font=font, size=size)
        c.showPage()
    c.save()
    return buffer.getvalue()


def english_pages(count: int, *, lines_per_page: int = 40) -> list[list[str]]:
    """``count`` pages of English prose, each starting with ``Page N of the annual report``."""
    body = textwrap.wrap(LOREM * 12, 95)
    return [[f"Page {n} of the annual report", *body[: lines_per_page - 1]] for n in range(1, count + 1)]


def english_report(pages: int = 3) -> bytes:
    return text_pdf(english_pages(pages))


CHINESE_PAGES = [
    ["第一节 公司简介", "本公司主要从事人工智能计算平台的研发与销售。", "报告期内，公司营业收入为 1,234.5 亿元，",
     "同比增长 12.3%。"],
    ["第二节 风险因素", "公司面临市场竞争加剧、供应链中断以及汇率波动等风险。", "净利润：５６７亿元（全角数字）。"],
]


def chinese_report() -> bytes:
    return text_pdf(CHINESE_PAGES, font=CJK_FONT, size=12)


def encrypted_pdf(user_password: str = "secret") -> bytes:
    """Needs ``user_password`` to open (RC4-128, reportlab's standard encryption)."""
    return text_pdf([["Confidential board minutes."]], encrypt=StandardEncryption(user_password,
                                                                                   ownerPassword="owner"))


def corrupt_pdf() -> bytes:
    """Starts like a PDF, then nothing PDFium can recover: no objects, no xref, no trailer."""
    return b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R\nthis is not a pdf at all\n" * 4


def truncated_pdf() -> bytes:
    """A real PDF cut after its first 40 bytes."""
    return english_report(1)[:40]


def _draw_image_only_page(c: canvas.Canvas, *, scan_px: tuple[int, int] | None = None) -> None:
    """Shapes and an inline image: stripes, or with ``scan_px`` grey noise of that size (a scan's weight)."""
    c.setFillColorRGB(0.8, 0.8, 0.9)
    c.rect(_MARGIN, _HEIGHT / 2, 300, 200, fill=1)
    c.circle(_WIDTH / 2, _HEIGHT / 3, 60, fill=1)
    if scan_px is not None:
        image = Image.effect_noise(scan_px, 64)
    else:
        image = Image.new("L", (120, 80), color=200)
        for x in range(0, 120, 4):
            for y in range(80):
                image.putpixel((x, y), 30)
    c.drawInlineImage(image, _MARGIN, 100, width=240, height=160)


def image_only_pdf() -> bytes:
    """One page of shapes and an inline image, no text at all (a scan, as far as a parser can tell)."""
    buffer = io.BytesIO()
    c = _canvas(buffer)
    _draw_image_only_page(c)
    c.showPage()
    c.save()
    return buffer.getvalue()


def mixed_pdf() -> bytes:
    """Three pages: text, image only (page 2), text again."""
    buffer = io.BytesIO()
    c = _canvas(buffer)
    _draw_lines(c, ["Page one has a text layer.", LOREM[:90]], font="Helvetica", size=10)
    c.showPage()
    _draw_image_only_page(c)
    c.showPage()
    _draw_lines(c, ["Page three has a text layer too.", LOREM[:90]], font="Helvetica", size=10)
    c.showPage()
    c.save()
    return buffer.getvalue()


def blank_pdf() -> bytes:
    """One page with nothing on it: no text, but nothing to read either."""
    return text_pdf([[]])


TABLE_ROWS = [
    ["Metric", "FY2024", "FY2023"],
    ["Revenue", "60,922", "26,974"],
    ["Net income", "29,760", "9,752"],
    ["Operating cash flow", "28,090", "5,641"],
    ["Diluted EPS", "11.93", "3.90"],
]


def _draw_table(c: canvas.Canvas, rows: Sequence[Sequence[str]], *, top: float, font: str = "Helvetica",
                size: float = 10) -> float:
    """Left-aligned first column, right-aligned number columns, no rules: the hard case for a parser."""
    x_label, right_edges = _MARGIN, [330.0, 430.0]
    y = top
    c.setFont(font, size)
    for row in rows:
        c.drawString(x_label, y, row[0])
        for cell, right in zip(row[1:], right_edges, strict=True):
            c.drawRightString(right, y, cell)
        y -= size * 1.6
    return y


def table_pdf() -> bytes:
    """Page 1 prose; page 2 a heading, a paragraph, :data:`TABLE_ROWS` as a table, a closing paragraph."""
    buffer = io.BytesIO()
    c = _canvas(buffer)
    _draw_lines(c, textwrap.wrap(LOREM, 95), font="Helvetica", size=10)
    c.showPage()
    y = _draw_lines(c, ["Consolidated results (USD millions)", *textwrap.wrap(LOREM, 95)], font="Helvetica",
                    size=10)
    y = _draw_table(c, TABLE_ROWS, top=y - 20)
    _draw_lines(c, textwrap.wrap(LOREM, 95), font="Helvetica", size=10, top=y - 20)
    c.showPage()
    c.save()
    return buffer.getvalue()


@dataclass(frozen=True, slots=True)
class Fact:
    """A value printed in the financial report: on ``page``, in the sentence ``quote``."""

    kpi: str
    fiscal_year: int
    value: float
    page: int
    quote: str


FINANCIAL_FACTS = [
    Fact("revenue", 2024, 60922.0, 4, "Revenue for fiscal year 2024 was $60,922 million, up 126% from a year ago."),
    Fact("revenue", 2023, 26974.0, 4, "Revenue for fiscal year 2023 was $26,974 million."),
    Fact("net_income", 2024, 29760.0, 7, "Net income for fiscal year 2024 was $29,760 million."),
    Fact("net_income", 2023, 9752.0, 7, "Net income for fiscal year 2023 was $9,752 million."),
    Fact("operating_cash_flow", 2024, 28090.0, 11,
         "Cash provided by operating activities was $28,090 million in fiscal year 2024."),
    Fact("eps", 2024, 11.93, 15, "Diluted net income per share was $11.93 for fiscal year 2024."),
]
FINANCIAL_RISK = ("Risk factor: our business depends on a limited number of suppliers, and a disruption of "
                  "supply could harm our results.", 18)
FINANCIAL_TABLE_PAGE = 9
FINANCIAL_PAGES = 20


def financial_report() -> bytes:
    """A 20-page annual report: prose on every page, the facts of :data:`FINANCIAL_FACTS` and
    :data:`FINANCIAL_RISK` each on its page (wrapped as a reader would see it), the KPI table on page 9."""
    by_page: dict[int, list[str]] = {}
    for fact in FINANCIAL_FACTS:
        by_page.setdefault(fact.page, []).append(fact.quote)
    by_page.setdefault(FINANCIAL_RISK[1], []).append(FINANCIAL_RISK[0])
    buffer = io.BytesIO()
    c = _canvas(buffer)
    prose = textwrap.wrap(LOREM * 6, 95)
    for number in range(1, FINANCIAL_PAGES + 1):
        lines = [f"Annual report 2024 - page {number}", *prose[:18]]
        for sentence in by_page.get(number, []):
            lines += ["", *textwrap.wrap(sentence, 60)]
        y = _draw_lines(c, [*lines, "", *prose[18:26]], font="Helvetica", size=10)
        if number == FINANCIAL_TABLE_PAGE:
            _draw_table(c, TABLE_ROWS, top=y - 20)
        c.showPage()
    c.save()
    return buffer.getvalue()


CHINESE_TABLE_ROWS = [
    ["项目", "2024年", "2023年"],
    ["营业收入", "1,234.5", "1,099.2"],
    ["净利润", "567.0", "480.3"],
]


def chinese_table_pdf() -> bytes:
    """A Chinese heading line and :data:`CHINESE_TABLE_ROWS` (STSong-Light), then a sentence."""
    buffer = io.BytesIO()
    c = _canvas(buffer)
    y = _draw_lines(c, ["合并利润表（单位：亿元）"], font=CJK_FONT, size=12)
    y = _draw_table(c, CHINESE_TABLE_ROWS, top=y - 12, font=CJK_FONT, size=12)
    _draw_lines(c, ["以上数据经审计。"], font=CJK_FONT, size=12, top=y - 12)
    c.showPage()
    c.save()
    return buffer.getvalue()


def table_with_gap_pdf() -> bytes:
    """A table whose third row has no value in the last column, and a lone two-cell line elsewhere."""
    buffer = io.BytesIO()
    c = _canvas(buffer)
    rows = [["Segment", "2024", "2023"], ["Data centre", "47,525", "15,005"], ["Gaming", "10,447", ""],
            ["Automotive", "1,091", "903"], ["Other", "1,859", "1,066"]]
    c.setFont("Helvetica", 10)
    y = _HEIGHT - _MARGIN
    for row in rows:
        c.drawString(_MARGIN, y, row[0])
        for cell, right in zip(row[1:], [330.0, 430.0], strict=True):
            if cell:
                c.drawRightString(right, y, cell)
        y -= 16
    c.drawString(_MARGIN, y - 200, "Signed:")
    c.drawString(300, y - 200, "The board")
    c.showPage()
    c.save()
    return buffer.getvalue()


def financial_result() -> dict[str, object]:
    """What a faithful model extracts from :func:`financial_report`: the KPI schema's shape, every value
    citing its page and quoting its sentence (no review trigger fires on it)."""
    kpis: dict[str, list[dict[str, object]]] = {"revenue": [], "net_income": [], "operating_cash_flow": [], "eps": []}
    for fact in FINANCIAL_FACTS:
        kpis[fact.kpi].append({
            "period": f"FY{fact.fiscal_year}", "fiscal_year": fact.fiscal_year, "fiscal_period": "FY",
            "value": fact.value, "unit": "one" if fact.kpi == "eps" else "million", "currency": "USD",
            "source_page": fact.page, "quote": fact.quote, "confidence": 0.95})
    risk_text, risk_page = FINANCIAL_RISK
    return {"company": "Example Corp", "kpis": kpis, "risk_factors": [{
        "title": "Supplier concentration", "text": "A few suppliers make most components.",
        "source_page": risk_page, "quote": risk_text.removeprefix("Risk factor: "), "confidence": 0.9}]}


def long_report(pages: int, *, scan_every: int = 0, scan_px: tuple[int, int] | None = None) -> bytes:
    """``pages`` pages of ~3,000 characters of English prose each (benchmarks); with ``scan_every`` = k,
    every k-th page is image-only instead (its image ``scan_px`` pixels of noise, if given)."""
    buffer = io.BytesIO()
    c = _canvas(buffer)
    for number, lines in enumerate(english_pages(pages, lines_per_page=40), start=1):
        if scan_every and number % scan_every == 0:
            _draw_image_only_page(c, scan_px=scan_px)
        else:
            _draw_lines(c, lines, font="Helvetica", size=10)
        c.showPage()
    c.save()
    return buffer.getvalue()


def owner_password_pdf() -> bytes:
    """Encrypted with an owner password only (permissions: no printing); opens without a password."""
    return text_pdf([["Permissions only, no user password."]],
                    encrypt=StandardEncryption("", ownerPassword="owner", canPrint=0))
