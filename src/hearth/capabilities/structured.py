"""Structured output: find the JSON in a model's answer, validate it against a JSON Schema, and say what
is wrong in words a model can act on in a corrective retry.

Models wrap JSON in prose or Markdown fences; :func:`parse_json_output` takes the first complete JSON
object (or array) it can decode, after stripping a ```` ```json ```` fence. Validation uses
``jsonschema`` (draft 2020-12); each problem is reported with its JSON pointer, at most
:data:`MAX_PROBLEMS` of them, so a retry prompt stays short.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from hearth.errors import HearthError

MAX_PROBLEMS = 20
_FENCE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Problem:
    path: str  # a JSON pointer into the output ("" for the whole document)
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "message": self.message}


class NoJson(ValueError):
    """The answer holds no JSON document at all."""


def parse_json_output(text: str) -> Any:
    """The JSON document in ``text``: the whole text, a fenced block, or the first ``{``/``[`` that decodes."""
    stripped = text.strip()
    for candidate in (stripped, *(m.group(1).strip() for m in _FENCE.finditer(text))):
        try:
            return orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for match in re.finditer(r"[\[{]", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except json.JSONDecodeError:
            continue
        return value
    raise NoJson("the answer is not JSON")


def check_schema(schema: Mapping[str, Any]) -> None:
    """400 ``schema_invalid`` for a schema ``jsonschema`` cannot use."""
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise HearthError("schema_invalid", f"The JSON Schema is not valid: {exc.message}",
                          details={"path": "/" + "/".join(map(str, exc.path))}, param="schema") from None


def validate(document: Any, schema: Mapping[str, Any]) -> list[Problem]:
    validator = _validator(orjson.dumps(schema, option=orjson.OPT_SORT_KEYS))
    problems = []
    for error in sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.absolute_path))):
        pointer = "".join(f"/{p}" for p in error.absolute_path)
        problems.append(Problem(pointer, error.message[:300]))
        if len(problems) == MAX_PROBLEMS:
            break
    return problems


@lru_cache(maxsize=256)
def _validator(schema_json: bytes) -> Draft202012Validator:
    return Draft202012Validator(orjson.loads(schema_json))


def correction_message(problems: list[Problem]) -> str:
    """What a corrective retry tells the model (in the user turn after its own answer)."""
    lines = [f"- {p.path or '(document)'}: {p.message}" for p in problems]
    return ("Your previous answer did not match the required JSON Schema. Problems:\n" + "\n".join(lines)
            + "\nAnswer again with only the corrected JSON document, no prose and no code fence.")
