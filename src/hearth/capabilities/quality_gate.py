"""A prompt's quality gate (seed 002 §10): rule checks on the answer, then an optional judge prompt that
scores it 0–1 against a threshold. An answer that fails is regenerated up to ``max_regenerations``
times; if none passes, the request fails with 422 ``quality_gate_failed`` and the evaluation report.
The judge's calls and the regenerations are model calls like any other: admitted, charged, logged,
and listed in the answer's ``attempts`` (purposes ``quality_judge`` and ``quality_regeneration``).

Configuration (a prompt version's ``quality_gate``)::

    {"rules": {"min_chars": 20, "max_chars": 2000, "must_include": ["…"], "must_not_include": ["…"]},
     "judge": {"prompt_code": "summary_judge", "threshold": 0.7, "model": null},
     "max_regenerations": 1}

The judge prompt is rendered with ``text`` = the answer and ``source`` = the request's input, and must
answer a JSON object ``{"score": 0..1, "reason": "…"}``; an answer that is not one scores 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hearth.capabilities.structured import NoJson, parse_json_output
from hearth.prompts.spec import QualityGateSpec, RulesSpec

__all__ = ["Evaluation", "QualityGateSpec", "failed_rules", "judge_score"]


@dataclass(frozen=True, slots=True)
class Evaluation:
    attempt: int
    passed: bool
    failed_rules: list[str]
    score: float | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def failed_rules(text: str, rules: RulesSpec) -> list[str]:
    failed = []
    if rules.min_chars is not None and len(text) < rules.min_chars:
        failed.append(f"min_chars: {len(text)} < {rules.min_chars}")
    if rules.max_chars is not None and len(text) > rules.max_chars:
        failed.append(f"max_chars: {len(text)} > {rules.max_chars}")
    lowered = text.casefold()
    failed += [f"must_include: {term!r}" for term in rules.must_include if term.casefold() not in lowered]
    failed += [f"must_not_include: {term!r}" for term in rules.must_not_include if term.casefold() in lowered]
    return failed


def judge_score(answer: str) -> tuple[float, str | None]:
    """The judge's (score, reason); anything but ``{"score": 0..1}`` scores 0."""
    try:
        doc = parse_json_output(answer)
    except NoJson:
        return 0.0, "the judge did not answer JSON"
    if not isinstance(doc, dict):
        return 0.0, "the judge did not answer an object"
    score = doc.get("score")
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0.0 <= float(score) <= 1.0:
        return 0.0, "the judge's score is not a number in [0, 1]"
    reason = doc.get("reason")
    return float(score), reason[:500] if isinstance(reason, str) else None
