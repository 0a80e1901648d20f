"""Is the quote a model gave as evidence really on the page it cites?

Both sides are first brought to one form by :func:`normalise`, then :func:`check_quote` looks for the
quote in the page:

* ``exact`` — the normalised quote occurs in the normalised page (ignoring letter case), and does not
  begin or end inside a longer number there (``1234`` is not in ``12345``); score 1.0.
* ``fuzzy`` — it does not, but some stretch of the page is similar: the best window's
  ``difflib`` ratio (2·matches / total length) is at least :data:`FUZZY_THRESHOLD` (0.85) **and** every
  number in the quote occurs among the numbers of that stretch (``60,922`` = ``60922``; a quote that
  differs from the page only in a digit is therefore ``not_found``, with ``reason="numbers_differ"``).
  Quotes shorter than :data:`MIN_FUZZY_CHARS` normalised characters are matched exactly or not at all.
* ``not_found`` — otherwise; ``score`` is the best similarity seen (0 when nothing was close).

The span is ``[start, end)`` in the *normalised* page text (what :func:`normalise` returns for it).
Finding candidate windows is fast: the quote's character n-grams are looked up in the page
(``str.find``) and vote for where the quote would start; only the few best-voted windows are compared
with ``difflib`` — so a quote costs well under a millisecond per page, typically.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left, bisect_right
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from difflib import SequenceMatcher
from functools import lru_cache
from itertools import accumulate
from typing import Any, Literal

FUZZY_THRESHOLD = 0.85
MIN_FUZZY_CHARS = 8
CONTEXT_CHARS = 200

MatchKind = Literal["exact", "fuzzy", "not_found"]
PageStatus = Literal["ok", "missing", "non_positive", "out_of_range"]

# CJK characters and punctuation, and the full-width punctuation of Chinese sentences ！（），：；？ (which
# NFKC turns into ASCII; full-width $ % & etc. also appear in Latin text, so they are not in the list)
_CJK = ("\u2e80-\u2fdf\u3001-\u303f\u3040-\u30ff\u3100-\u312f\u31c0-\u31ef\u3400-\u4dbf\u4e00-\u9fff"
        "\uf900-\ufaff\ufe30-\ufe4f\uff01\uff08\uff09\uff0c\uff1a\uff1b\uff1f"
        "\U00020000-\U0003134f")
_SPACE_NEXT_TO_CJK = re.compile(f" (?=[{_CJK}])|(?<=[{_CJK}]) ")
_WHITESPACE = re.compile(r"\s+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# invisible: soft hyphen, zero-width space/joiners, word joiner, BOM; PDFium's markers and NUL
_INVISIBLE = str.maketrans(dict.fromkeys("\u00ad\u200b\u200c\u200d\u2060\ufeff\x02\ufffe\x00", None))
_QUOTES_AND_DASHES = str.maketrans({
    **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u2035`\u00b4", "'"),
    **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u2036\u00ab\u00bb\u300c\u300d\u300e\u300f\u301d\u301e", '"'),
    **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\u2e3a\u2e3b\ufe58\ufe63", "-"),
})


def normalise(text: str) -> str:
    """One comparable form of ``text``: invisible characters removed; every run of whitespace (line
    breaks included) → one space, and a space next to a CJK character or full-width Chinese punctuation removed —
    Chinese and Japanese put no spaces between words, so a line break inside a sentence must not leave
    one, and ``收入 1,234 亿元`` / ``收入1,234亿元`` (both written) compare equal; then Unicode NFKC
    (full-width letters, digits and punctuation become ASCII, ligatures split), curly and corner quotes
    → ``'`` / ``"``, every dash and minus sign → ``-``; trimmed."""
    # the same page is normalised once per value citing it: cached, but only texts of a page's usual size
    return _normalise_cached(text) if len(text) <= _CACHED_CHARS else _normalise(text)


_CACHED_CHARS = 20_000


@lru_cache(maxsize=512)
def _normalise_cached(text: str) -> str:
    return _normalise(text)


def _normalise(text: str) -> str:
    text = _WHITESPACE.sub(" ", text.translate(_INVISIBLE))
    text = unicodedata.normalize("NFKC", _SPACE_NEXT_TO_CJK.sub("", text)).translate(_QUOTES_AND_DASHES)
    return _SPACE_NEXT_TO_CJK.sub("", _WHITESPACE.sub(" ", text)).strip()


@dataclass(frozen=True, slots=True)
class QuoteMatch:
    """Where (and how well) a quote was found. ``span`` indexes the normalised page text; ``matched`` is
    that stretch. ``reason`` says why a ``not_found`` is one: ``empty_quote``, ``empty_page``,
    ``too_short``, ``below_threshold`` or ``numbers_differ``."""

    kind: MatchKind
    score: float
    span: tuple[int, int] | None = None
    matched: str = ""
    reason: str | None = None

    @property
    def found(self) -> bool:
        return self.kind != "not_found"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "score": round(self.score, 4), "span": list(self.span) if self.span else None,
                "matched": self.matched, "reason": self.reason}


def check_quote(quote: str, page_text: str) -> QuoteMatch:
    """How ``quote`` occurs in ``page_text`` (see the module docstring for the rules)."""
    q, p = normalise(quote), normalise(page_text)
    if not q:
        return QuoteMatch("not_found", 0.0, reason="empty_quote")
    if not p:
        return QuoteMatch("not_found", 0.0, reason="empty_page")
    qf, pf = _fold(q), _fold(p)
    at = pf.find(qf)
    while at >= 0:
        if not _cuts_a_number(q, p, at, at + len(q)):
            return QuoteMatch("exact", 1.0, (at, at + len(q)), p[at: at + len(q)])
        at = pf.find(qf, at + 1)
    if len(q) < MIN_FUZZY_CHARS:
        return QuoteMatch("not_found", 0.0, reason="too_short")
    best = _best_window(qf, pf)
    if best is None:
        return QuoteMatch("not_found", 0.0, reason="below_threshold")
    score, (start, end) = best
    span, matched = (start, end), p[start:end]
    if score < FUZZY_THRESHOLD:
        return QuoteMatch("not_found", score, span, matched, reason="below_threshold")
    if not _numbers_agree(q, p, start, end):
        return QuoteMatch("not_found", score, span, matched, reason="numbers_differ")
    return QuoteMatch("fuzzy", score, span, matched)


def _fold(text: str) -> str:
    """Lower case, unless that changes the length (then spans would not line up): case-sensitive."""
    low = text.lower()
    return low if len(low) == len(text) else text


def _best_window(q: str, p: str) -> tuple[float, tuple[int, int]] | None:
    n = 3 if len(q) < 40 else 4
    step = max(1, (len(q) - n) // 32)
    anchors = [(o, q[o: o + n]) for o in range(0, len(q) - n + 1, step)]
    starts: list[int] = []
    for offset, gram in anchors:
        at, hits = p.find(gram), 0
        while at >= 0 and hits < 200:
            starts.append(at - offset)
            hits += 1
            at = p.find(gram, at + 1)
    if not starts:
        return None
    # votes for a start, counting the neighbours an insertion or deletion in the quote shifts them to
    tolerance = max(3, len(q) // 10)
    votes = Counter(starts)
    ordered = sorted(votes)
    cumulative = list(accumulate((votes[s] for s in ordered), initial=0))
    near = {s: cumulative[bisect_right(ordered, s + tolerance)] - cumulative[bisect_left(ordered, s - tolerance)]
            for s in ordered}
    ranked = sorted(ordered, key=lambda s: (-near[s], s))
    needed = max(2, len(anchors) // 5)
    best: tuple[float, tuple[int, int]] | None = None
    chosen: list[int] = []
    for start in ranked:
        if len(chosen) == 5 or near[start] < needed:
            break
        if any(abs(start - c) <= len(q) // 2 for c in chosen):
            continue
        chosen.append(start)
        candidate = _score_around(q, p, start)
        if best is None or candidate[0] > best[0]:
            best = candidate
    return best


def _score_around(q: str, p: str, start: int) -> tuple[float, tuple[int, int]]:
    """The best of: the quote-long window at ``start``, and the stretch ``difflib`` aligns the quote to
    in a window with some slack on both sides."""
    slack = len(q) // 4 + 1
    lo = max(0, start - slack)
    window = p[lo: max(lo, start) + len(q) + slack]
    blocks = [b for b in SequenceMatcher(None, q, window, autojunk=False).get_matching_blocks() if b.size >= 2]
    spans = [(max(0, start), min(len(p), max(0, start) + len(q)))]
    if blocks:
        spans.append((lo + blocks[0].b, lo + blocks[-1].b + blocks[-1].size))
    scored = [(SequenceMatcher(None, q, p[a:b], autojunk=False).ratio(), (a, b)) for a, b in spans if b > a]
    return max(scored, key=lambda s: s[0])


def _numbers(text: str) -> Counter[str]:
    return Counter(n.replace(",", "") for n in _NUMBER.findall(text))


def _numbers_agree(q: str, p: str, start: int, end: int) -> bool:
    """Every number in the quote is among the numbers of the matched stretch (widened to whole numbers
    at its edges)."""
    wanted = _numbers(q)
    if not wanted:
        return True
    while start > 0 and _in_number(p, start - 1):
        start -= 1
    while end < len(p) and _in_number(p, end):
        end += 1
    return not (wanted - _numbers(p[start:end]))


def _cuts_a_number(q: str, p: str, start: int, end: int) -> bool:
    """Whether the quote, placed at ``p[start:end]``, begins or ends inside a longer number of the page
    (``totalled 1234`` in ``totalled 12345``): then it is not the page's figure."""
    return bool((q[0].isdigit() and start > 0 and _in_number(p, start - 1))
                or (q[-1].isdigit() and end < len(p) and _in_number(p, end)))


def _in_number(p: str, i: int) -> bool:
    return p[i].isdigit() or (p[i] in ",." and 0 < i < len(p) - 1 and p[i - 1].isdigit() and p[i + 1].isdigit())


@dataclass(frozen=True, slots=True)
class Evidence:
    """The check of one extracted value against its cited page.

    ``page_status``: ``ok``; ``missing`` (no ``source_page``, or not an integer); ``non_positive`` (0 or
    less); ``out_of_range`` (beyond the document). ``match`` is None unless the page is ``ok``.
    ``found_on_pages`` lists other pages where the quote is (exact or fuzzy) when it is not on the cited
    one — a reviewer's first hint. ``context`` is the normalised page text around the match.
    ``value_in_quote``: for a numeric value, whether the quote prints that number (its absolute value:
    a loss may be printed ``(1,234)``); None for any other value. A right quote with a wrong value is
    caught by this, not by the quote check.
    """

    value: Any
    source_page: int | None
    quote: str
    page_status: PageStatus
    match: QuoteMatch | None
    found_on_pages: tuple[int, ...] = ()
    context: str = ""
    value_in_quote: bool | None = None

    @property
    def found(self) -> bool:
        return self.page_status == "ok" and self.match is not None and self.match.found

    @property
    def kind(self) -> MatchKind:
        return self.match.kind if self.match is not None else "not_found"

    def as_dict(self) -> dict[str, Any]:
        return {"value": self.value, "source_page": self.source_page, "quote": self.quote,
                "page_status": self.page_status, "kind": self.kind,
                "match": self.match.as_dict() if self.match else None,
                "found_on_pages": list(self.found_on_pages), "context": self.context,
                "value_in_quote": self.value_in_quote}


def check_value(value: Any, *, source_page: Any, quote: str | None, pages: Mapping[int, str],
                search_other_pages: bool = True) -> Evidence:
    """Check that ``quote`` is on page ``source_page`` of ``pages`` (``{1-based number: raw text}``).

    ``source_page`` is taken as the model gave it: an int (or an integral float) is a page number;
    anything else — None, a string, a bool — is ``missing``.
    """
    quote = quote if isinstance(quote, str) else ""
    page = _page_number(source_page)
    if page is None:
        status: PageStatus = "missing"
    elif page <= 0:
        status = "non_positive"
    elif page not in pages:
        status = "out_of_range"
    else:
        status = "ok"
    match = check_quote(quote, pages[page]) if status == "ok" and page is not None else None
    elsewhere: tuple[int, ...] = ()
    if search_other_pages and (match is None or not match.found) and normalise(quote):
        elsewhere = tuple(n for n in sorted(pages) if n != page and check_quote(quote, pages[n]).found)
    context = ""
    if match is not None and match.span is not None and page is not None:
        text = normalise(pages[page])
        context = text[max(0, match.span[0] - CONTEXT_CHARS): match.span[1] + CONTEXT_CHARS]
    return Evidence(value=value, source_page=page, quote=quote, page_status=status, match=match,
                    found_on_pages=elsewhere, context=context, value_in_quote=value_in_quote(value, quote))


def value_in_quote(value: Any, quote: str) -> bool | None:
    """Whether the number ``value`` is printed in ``quote`` (after :func:`normalise`: ``５６７`` and
    ``60,922`` are numbers; the sign is ignored); None when ``value`` is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    wanted = abs(float(value))
    return any(abs(n - wanted) <= 1e-9 * max(1.0, wanted) for n in _floats(normalise(quote)))


def _floats(text: str) -> list[float]:
    out = []
    for token in _numbers(text):
        try:
            out.append(float(token))
        except ValueError:  # 2024.12.31
            continue
    return out


def _page_number(raw: Any) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        return raw
    if isinstance(raw, float) and raw.is_integer():
        return int(raw)
    return None
