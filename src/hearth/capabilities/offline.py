"""The degraded, offline fallback: what summarize and bill extraction answer when no model endpoint can serve.

Answers built here carry ``degraded: true``; they are worse than a model's, but they are deterministic, need
no weights and no network, and never raise on any text. :func:`summarize` is extractive (it returns
sentences of the text, chosen by word and character-bigram frequency), for Chinese, English and mixed
text. :func:`extract_bill` reads labelled fields ("Total:", "合计：", "Invoice No:", "发票号码：") from
OCR-ish invoice text into a dict that validates against :data:`~hearth.capabilities.bill.BILL_SCHEMA`.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterator
from typing import Any, Final

from hearth.capabilities.bill import ISO_4217_CODES

# --------------------------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------------------------

_CJK: Final = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_CHAR: Final = re.compile(f"[{_CJK}]")
_STRONG_END: Final = "。！？；｡"
_TERMINALS: Final = _STRONG_END + ".!?．…"
_CLOSERS: Final = "\"'”’)]}）」』》】〉"
_CJK_TRAILERS: Final = _STRONG_END + "．，、：”’）」』》】〉"
_TOKEN: Final = re.compile(f"[{_CJK}]+|[A-Za-z][A-Za-z'’-]*")
_INITIALISM: Final = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")
_NEXT_WORD: Final = re.compile(r"\s*(\S*)")


def summarize(text: str, *, max_sentences: int = 3, max_chars: int | None = None) -> str:
    """The ``max_sentences`` most representative sentences of ``text``, in their original order.

    A sentence scores the summed document frequency of its content terms (English words without stop
    words, lightly stemmed; Chinese character bigrams without function characters), divided by the square
    root of their number so that long sentences do not win by length alone, with a bonus for the first
    sentences (leads usually say what the text is about). Ties go to the earlier sentence, so the result
    is deterministic. Text of at most ``max_sentences`` sentences (and within ``max_chars``) comes back
    stripped, as written. With ``max_chars`` the summary is cut after the last whole sentence that fits;
    when not even the first fits, it is cut inside it and ends with "…". Never longer than ``max_chars``.
    """
    if max_sentences < 1:
        raise ValueError("max_sentences must be at least 1")
    if max_chars is not None and max_chars < 1:
        raise ValueError("max_chars must be at least 1")
    stripped = text.strip()
    if not stripped:
        return ""
    sentences = split_sentences(stripped)
    if len(sentences) <= max_sentences and (max_chars is None or len(stripped) <= max_chars):
        return stripped
    if len(sentences) > max_sentences:
        chosen = sorted(_rank(sentences)[:max_sentences])
        sentences = [sentences[i] for i in chosen]
    summary = _join(sentences)
    if max_chars is None or len(summary) <= max_chars:
        return summary
    for keep in range(len(sentences) - 1, 0, -1):
        summary = _join(sentences[:keep])
        if len(summary) <= max_chars:
            return summary
    return _cut(sentences[0], max_chars)


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``: after 。！？； (and full-width variants) always; after . ! ? when a space, the
    end or Chinese follows, except after abbreviations (Mr., e.g., U.S. before a lower-case or capitalised
    non-sentence word), initials and inside numbers (3.5); and at line breaks unless the line was wrapped.
    """
    out: list[str] = []
    for chunk in _chunks(text):
        out.extend(_split_chunk(chunk))
    return out


def _chunks(text: str) -> Iterator[str]:
    """Lines joined back where a line break only wraps a sentence; blank lines always separate."""
    for paragraph in re.split(r"\n\s*\n", text):
        parts: list[str] = []
        for raw in paragraph.splitlines():
            line = " ".join(raw.split())
            if not line:
                continue
            if parts and _wrapped(parts[-1], line):
                parts.append("" if _is_cjk(parts[-1][-1]) and _is_cjk(line[0]) else " ")
            elif parts:
                yield "".join(parts)
                parts = []
            parts.append(line)
        if parts:
            yield "".join(parts)


def _wrapped(previous: str, line: str) -> bool:
    last = previous[-1]
    if last in _TERMINALS or last in _CLOSERS:
        return False
    if last in ",，、:：;(（-":
        return True
    if line[0].islower():
        return True
    return len(previous) >= (20 if _is_cjk(last) else 40)


def _split_chunk(chunk: str) -> list[str]:
    out: list[str] = []
    start = 0
    i = 0
    n = len(chunk)
    while i < n:
        if chunk[i] not in _TERMINALS:
            i += 1
            continue
        j = i
        while j < n and chunk[j] in _TERMINALS:
            j += 1
        run = chunk[i:j]
        while j < n and chunk[j] in _CLOSERS:
            j += 1
        if _ends_sentence(chunk, run=run, at=i, after=j, start=start):
            piece = chunk[start:j].strip()
            if piece:
                out.append(piece)
            start = j
        i = j
    tail = chunk[start:].strip()
    if tail:
        out.append(tail)
    return out


def _ends_sentence(chunk: str, *, run: str, at: int, after: int, start: int) -> bool:
    if any(c in _STRONG_END for c in run):
        return True
    if "．" in run:
        return not (0 < at and chunk[at - 1].isdigit() and after < len(chunk) and chunk[after].isdigit())
    if after == len(chunk) or _is_cjk(chunk[after]):
        return True
    if not chunk[after].isspace():
        return False
    if "!" in run or "?" in run:
        return True
    begin = at
    while begin > start and not chunk[begin - 1].isspace():
        begin -= 1
    word = chunk[begin:at].lstrip("\"'“‘([")
    following = _NEXT_WORD.match(chunk, after)
    nxt = following.group(1).lstrip("\"'“‘([") if following else ""
    if not nxt or nxt[0].islower():
        return not nxt
    lowered = word.lower()
    if lowered in _NEVER_FINAL or (len(word) == 1 and word.isalpha()):
        return False
    if lowered in _BEFORE_NUMBERS:
        return not nxt[0].isdigit()
    if lowered in _OFTEN_FINAL or _INITIALISM.fullmatch(word):
        return nxt.lower().strip(",;:") in _EN_STOP
    return True


def _rank(sentences: list[str]) -> list[int]:
    """Indices of ``sentences``, best first."""
    terms = [_terms(s) for s in sentences]
    frequency = Counter(t for ts in terms for t in ts)
    top = max(frequency.values(), default=1)
    scores = []
    for index, ts in enumerate(terms):
        distinct = set(ts)
        if distinct:
            score = sum(frequency[t] for t in distinct) / top / math.sqrt(len(distinct))
            score *= min(1.0, len(distinct) / 4)
        else:
            score = 0.0
        scores.append(score * (1 + 0.4 / (1 + index)))
    return sorted(range(len(sentences)), key=lambda i: (-scores[i], i))


def _terms(sentence: str) -> list[str]:
    out: list[str] = []
    for match in _TOKEN.finditer(sentence):
        token = match.group()
        if _is_cjk(token[0]):
            out.extend(a + b for a, b in itertools.pairwise(token)
                       if a not in _ZH_STOP_CHARS and b not in _ZH_STOP_CHARS and a + b not in _ZH_STOP_WORDS)
            continue
        word = token.lower().replace("’", "'").strip("'-")
        word = word.removesuffix("'s")
        if len(word) < 2 or word in _EN_STOP:
            continue
        if word.endswith("ies") and len(word) > 4:
            word = word[:-3] + "y"
        elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
            word = word[:-1]
        out.append(word)
    return out


def _join(sentences: list[str]) -> str:
    """No space after a Chinese sentence, one after any other."""
    out = ""
    for sentence in sentences:
        if out:
            out += "" if out[-1] in _CJK_TRAILERS or _is_cjk(out[-1]) else " "
        out += sentence
    return out


def _cut(sentence: str, max_chars: int) -> str:
    head = sentence[: max_chars - 1]
    space = head.rfind(" ")
    if space > len(head) // 2 and not _is_cjk(head[space - 1]):
        head = head[:space]
    return head.rstrip(" ,;:，、；：") + "…"


def _is_cjk(char: str) -> bool:
    return _CJK_CHAR.match(char) is not None


# --------------------------------------------------------------------------------------------------------
# Bills
# --------------------------------------------------------------------------------------------------------

_NUM: Final = r"[0-9]{1,3}(?:[,.'][0-9]{3})+(?:[.,][0-9]{1,3})?|[0-9]+(?:[.,][0-9]{1,3})?"
_AMOUNT: Final = re.compile(rf"(?<![A-Za-z0-9.,\-/])(?:{_NUM})(?![0-9%/\-:]|[.,][0-9])")
_CURRENCY_SIGN: Final = r"(?:[A-Z]{1,3}\$|[$€£¥₹₩₽]|RMB|CNY|USD|EUR|GBP|JPY|HKD)?"
_ITEM: Final = re.compile(
    rf"^(?P<desc>\S.*?)\s+(?P<qty>[0-9]+(?:[.,][0-9]+)?)\s*(?:[xX×*@]\s*|\s)\s*{_CURRENCY_SIGN}\s*(?P<unit>{_NUM})"
    rf"\s+{_CURRENCY_SIGN}\s*(?P<amount>{_NUM})(?:\s+[0-9]{{1,2}}%\s+\S+)?$")

_LABELS: Final[tuple[tuple[str, int, str], ...]] = (
    ("subtotal", 0, r"sub[\s-]?total|net\s+(?:amount|total)|total\s*\(?\s*(?:excl|excluding|before|net of|w/o)\.?"
                    r"(?:\s*(?:tax|vat|gst))?\)?|amount\s+(?:before|excl\.?|excluding)\s+(?:tax|vat|gst)|"
                    r"小计|不含税(?:金额|合计)?|金额合计"),
    ("tax", 0, r"(?:total|sales)\s+(?:tax|vat|gst)|(?:tax|vat|gst)\s+(?:amount|total)|税额|税金|"
               r"增值税(?!专用|普通|电子|发票)|"
               r"\b(?:tax|vat|gst|hst)\b(?!\s*(?:id|no\b|number|reg|code|#|payer|invoice|rate|identification))"),
    ("total", 3, r"价税合计|grand\s+total|total\s+(?:amount\s+)?(?:due|payable)|invoice\s+total|total\s+incl\w*\.?"
                 r"(?:\s*(?:tax|vat|gst))?|总计|应付总额"),
    ("total", 2, r"\btotal(?:\s+amount)?\b|合计|总金额|应付金额|实付金额|应收金额"),
    ("total", 1, r"(?:amount|balance)\s+(?:due|payable)|应付"),
)
_LABEL: Final = re.compile("|".join(f"(?P<g{i}>{p})" for i, (_, _, p) in enumerate(_LABELS)), re.I | re.A)

_NUMBER_VALUE: Final = r"\s*[.:#：]*\s*(?P<v>[A-Za-z0-9][A-Za-z0-9\-/_.]*)"
_BILL_NUMBERS: Final = (
    re.compile(r"(?:(?:invoice|bill|receipt)\s*(?:no\b\.?|nr\b\.?|number|num\b\.?|#)|invoice\s*(?=[:#])|发票号码|发票号|"
               r"票据号码|票据号|收据号码?|收据编号|单据编号)" + _NUMBER_VALUE, re.I | re.A),
    re.compile(r"(?:order\s*(?:no\b\.?|number|#)|reference|ref\b\.?|订单号|单号)" + _NUMBER_VALUE, re.I | re.A),
    re.compile(r"\bNo\.?\s*[:：]?\s*(?P<v>[0-9]{6,})", re.A),
)
_DUE_LABEL: Final = re.compile(
    r"due\s*date|date\s+due|payment\s+due|\bdue\s*(?:on|by)?\s*[:：]|pay(?:ment)?\s+by|到期日(?:期)?|付款期限|"
    r"付款截止日?期?|截止日期|最后付款日", re.I | re.A)
_ISSUE_LABEL: Final = re.compile(
    r"(?P<strong>(?:invoice|issue|bill|billing|receipt)\s+date|date\s+of\s+issue|开票日期|开具日期|填开日期)|"
    r"(?P<weak>\bdated?\b|\bissued(?:\s+on)?\b|日期)", re.I | re.A)
_AFTER_DUE: Final = re.compile(r"(?:\bdue|pay\s+by|到期|截止|付款|最后)\s*$", re.I | re.A)
_BEFORE_DUE: Final = re.compile(r"\s*due\b", re.I | re.A)
_DATE_WINDOW: Final = 60  # a labelled date follows its label closely; looking further only costs time
_VENDOR: Final = re.compile(
    r"(?:\b(?:vendor|seller|supplier|from|sold\s+by|billed\s+by|issued\s+by|merchant|company)\s*[:：]|"
    r"(?:销售方\s*名称|销方名称|销售方|收款单位|开票方|商户名称|商家)\s*[:：])", re.I | re.A)
_BUYER: Final = re.compile(
    r"(?:\b(?:bill(?:ed)?\s+to|buyer|customer|client|sold\s+to|ship\s+to)\s*[:：]|"
    r"(?:购买方\s*名称|购方名称|购买方|客户名称|付款单位|买方)\s*[:：])", re.I | re.A)
# Where a name written after its label ends: a wider gap (a next column), or the next label.
_FIELD_END: Final = re.compile(
    r"\s{2,}|\t|纳税人识别号|统一社会信用代码|识别号|地址|电话|开户行|账号|\b(?:tax\s*id|vat\s*(?:no|reg)|tel|phone|e-?mail|"
    r"address|invoice|date|due|ABN|GST\s*no)\b", re.I | re.A)
_NOTES: Final = re.compile(r"(?:\b(?:notes?|memo|remarks?)\s*[:：]|备注\s*[:：])", re.I | re.A)
_CURRENCY_LABEL: Final = re.compile(r"(?:\bcurrency\s*[:：]?|币种\s*[:：]?)\s*(?P<v>[A-Za-z]{3}|人民币)", re.I | re.A)
_CODE_BEFORE_DIGIT: Final = re.compile(rf"\b({'|'.join(sorted(ISO_4217_CODES))}|RMB)(?=[0-9])", re.A)
_CODE_NEAR_AMOUNT: Final = re.compile(
    rf"\b(?P<a>[A-Z]{{3}})\s?(?:{_NUM})|(?<![0-9.,'])(?:{_NUM})\s?(?P<b>[A-Z]{{3}})\b", re.A)
_TITLE: Final = re.compile(r"invoice|receipt|\bbill\b|statement|quotation|发票|收据|账单|小票", re.I | re.A)
_MONTHS: Final = {m: i for i, names in enumerate((
    ("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
    ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"),
    ("nov", "november"), ("dec", "december")), start=1) for m in names}
_MONTH: Final = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DATES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("ymd", re.compile(r"(?<![0-9])(?P<y>[0-9]{4})\s*[-/.年]\s*(?P<m>[0-9]{1,2})\s*[-/.月]\s*(?P<d>[0-9]{1,2})"
                       r"(?![0-9])")),
    ("xxy", re.compile(r"(?<![0-9])(?P<a>[0-9]{1,2})[-/.](?P<b>[0-9]{1,2})[-/.](?P<y>[0-9]{4})(?![0-9])")),
    ("dmy", re.compile(rf"(?<![0-9])(?P<d>[0-9]{{1,2}})(?:st|nd|rd|th)?[\s-]+(?P<m>{_MONTH})\b\.?,?[\s-]+"
                       rf"(?P<y>[0-9]{{4}})", re.I | re.A)),
    ("mdy", re.compile(rf"\b(?P<m>{_MONTH})\b\.?\s+(?P<d>[0-9]{{1,2}})(?:st|nd|rd|th)?,?\s+(?P<y>[0-9]{{4}})",
                       re.I | re.A)),
)
_SYMBOLS: Final = (("US$", "USD"), ("HK$", "HKD"), ("NT$", "TWD"), ("NZ$", "NZD"), ("AU$", "AUD"), ("A$", "AUD"),
                   ("CA$", "CAD"), ("C$", "CAD"), ("S$", "SGD"), ("R$", "BRL"), ("MX$", "MXN"), ("美元", "USD"),
                   ("港元", "HKD"), ("港币", "HKD"), ("欧元", "EUR"), ("日元", "JPY"), ("円", "JPY"), ("英镑", "GBP"),
                   ("€", "EUR"), ("£", "GBP"), ("₹", "INR"), ("₩", "KRW"), ("₽", "RUB"), ("RMB", "CNY"),
                   ("人民币", "CNY"), ("¥", "CNY"), ("元", "CNY"), ("$", "USD"))


def extract_bill(text: str) -> dict[str, Any]:
    """Rule-based bill extraction from OCR text: every key of ``BILL_SCHEMA``, null where nothing was found.

    Reads labelled fields line by line (English and Chinese labels; a label whose value is on the next
    line is followed there for names and dates); amounts accept thousands separators and, when the text
    writes decimals with a comma (1.234,50), European notation; dates are normalised to YYYY-MM-DD
    (04/05/2026 is read month first when the bill is in dollars, day first otherwise); the currency comes
    from a "Currency:" label, an ISO code next to an amount, or a symbol ($ is USD unless HK$, C$ and the
    like say otherwise; ¥, 元 and RMB are CNY). A line becomes a line item only when it reads
    "description quantity unit-price amount" and quantity × unit price ≈ amount. Without a vendor label,
    the vendor is the letterhead (a name-like first line), but only when the text has some other sign of
    being a bill. Never raises; the result always validates against the schema (it need not pass
    :func:`~hearth.capabilities.bill.check_bill`: OCR misreads are kept as read).
    """
    text = unicodedata.normalize("NFKC", text)
    raw_lines = [stripped for line in text.splitlines() if (stripped := line.replace("\t", "  ").strip())]
    lines = [" ".join(line.split()) for line in raw_lines]
    decimal_comma = _decimal_comma(text)

    found: dict[str, tuple[int, float]] = {}
    pre_tax_pair: list[float] = []
    total_line = ""
    for line in lines:
        for kind, level, amounts in _labelled_amounts(line, decimal_comma):
            if kind == "total" and level == 2 and len(amounts) == 2:
                pre_tax_pair = pre_tax_pair or amounts
            rank = level if kind == "total" else 0
            if amounts and (kind not in found or found[kind][0] < rank):
                found[kind] = (rank, amounts[-1])
                if kind == "total":
                    total_line = line
    subtotal = found["subtotal"][1] if "subtotal" in found else None
    tax = found["tax"][1] if "tax" in found else None
    if pre_tax_pair and found.get("total", (0, 0.0))[0] == 3:
        subtotal = subtotal if subtotal is not None else pre_tax_pair[0]
        tax = tax if tax is not None else pre_tax_pair[1]

    currency = _currency(text, total_line)
    month_first = currency == "USD"
    due_date = _labelled_date(lines, _DUE_LABEL, month_first=month_first)
    issue_date = _issue_date(lines, month_first=month_first)
    if issue_date is None:
        issue_date = next((d for line in lines if (d := _find_date(line, month_first=month_first)) is not None
                           and d != due_date), None)

    bill_number = _bill_number(text)
    line_items = [item for line in lines if (item := _line_item(line, decimal_comma)) is not None]
    looks_like_a_bill = bool(found or bill_number or line_items)
    return {
        "vendor": _labelled_text(raw_lines, _VENDOR) or (_letterhead(lines) if looks_like_a_bill else None),
        "bill_number": bill_number,
        "issue_date": issue_date,
        "due_date": due_date,
        "currency": currency,
        "subtotal": subtotal,
        "tax": tax,
        "total": found["total"][1] if "total" in found else None,
        "line_items": line_items,
        "buyer": _labelled_text(raw_lines, _BUYER),
        "notes": _labelled_text(raw_lines, _NOTES, next_line=False, end=None),
    }


def _labelled_amounts(line: str, decimal_comma: bool) -> list[tuple[str, int, list[float]]]:
    """For each amount label in ``line``: its kind, its level and the amounts between it and the next label."""
    matches = list(_LABEL.finditer(line))
    out = []
    for index, match in enumerate(matches):
        group = match.lastgroup or "g0"
        kind, level, _ = _LABELS[int(group[1:])]
        end = matches[index + 1].start() if index + 1 < len(matches) else len(line)
        segment = _CODE_BEFORE_DIGIT.sub(r"\1 ", line[match.end():end])
        amounts = [a for m in _AMOUNT.finditer(segment) if (a := _parse_amount(m.group(), decimal_comma)) is not None]
        out.append((kind, level, amounts))
    return out


def _parse_amount(token: str, decimal_comma: bool) -> float | None:
    """``1,234.50``, ``1.234,50``, ``1'234.50``, ``12,50`` → a finite float; None when it is not one."""
    s = token.replace("'", "")
    if "," in s and "." in s:
        decimal = "," if s.rfind(",") > s.rfind(".") else "."
    elif "," in s:
        decimal = "," if decimal_comma or not re.fullmatch(r"[0-9]{1,3}(?:,[0-9]{3})+", s) else "."
    elif "." in s:
        thousands = re.fullmatch(r"[0-9]{1,3}(?:\.[0-9]{3}){2,}", s) or (
            decimal_comma and re.fullmatch(r"[0-9]{1,3}(?:\.[0-9]{3})+", s))
        decimal = "," if thousands else "."
    else:
        decimal = "."
    s = s.replace("," if decimal == "." else ".", "").replace(decimal, ".")
    if not re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", s):
        return None
    value = float(s)
    return value if math.isfinite(value) else None


def _decimal_comma(text: str) -> bool:
    """Whether the text writes decimals with a comma: more 1.234,50 / 12,50 than 1,234.50 / 12.50."""
    comma = len(re.findall(r"(?<![0-9.,])[0-9]{1,3}(?:\.[0-9]{3})*,[0-9]{2}(?![0-9.,])", text))
    point = len(re.findall(r"(?<![0-9.,])[0-9]{1,3}(?:,[0-9]{3})*\.[0-9]{2}(?![0-9.,])", text))
    return comma > point


def _currency(text: str, total_line: str) -> str | None:
    label = _CURRENCY_LABEL.search(text)
    if label:
        code = label.group("v").upper()
        if code == "人民币" or code == "RMB":
            return "CNY"
        if code in ISO_4217_CODES:
            return code
    for word in re.finditer(r"\b[A-Z]{3}\b", total_line, re.A):
        if word.group() in ISO_4217_CODES:
            return word.group()
    for scope in (total_line, text):
        for match in _CODE_NEAR_AMOUNT.finditer(scope):
            code = match.group("a") or match.group("b")
            if code == "RMB":
                return "CNY"
            if code in ISO_4217_CODES:
                return code
    for scope in (total_line, text):
        hits = [(pos, code) for sign, code in _SYMBOLS if (pos := scope.find(sign)) >= 0]
        if hits:
            first = min(pos for pos, _ in hits)
            return next(code for pos, code in hits if pos == first)
    return None


def _bill_number(text: str) -> str | None:
    for pattern in _BILL_NUMBERS:
        for match in pattern.finditer(text):
            value = match.group("v").rstrip(".-/_")
            if any(c.isdigit() for c in value):
                return value
    return None


def _labelled_date(lines: list[str], label: re.Pattern[str], *, month_first: bool) -> str | None:
    for index, line in enumerate(lines):
        for match in label.finditer(line):
            rest = line[match.end():match.end() + _DATE_WINDOW]
            found = _find_date(rest, month_first=month_first)
            if found is None and not rest.strip(" :：") and index + 1 < len(lines):
                found = _find_date(lines[index + 1], month_first=month_first)
            if found is not None:
                return found
    return None


def _issue_date(lines: list[str], *, month_first: bool) -> str | None:
    weak: str | None = None
    for index, line in enumerate(lines):
        for match in _ISSUE_LABEL.finditer(line):
            before = line[max(0, match.start() - 12):match.start()]
            if _AFTER_DUE.search(before) or _BEFORE_DUE.match(line, match.end()):
                continue
            rest = line[match.end():match.end() + _DATE_WINDOW]
            found = _find_date(rest, month_first=month_first)
            if found is None and not rest.strip(" :：") and index + 1 < len(lines):
                found = _find_date(lines[index + 1], month_first=month_first)
            if found is not None and match.group("strong"):
                return found
            weak = weak or found
    return weak


def _find_date(text: str, *, month_first: bool) -> str | None:
    """The earliest real calendar date written in ``text``, as YYYY-MM-DD."""
    best: tuple[int, str] | None = None
    for style, pattern in _DATES:
        for match in pattern.finditer(text):
            if best is not None and match.start() >= best[0]:
                break
            parts = match.groupdict()
            year = int(parts["y"])
            if style == "xxy":
                a, b = int(parts["a"]), int(parts["b"])
                month_first_here = b > 12 or (month_first and a <= 12)
                month, day = (a, b) if month_first_here else (b, a)
            elif style == "ymd":
                month, day = int(parts["m"]), int(parts["d"])
            else:
                month, day = _MONTHS.get(parts["m"].lower(), 0), int(parts["d"])
            if 1900 <= year <= 2199:
                try:
                    best = (match.start(), dt.date(year, month, day).isoformat())
                except ValueError:
                    continue
                break
    return best[1] if best else None


def _labelled_text(lines: list[str], label: re.Pattern[str], *, next_line: bool = True,
                   end: re.Pattern[str] | None = _FIELD_END) -> str | None:
    """The text after the label, up to ``end``; the next line's when the label ends its line."""
    for index, line in enumerate(lines):
        match = label.search(line)
        if match is None:
            continue
        value = _field_value(line[match.end():], end)
        if not value and next_line and index + 1 < len(lines) and not re.search(r"[:：]", lines[index + 1]):
            value = _field_value(lines[index + 1], end)
        if value:
            return value
    return None


def _field_value(rest: str, end: re.Pattern[str] | None) -> str:
    rest = rest.lstrip(" :：")
    cut = end.search(rest) if end is not None else None
    return " ".join((rest[: cut.start()] if cut else rest).split()).strip(" :：,;|")


def _letterhead(lines: list[str]) -> str | None:
    """The first of the first lines that looks like a name: no label, no title word, mostly letters."""
    for line in lines[:3]:
        if re.search(r"[:：]", line) or _TITLE.search(line) or _LABEL.search(line):
            continue
        letters = sum(c.isalpha() for c in line)
        if letters >= 2 and letters >= 0.6 * len(line.replace(" ", "")):
            return line
    return None


def _line_item(line: str, decimal_comma: bool) -> dict[str, Any] | None:
    if len(line) > 300 or _LABEL.search(line):
        return None
    match = _ITEM.match(line)
    if match is None:
        return None
    description = re.sub(r"^[0-9]{1,3}[.)]?\s+(?=\D)", "", match.group("desc")).strip()
    quantity = _parse_amount(match.group("qty"), decimal_comma)
    unit_price = _parse_amount(match.group("unit"), decimal_comma)
    amount = _parse_amount(match.group("amount"), decimal_comma)
    if not any(c.isalpha() for c in description) or quantity is None or unit_price is None or amount is None:
        return None
    if amount <= 0 or abs(quantity * unit_price - amount) > max(0.011, amount * 0.005):
        return None
    return {"description": description, "quantity": quantity, "unit_price": unit_price, "amount": amount}


# --------------------------------------------------------------------------------------------------------
# Data: abbreviations and stop words
# --------------------------------------------------------------------------------------------------------

# A period after these never ends a sentence ("Mr. Smith", "e.g. apples", "Fig. 3").
_NEVER_FINAL: Final = frozenset("""
mr mrs ms dr prof sr jr st mt rev hon gen col lt sgt capt cmdr gov sen rep pres e.g i.e cf vs viz al fig figs
eq approx dept est jan feb mar apr jun jul aug sep sept oct nov dec mon tue wed thu fri sat sun
""".split())
# A period after these ends a sentence unless a number follows ("No. 5", "pp. 12").
_BEFORE_NUMBERS: Final = frozenset("no nos art vol vols pp ch sec p".split())
# A period after these (and after initialisms such as U.S.) ends a sentence when a sentence-starting
# function word follows ("... in the U.S. The ..." but "the U.S. Navy").
_OFTEN_FINAL: Final = frozenset("etc inc ltd co corp llc plc bros".split())

_EN_STOP: Final = frozenset("""
a about above after again against all almost also although always am among an and another any anyone
anything are aren't around as at be became because become been before being below between both but by can
cannot can't could couldn't did didn't do does doesn't doing don't done down during each either else enough
even ever every few for from further get gets getting got had hadn't has hasn't have haven't having he he'd
he'll her here hers herself he's him himself his how however i i'd if i'll i'm in into is isn't it its it's
itself i've just least less let like made make makes many may me might mine more most much must mustn't my
myself neither never no nor not now of off often on once one only onto or other others otherwise our ours
ourselves out over own per perhaps quite rather really said same say says see seem seems several shall
shan't she she'd she'll she's should shouldn't since so some something still such than that that's the
their theirs them themselves then there therefore there's these they they'd they'll they're they've this
those though through thus to too toward towards under until up upon us use used using very via was wasn't
we we'd we'll were we're weren't we've what what's when where whether which while who whom whose why will
with within without won't would wouldn't yes yet you you'd you'll your you're yours yourself yourselves
you've
""".split())

# Function characters: a bigram containing one carries no topic ("的发", "展了").
_ZH_STOP_CHARS: Final = frozenset("的了着过是在和与及或而且也就都又再还很更最被把将让给向从对为于以之其这那此"
                                  "我你您他她它们个些吗呢吧啊呀哦嘛么啦得地所并等每各该")
# Function words made of characters that are not function characters on their own.
_ZH_STOP_WORDS: Final = frozenset("""
因为 所以 但是 如果 虽然 然而 而且 以及 一个 一些 没有 可以 已经 什么 怎么 如何 为何 不是 不会 不能 一样 一直 一种
只是 只有 还是 就是 或者 因此 于是 然后 同时 比如 例如 其中 之后 之前 以后 以前 目前 现在 非常 可能 应该 需要 通过
进行 认为 表示 今天 明天 昨天 这样 那样 如此 自己 大家 有些 有的 各种 其他 另外 此外 由于 关于 对于 根据 按照
""".split())
