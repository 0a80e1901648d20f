"""Reading a batch input file: a wrong file is a list of problems by line (OpenAI's format), a refused body is
one line's 400, and the limits (requests, problems listed) hold."""

from __future__ import annotations

import json
from typing import Any

from hearth.api.chat_validation import validate_chat
from hearth.batches.input_file import MAX_REPORTED, parse_input


def _line(custom_id: str, **body: Any) -> str:
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions",
                       "body": {"model": "m", "messages": [{"role": "user", "content": "x"}], **body}})


def test_blank_lines_are_skipped_and_indexes_count_requests_only() -> None:
    parsed = parse_input(f"\n{_line('a')}\n\n  \n{_line('b')}\r\n".encode(), endpoint="/v1/chat/completions",
                         max_lines=10)
    assert [line.custom_id for line in parsed.lines] == ["a", "b"]
    assert parsed.errors_object() is None and parsed.refused == {}


def test_bodies_the_route_refuses_are_kept_as_lines_with_their_error() -> None:
    parsed = parse_input("\n".join([_line("ok"), _line("hot", temperature=9), _line("s", stream=True)]).encode(),
                         endpoint="/v1/chat/completions", max_lines=10, check_body=validate_chat)
    assert len(parsed.lines) == 3 and parsed.errors_object() is None
    assert {i: (e.code, e.param) for i, e in parsed.refused.items()} == {
        1: ("invalid_request", "temperature"), 2: ("invalid_request", "stream")}


def test_more_requests_than_allowed_fail_the_file_at_the_first_line_past_the_limit() -> None:
    parsed = parse_input("\n".join(_line(f"c{i}") for i in range(5)).encode(), endpoint="/v1/chat/completions",
                         max_lines=3)
    errors = parsed.errors_object()
    assert errors is not None and errors["data"] == [
        {"code": "too_many_requests", "message": "The file has more than 3 requests.", "param": None, "line": 4}]


def test_problems_past_the_reported_number_are_counted_in_one_last_entry() -> None:
    parsed = parse_input("\n".join(["nope"] * (MAX_REPORTED + 7)).encode(), endpoint="/v1/chat/completions",
                         max_lines=1000)
    errors = parsed.errors_object()
    assert errors is not None and len(errors["data"]) == MAX_REPORTED + 1
    assert errors["data"][-1]["code"] == "too_many_errors" and "7 more" in errors["data"][-1]["message"]


def test_an_empty_or_non_utf8_file_is_wrong_as_a_whole() -> None:
    for data, code in ((b"\n\n", "empty_file"), (b"\xff\xfe{}", "invalid_file_format")):
        errors = parse_input(data, endpoint="/v1/embeddings", max_lines=10).errors_object()
        assert errors is not None and [e["code"] for e in errors["data"]] == [code]
