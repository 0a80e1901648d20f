"""Per-scene guardrails around a model call: PII redaction, prompt-injection heuristics, output moderation.

Everything here is a pure, synchronous function of its arguments (no I/O, no clock other than today's
date for ID-number plausibility), so the capability API can apply it to the input before the call and
to the answer after it, and tests can pin it down exactly.

Limits, on purpose:

* PII detection covers four kinds common in mainland-China business text (mobile numbers, resident ID
  numbers, e-mail addresses, bank cards), written with ASCII digits: contiguous, or grouped the usual way
  (mobiles 3-4-4, cards by fours, one separator kind per number). Full-width digits, other countries'
  formats and numbers spelled out in words are not found. Checksums (ID MOD 11-2, Luhn) keep false
  positives down, but any 13–19 digit number that happens to pass Luhn (an order number, a millisecond
  timestamp) is redacted as a bank card: for privacy a false positive is the cheap side.
* Injection detection is a handful of phrase heuristics, not a classifier. It catches the common
  copy-paste attacks in English and Chinese; a paraphrase, another language or an attack split across
  messages gets through, and a text that *quotes* an attack verbatim is flagged like the attack.
* Moderation is substring matching of configured terms after Unicode folding; it is not a semantic
  filter, and a short English term also matches inside longer words.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, ClassVar, Literal, get_args

from hearth.errors import HearthError

PiiKind = Literal["phone", "id_card", "email", "bank_card"]
InjectionMode = Literal["off", "flag", "block"]
ModerationAction = Literal["block", "regenerate"]

ALL_PII: frozenset[str] = frozenset(get_args(PiiKind))

_PHONE = re.compile(r"(?<![0-9])(?:(?:\+|00)?86[ -]?)?1[3-9][0-9](?:([ -]?)[0-9]{4}\1[0-9]{4})(?![0-9])")
_ID_CARD = re.compile(r"(?<![0-9])[0-9]{17}[0-9Xx](?![0-9])")
_BANK_CARD = re.compile(r"(?<![0-9])(?<![0-9][ -])[0-9]{4}([ -])[0-9]{4}(?:\1[0-9]{4}){1,3}(?:\1[0-9]{1,3})?"
                        r"(?![0-9])(?![ -][0-9])|(?<![0-9])[0-9]{13,19}(?![0-9])")
_EMAIL = re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
                    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,}(?![A-Za-z0-9-])")
_PLACEHOLDER = re.compile(r"\[(?:PHONE|ID_CARD|EMAIL|BANK_CARD)_[0-9]+\]")

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"
_ZERO_WIDTH = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff"))


@dataclass(frozen=True, slots=True)
class Redaction:
    """The redacted text, the placeholder → original map that :func:`restore` needs, and counts per kind
    (occurrences replaced; kinds with none are absent)."""

    text: str
    placeholders: dict[str, str]
    counts: dict[str, int]


def id_card_is_valid(candidate: str, *, today: date | None = None) -> bool:
    """True for an 18-character PRC resident ID number with a valid MOD 11-2 check character and a real
    birth date between 1900-01-01 and ``today``; the check makes a random 18-digit number a 1-in-11 hit
    at most, and the date rules out most of those."""
    if len(candidate) != 18 or not candidate[:17].isascii() or not candidate[:17].isdigit():
        return False
    total = sum(int(d) * w for d, w in zip(candidate[:17], _ID_WEIGHTS, strict=True))
    if _ID_CHECK[total % 11] != candidate[17].upper():
        return False
    try:
        born = date(int(candidate[6:10]), int(candidate[10:12]), int(candidate[12:14]))
    except ValueError:
        return False
    return date(1900, 1, 1) <= born <= (today or date.today())


def luhn_is_valid(digits: str) -> bool:
    """The Luhn (mod 10) check every payment card number carries; ``digits`` must be ASCII digits only."""
    if not digits or not digits.isascii() or not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _bank_card_ok(value: str) -> bool:
    digits = re.sub(r"[ -]", "", value)
    return 13 <= len(digits) <= 19 and luhn_is_valid(digits) and not id_card_is_valid(digits)


# Kind → (pattern, extra validation, priority). Candidates of every kind are found on the original text
# and the longest wins an overlap (an e-mail swallows the phone number in its local part, a card number
# any digits inside it); equal spans go to the lower priority number (a Luhn-valid "86" + mobile is a
# phone). A valid 18-digit ID number is never a card, even when only cards are redacted.
_DETECTORS: dict[str, tuple[re.Pattern[str], Callable[[str], bool], int]] = {
    "id_card": (_ID_CARD, id_card_is_valid, 0),
    "phone": (_PHONE, lambda _: True, 1),
    "bank_card": (_BANK_CARD, _bank_card_ok, 2),
    "email": (_EMAIL, lambda _: True, 3),
}


def redact(text: str, kinds: frozenset[str] = ALL_PII) -> Redaction:
    """Replace each PII value of ``kinds`` with a placeholder such as ``[PHONE_1]``.

    Placeholders are numbered per kind in order of appearance; the same value (exactly the same
    characters) gets the same placeholder. A placeholder string already present in ``text`` is never
    reused, so ``restore(r.text, r.placeholders) == text`` holds for any text.
    """
    unknown = kinds - ALL_PII
    if unknown:
        raise ValueError(f"unknown PII kinds: {sorted(unknown)}")
    found: list[tuple[int, int, int, str]] = []
    for kind in kinds:
        pattern, valid, priority = _DETECTORS[kind]
        found += [(m.start(), m.end(), priority, kind) for m in pattern.finditer(text) if valid(m.group())]
    found.sort(key=lambda c: (c[0] - c[1], c[2], c[0]))
    accepted: list[tuple[int, int, str]] = []  # kept sorted by start: an overlap can only be with a neighbour
    for start, end, _, kind in found:
        i = bisect.bisect_left(accepted, (start,))
        if (i == 0 or accepted[i - 1][1] <= start) and (i == len(accepted) or accepted[i][0] >= end):
            accepted.insert(i, (start, end, kind))

    by_value: dict[tuple[str, str], str] = {}
    next_number: dict[str, int] = {}
    counts: dict[str, int] = {}
    parts: list[str] = []
    cursor = 0
    for start, end, kind in accepted:
        value = text[start:end]
        if (kind, value) not in by_value:
            n = next_number.get(kind, 1)
            while f"[{kind.upper()}_{n}]" in text:
                n += 1
            next_number[kind] = n + 1
            by_value[(kind, value)] = f"[{kind.upper()}_{n}]"
        placeholder = by_value[(kind, value)]
        parts += [text[cursor:start], placeholder]
        counts[kind] = counts.get(kind, 0) + 1
        cursor = end
    parts.append(text[cursor:])
    return Redaction("".join(parts), {p: v for (_, v), p in by_value.items()}, counts)


def restore(text: str, placeholders: dict[str, str]) -> str:
    """Put the original values back for every placeholder of ``placeholders`` found verbatim in ``text``.

    One pass, so a restored value is never expanded again. Only exact placeholders are restored: one the
    model altered (``[phone_1]``, ``PHONE_1``, ``[PHONE 1]``) stays as the model wrote it.
    """
    if not placeholders:
        return text
    return _PLACEHOLDER.sub(lambda m: placeholders.get(m.group(), m.group()), text)


@dataclass(frozen=True, slots=True)
class InjectionFinding:
    """Which rule fired, and up to 80 characters of the (folded) input around the match.

    Callers log ``rule`` only: ``excerpt`` is caller text and may carry anything."""

    rule: str
    excerpt: str


_I = re.IGNORECASE
_NOT = r"(?<!n't\s)(?<!n’t\s)(?<!not\s)(?<!never\s)"  # "don't forget the previous instructions" is benign
_START = r"(?:^|(?<=[.!?:;\n])\s*|\bplease\s+|\bnow\s+)"  # sentence start: an imperative addressed to the model
_REVEAL = (r"(?:reveal|print|show|display|output|repeat|recite|tell|give|leak|dump|expose|write\s+out|spell\s+out)"
           r"\s+(?:me\s+|us\s+)?")
_SECRET = (r"(?:(?:full|entire|exact|original|hidden|secret|initial|complete|verbatim)\s+)*"
           r"(?:system\s+(?:prompt|message|instructions?)|(?:initial|hidden|secret|original)\s+(?:prompt|instructions))")
_NO_LIMITS = (r"(?:without\s+(?:any\s+)?(?:restrictions|limits|limitations|filters|rules|guidelines|censorship)"
              r"|(?:with\s+)?no\s+(?:restrictions|limits|limitations|filters|rules|guidelines|censorship)"
              r"|unrestricted|unfiltered|uncensored|jailbroken|(?-i:DAN)\b|developer\s+mode|not\s+bound\s+by)")
_INJECTION_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("ignore_previous", re.compile(
        _NOT + r"\b(?:ignore|disregard|forget|override|bypass)\s+(?:(?:all|any|every|of|the|your|these|those)\s+)*"
        r"(?:(?:previous|prior|above|earlier|preceding|foregoing|original|initial|system|existing)\s+)+"
        r"(?:instructions?|prompts?|rules|directions|directives|guidelines|commands|context)\b"
        r"|" + _NOT + r"\b(?:ignore|disregard|forget)\s+(?:all\s+(?:of\s+)?)?(?:the\s+|everything\s+)?above"
        r"\s*(?:[,.;:!]|and\b|$)", _I)),
    ("ignore_previous", re.compile(
        r"(?<!不要)(?<!不能)(?<!别)(?<!不)(?:忽略|无视|忽视|忘记|忘掉|不要理会|不要管|别管)\s*掉?\s*(?:你|您)?\s*"
        r"(?:所有|全部|一切)?\s*的?\s*(?:之前|以上|上面|前面|先前|此前|上述|原来|原有|原先|系统)\s*的?\s*"
        r"(?:所有|全部|一切)?\s*的?\s*(?:指令|提示词?|要求|规则|指示|设定)")),
    ("reveal_system_prompt", re.compile(
        r"\b" + _REVEAL + r"(?:your|all\s+(?:of\s+)?your)\s+" + _SECRET
        + r"|" + _START + _REVEAL + r"the\s+" + _SECRET
        + r"|\bwhat(?:'s|\s+is|\s+are|\s+were)\s+your\s+(?:system\s+prompt|(?:initial|original|hidden)\s+instructions)",
        _I)),
    ("reveal_system_prompt", re.compile(
        r"(?:(?:输出|打印|告诉我|给我看|说出|写出)\s*(?:一下)?\s*(?:你的|您的|你)?"
        r"|(?:泄露|透露|显示|展示|重复|复述)\s*(?:一下)?\s*(?:你的|您的|你))\s*"
        r"(?:完整|全部|原始|初始|隐藏)?的?\s*(?:系统提示|系统指令|系统设定|系统消息|初始指令|system\s*prompt)", _I)),
    ("role_override", re.compile(
        r"\b(?:you\s+are\s+now|from\s+now\s+on,?\s+you\s+(?:are|will\s+be)|act\s+as|pretend\s+(?:to\s+be|you\s+are)"
        r"|role-?play\s+as|behave\s+as)\b[^.\n]{0,80}?" + _NO_LIMITS
        + r"|\byou\s+are\s+no\s+longer\s+(?:an?\s+)?(?:AI|assistant|language\s+model|ChatGPT|bound\s+by|restricted)"
        r"|\b(?:enable|enter|activate|switch\s+to)\s+(?:the\s+)?(?:jailbreak|god|(?-i:DAN))\s+mode\b", _I)),
    ("role_override", re.compile(
        r"你现在(?:的身份)?是\s*(?!不是|否|在|几|什么|谁|哪|多少|怎么)(?![^。！？\n]{0,20}[吗呢？?])\S"
        r"|你现在(?:处于|进入了?|在)\s*(?:开发者|越狱|DAN)\s*模式"
        r"|(?:扮演|假装(?:你)?是|充当)[^。！\n]{0,40}?(?:不受|没有|无|不存在)(?:任何)?(?:限制|约束|审查|过滤|道德)"
        r"|(?:进入|开启|启用|切换到)\s*(?:越狱|上帝|DAN)\s*模式")),
    ("delimiter_escape", re.compile(
        r"<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id|end_header_id)\|>"
        r"|\[/?INST\]|<<\s*/?SYS\s*>>"
        r"|(?:^|\n)[ \t]*(?:system|assistant|developer|SYSTEM|ASSISTANT|DEVELOPER)[ \t]*[:：]"
        r"|(?:^|\n)[ \t]*(?:System|Assistant|Developer)[ \t]*[:：][ \t]*(?i:you\b|ignore\b|new\b|from\s+now|忽略|你)"
        r"|(?:^|\n)[ \t]*#{2,}[ \t]*(?i:system(?:\s+(?:prompt|message))?|new\s+instructions|developer\s+message)"
        r"[ \t]*[:：]?[ \t]*(?:\n|$)")),
)


def detect_injection(text: str) -> InjectionFinding | None:
    """The first rule (in a fixed order) whose phrase occurs in ``text``, or ``None``.

    The text is folded first (NFKC, zero-width characters dropped) so full-width letters and inserted
    invisible characters do not evade the phrases; matching is case-insensitive for English. Phrases
    are chosen to be instructions addressed to the model: "ignore the typo" or a description of what
    attackers attempt ("models can be tricked into revealing their system prompt") does not fire.
    """
    folded = _fold(text, casefold=False)
    for rule, pattern in _INJECTION_RULES:
        m = pattern.search(folded)
        if m:
            return InjectionFinding(rule, _excerpt(folded, m.start(), m.end()))
    return None


def _excerpt(text: str, start: int, end: int, width: int = 80) -> str:
    if end - start >= width:
        return text[start:start + width]
    lo = max(0, start - (width - (end - start)) // 2)
    hi = min(len(text), lo + width)
    return text[max(0, hi - width):hi]


def _fold(text: str, *, casefold: bool = True) -> str:
    """NFKC (full-width → half-width, compatibility forms), zero-width characters removed, casefolded."""
    folded = unicodedata.normalize("NFKC", text.translate(_ZERO_WIDTH))
    return unicodedata.normalize("NFKC", folded.casefold()) if casefold else folded


def moderate(text: str, terms: Sequence[str]) -> list[str]:
    """The configured ``terms`` that occur in ``text``, each once, in configuration order.

    Both sides are folded (NFKC, case, zero-width characters U+200B–U+200D, U+2060 and U+FEFF dropped),
    so "ＢＡＤ", "bad" and "b\u200bad" all match the term "Bad". A term that folds to nothing never
    matches; no terms, no matches.
    """
    if not terms:
        return []
    folded = _fold(text)
    hits: list[str] = []
    for term in terms:
        needle = _fold(term)
        if needle and needle in folded and term not in hits:
            hits.append(term)
    return hits


@dataclass(frozen=True, slots=True)
class GuardrailPolicy:
    """What a scene configures; every guardrail is off by default (:attr:`off`)."""

    redact_pii: frozenset[str] = frozenset()
    restore_pii: bool = False
    injection: InjectionMode = "off"
    moderation_terms: tuple[str, ...] = ()
    moderation_action: ModerationAction = "block"

    off: ClassVar[GuardrailPolicy]

    @classmethod
    def from_config(cls, raw: Mapping[str, Any] | None) -> GuardrailPolicy:
        """Validate a scene's plain ``guardrails`` mapping (YAML/JSON) into a policy.

        ``redact_pii`` is a list of kinds (``phone``, ``id_card``, ``email``, ``bank_card``) or a bool
        (``true`` = all kinds). An unknown key or a bad value raises ``invalid_request`` naming the key,
        so a typo in a scene never silently leaves a guardrail off.
        """
        if raw is None:
            return cls.off
        if not isinstance(raw, Mapping):
            raise _invalid("guardrails", "must be a mapping")
        unknown = sorted(str(k) for k in raw if k not in _POLICY_KEYS)
        if unknown:
            raise _invalid(unknown[0], f"is not a guardrails setting (expected one of: {', '.join(_POLICY_KEYS)})")
        return cls(
            redact_pii=_pii_kinds(raw.get("redact_pii", False)),
            restore_pii=_flag(raw, "restore_pii"),
            injection=_choice(raw, "injection", get_args(InjectionMode), "off"),
            moderation_terms=_terms(raw.get("moderation_terms", ())),
            moderation_action=_choice(raw, "moderation_action", get_args(ModerationAction), "block"),
        )


GuardrailPolicy.off = GuardrailPolicy()
_POLICY_KEYS = ("redact_pii", "restore_pii", "injection", "moderation_terms", "moderation_action")


def _invalid(key: str, problem: str) -> HearthError:
    return HearthError("invalid_request", f"guardrails.{key} {problem}.", details={"key": key})


def _pii_kinds(value: Any) -> frozenset[str]:
    if isinstance(value, bool):
        return ALL_PII if value else frozenset()
    if not isinstance(value, list | tuple | set | frozenset) or not all(isinstance(v, str) for v in value):
        raise _invalid("redact_pii", "must be a list of PII kinds or a boolean")
    unknown = sorted(set(value) - ALL_PII)
    if unknown:
        raise _invalid("redact_pii", f"has unknown kind {unknown[0]!r} (expected: {', '.join(sorted(ALL_PII))})")
    return frozenset(value)


def _flag(raw: Mapping[str, Any], key: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise _invalid(key, "must be a boolean")
    return value


def _choice(raw: Mapping[str, Any], key: str, allowed: tuple[Any, ...], default: str) -> Any:
    value = raw.get(key, default)
    if value not in allowed or not isinstance(value, str):
        raise _invalid(key, f"must be one of: {', '.join(allowed)}")
    return value


def _terms(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not all(isinstance(t, str) for t in value):
        raise _invalid("moderation_terms", "must be a list of strings")
    if any(not _fold(t).strip() for t in value):
        raise _invalid("moderation_terms", "must not contain empty terms")
    return tuple(value)
