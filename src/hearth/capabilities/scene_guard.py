"""Applying a scene's guardrails to one capability request (the detectors are in :mod:`guardrails`).

Before the model: the request's own inputs (the input text, chat messages from the caller, string
variables) are checked for prompt injection — ``flag`` records the rule, ``block`` refuses with 400
``prompt_injection_detected`` before any model call — and every message sent is PII-redacted, all
messages in one pass so one value has one placeholder throughout. After the model: placeholders are put
back when the scene says ``restore_pii``, and the answer is checked against the moderation terms.

What happened is kept in :attr:`SceneGuard.record` — counts per PII kind, the injection rule id, the number
of moderation matches — which goes to the request log; never a raw value, never the matched text.
Streams get the input side only (a placeholder or a term can span deltas already sent).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from hearth.capabilities.guardrails import GuardrailPolicy, detect_injection, moderate, redact, restore
from hearth.errors import HearthError

_SEPARATOR = "\x00\u241e\x00"  # joins message contents for one redaction pass; no detector matches across it


class SceneGuard:
    def __init__(self, policy: GuardrailPolicy) -> None:
        self.policy = policy
        self.placeholders: dict[str, str] = {}
        self.record: dict[str, Any] = {}

    @classmethod
    def for_scene(cls, raw: Any) -> SceneGuard:
        return cls(GuardrailPolicy.from_config(raw) if raw else GuardrailPolicy.off)

    def check_inputs(self, inputs: Iterable[str]) -> None:
        if self.policy.injection == "off":
            return
        for text in inputs:
            finding = detect_injection(text)
            if finding is None:
                continue
            self.record["injection"] = {"rule": finding.rule, "action": self.policy.injection}
            if self.policy.injection == "block":
                raise HearthError("prompt_injection_detected", details={"rule": finding.rule})
            return

    def redact_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self.policy.redact_pii:
            return messages
        positions = [i for i, m in enumerate(messages) if isinstance(m.get("content"), str)]
        joined = _SEPARATOR.join(messages[i]["content"] for i in positions)
        result = redact(joined, self.policy.redact_pii)
        if not result.placeholders:
            return messages
        self.placeholders = result.placeholders
        self.record["pii"] = dict(result.counts)
        parts = result.text.split(_SEPARATOR)
        out = [dict(m) for m in messages]
        for i, text in zip(positions, parts, strict=True):
            out[i]["content"] = text
        return out

    def answer(self, content: str) -> str:
        """The answer as the caller sees it (placeholders restored if configured)."""
        if self.placeholders and self.policy.restore_pii:
            return restore(content, self.placeholders)
        return content

    def moderation_matches(self, content: str) -> int:
        if not self.policy.moderation_terms:
            return 0
        found = len(moderate(content, self.policy.moderation_terms))
        if found:
            self.record["moderation"] = {"matches": found, "action": self.policy.moderation_action}
        return found
