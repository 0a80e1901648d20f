"""Reading a batch's input file: JSONL, one request per line, checked as OpenAI checks it.

Each non-empty line is ``{"custom_id": str, "method": "POST", "url": <the batch's endpoint>, "body": {...}}``.
Two kinds of problem are told apart, as OpenAI does:

* **the file is wrong** — a line that is not a JSON object, a missing or repeated ``custom_id``, another
  method, a URL other than the batch's endpoint, a ``body`` that is not an object, too many lines, no line
  at all: the batch fails, and every problem (up to :data:`MAX_REPORTED`) is listed in its ``errors`` with
  the 1-based line number, in OpenAI's ``{code, message, param, line}`` format;
* **one request is wrong** — a body the endpoint's own validation refuses (``check_body``, the same checks as
  the synchronous route): that line is answered with a 400 in the error file and the others run.

Line numbers count every line of the file (blank ones included, which are skipped); a line's *index* — the
key of its answer (``batch_items.line``) and its place in the output files — counts requests only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from hearth.errors import HearthError

ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings")
MAX_REPORTED = 100  # problems listed in a failed batch's ``errors`` (the count of all is in the last one)
MAX_CUSTOM_ID_CHARS = 512

BodyCheck = Callable[[dict[str, Any]], None]


@dataclass(frozen=True, slots=True)
class InputLine:
    custom_id: str
    body: dict[str, Any]


@dataclass(slots=True)
class ParsedInput:
    """The requests in file order; the file's problems (empty: the file is valid); the lines whose body
    ``check_body`` refused, by index."""

    lines: list[InputLine] = field(default_factory=list)
    problems: list[dict[str, Any]] = field(default_factory=list)
    refused: dict[int, HearthError] = field(default_factory=dict)
    problem_count: int = 0

    def problem(self, code: str, message: str, *, line: int | None, param: str | None = None) -> None:
        self.problem_count += 1
        if len(self.problems) < MAX_REPORTED:
            self.problems.append({"code": code, "message": message, "param": param, "line": line})

    def errors_object(self) -> dict[str, Any] | None:
        """The batch's ``errors`` as OpenAI shows it, or None for a valid file."""
        if not self.problem_count:
            return None
        data = list(self.problems)
        if self.problem_count > len(data):
            data.append({"code": "too_many_errors", "message": f"{self.problem_count - len(data)} more problems "
                         "are not listed.", "param": None, "line": None})
        return {"object": "list", "data": data}


def parse_input(data: bytes, *, endpoint: str, max_lines: int, check_body: BodyCheck | None = None) -> ParsedInput:
    """The requests of ``data`` for ``endpoint``; ``check_body`` (the route's validation) runs on each body
    when given — at creation; the executor re-reads an accepted file without it."""
    parsed = ParsedInput()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        parsed.problem("invalid_file_format", "The file is not UTF-8 text.", line=None)
        return parsed
    seen: set[str] = set()
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        if len(parsed.lines) >= max_lines:
            parsed.problem("too_many_requests", f"The file has more than {max_lines} requests.", line=number)
            break
        line = _checked_line(parsed, raw, number, endpoint=endpoint, seen=seen)
        if line is None:
            continue
        if check_body is not None:
            try:
                if line.body.get("stream") is True:
                    raise HearthError("invalid_request", "A batch request cannot stream.", param="stream")
                check_body(line.body)
            except HearthError as exc:
                parsed.refused[len(parsed.lines)] = exc
        parsed.lines.append(line)
    if not parsed.lines and not parsed.problem_count:
        parsed.problem("empty_file", "The file has no requests.", line=None)
    return parsed


def _checked_line(parsed: ParsedInput, raw: str, number: int, *, endpoint: str, seen: set[str]) -> InputLine | None:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed.problem("invalid_json_line", "This line is not valid JSON.", line=number)
        return None
    if not isinstance(obj, dict):
        parsed.problem("invalid_json_line", "This line is not a JSON object.", line=number)
        return None
    custom_id = obj.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID_CHARS:
        parsed.problem("missing_required_parameter", f"`custom_id` must be a string of 1 to {MAX_CUSTOM_ID_CHARS} "
                       "characters.", line=number, param="custom_id")
        return None
    if custom_id in seen:
        parsed.problem("duplicate_custom_id", f"The custom_id `{custom_id}` is used by an earlier line: each "
                       "request needs its own.", line=number, param="custom_id")
        return None
    seen.add(custom_id)
    if obj.get("method") != "POST":
        parsed.problem("invalid_method", "`method` must be POST.", line=number, param="method")
        return None
    if obj.get("url") != endpoint:
        parsed.problem("mismatched_url", f"`url` must be the batch's endpoint, {endpoint}.", line=number,
                       param="url")
        return None
    body = obj.get("body")
    if not isinstance(body, dict):
        parsed.problem("invalid_request", "`body` must be a JSON object.", line=number, param="body")
        return None
    return InputLine(custom_id, body)
