"""Specification-style tests for the byte-level SSE parser and encoder."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hearth.wire.sse import SSEEvent, SSEEventTooLarge, SSEParser, encode_event
from tests.support import examples

PIECES = ["Hello", " —", " 你好", " world", " 🔥🚀", " café", " ok"]


def _openai_payloads() -> list[bytes]:
    """The JSON payloads of a realistic chat.completion.chunk stream."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    out = [orjson.dumps({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})]
    out += [
        orjson.dumps({**base, "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]})
        for p in PIECES
    ]
    out.append(orjson.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out.append(
        orjson.dumps({**base, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7, "total_tokens": 10}})
    )
    out.append(b"[DONE]")
    return out


PAYLOADS = _openai_payloads()


def _stream(eol: bytes) -> bytes:
    """Frame PAYLOADS like OpenAI does, with a keep-alive comment, using ``eol``."""
    parts = [b": keep-alive" + eol + eol]
    parts += [b"data: " + p + eol + eol for p in PAYLOADS]
    return b"".join(parts)


def _parse_all(chunks: list[bytes], parser: SSEParser | None = None) -> list[SSEEvent]:
    parser = parser or SSEParser()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    events.extend(parser.flush())
    return events


EXPECTED = [SSEEvent(p) for p in PAYLOADS]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_every_single_split_point_of_an_openai_stream_yields_the_same_events(eol: bytes) -> None:
    stream = _stream(eol)
    assert "你好".encode() in stream and "🔥".encode() in stream
    assert _parse_all([stream]) == EXPECTED
    for i in range(len(stream) + 1):
        assert _parse_all([stream[:i], stream[i:]]) == EXPECTED, f"split at byte {i}"


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"], ids=["lf", "crlf"])
def test_feeding_one_byte_at_a_time_yields_the_same_events(eol: bytes) -> None:
    stream = _stream(eol)
    assert _parse_all([stream[i : i + 1] for i in range(len(stream))]) == EXPECTED


def test_multibyte_character_split_across_chunks_is_kept_as_raw_bytes() -> None:
    raw = "data: 你好🔥\n\n".encode()
    cut = raw.index("好".encode()) + 1
    parser = SSEParser()
    assert parser.feed(raw[:cut]) == []
    [event] = parser.feed(raw[cut:])
    assert isinstance(event.data, bytes)
    assert event.data.decode() == "你好🔥"


def test_several_events_in_one_chunk_are_all_returned_in_order() -> None:
    chunk = b"data: 1\n\ndata: 2\n\nevent: x\ndata: 3\n\ndata: 4"
    parser = SSEParser()
    assert parser.feed(chunk) == [SSEEvent(b"1"), SSEEvent(b"2"), SSEEvent(b"3", event="x")]
    assert parser.feed(b"\n\n") == [SSEEvent(b"4")]


def test_comment_lines_are_ignored_anywhere() -> None:
    chunk = b": ping\n\ndata: a\n:inner comment\ndata: b\n\n:\n\n"
    assert _parse_all([chunk]) == [SSEEvent(b"a\nb")]


def test_multiple_data_lines_are_joined_with_lf_and_mixed_endings_accepted() -> None:
    chunk = b"data: line1\r\ndata: line2\rdata: line3\n\r\n"
    assert _parse_all([chunk]) == [SSEEvent(b"line1\nline2\nline3")]


def test_cr_at_chunk_end_followed_by_lf_is_one_line_ending() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    # Were "\r" + "\n" two endings, the "\n" would be a blank line dispatching "a" alone.
    assert parser.feed(b"\ndata: b\r") == []
    assert parser.feed(b"\n") == []
    assert parser.feed(b"\r") == [SSEEvent(b"a\nb")]
    assert parser.feed(b"\n") == []
    assert parser.feed(b"data: c\n\n") == [SSEEvent(b"c")]


def test_lone_cr_followed_by_other_bytes_in_next_chunk_is_still_a_line_ending() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\r") == [SSEEvent(b"a")]
    assert parser.feed(b"data: b\r\r") == [SSEEvent(b"b")]


def test_only_one_leading_space_of_a_value_is_stripped() -> None:
    assert _parse_all([b"data:x\n\n", b"data:  y\n\n", b"data: \n\n"]) == [
        SSEEvent(b"x"),
        SSEEvent(b" y"),
        SSEEvent(b""),
    ]


def test_field_without_colon_has_empty_value() -> None:
    assert _parse_all([b"data\ndata\n\n"]) == [SSEEvent(b"\n")]


def test_block_without_data_is_not_dispatched_but_empty_data_field_is() -> None:
    assert _parse_all([b"event: ping\n\nretry: 5\n\n\n\n"]) == []
    assert _parse_all([b"event: ping\ndata:\n\n"]) == [SSEEvent(b"", event="ping")]


def test_event_type_is_reset_after_each_dispatch_and_empty_type_is_none() -> None:
    chunk = b"event: a\ndata: 1\n\ndata: 2\n\nevent:\ndata: 3\n\nevent: skipped\n\ndata: 4\n\n"
    assert [(e.event, e.data) for e in _parse_all([chunk])] == [
        ("a", b"1"),
        (None, b"2"),
        (None, b"3"),
        (None, b"4"),
    ]


def test_last_event_id_persists_until_changed_and_nul_ids_are_ignored() -> None:
    chunk = b"id: 7\ndata: a\n\ndata: b\n\nid: 8\x009\ndata: c\n\nid\ndata: d\n\n"
    assert [(e.id, e.data) for e in _parse_all([chunk])] == [
        ("7", b"a"),
        ("7", b"b"),
        ("7", b"c"),
        (None, b"d"),
    ]


def test_retry_accepts_only_ascii_digits_and_unknown_fields_are_ignored() -> None:
    chunk = b"retry: 1500\nfoo: bar\ndata: a\n\nretry: 1.5\ndata: b\n\nretry: x9\ndata: c\n\n"
    assert [(e.retry, e.data) for e in _parse_all([chunk])] == [(1500, b"a"), (None, b"b"), (None, b"c")]


def test_event_and_id_names_are_decoded_as_utf8() -> None:
    [event] = _parse_all(["event: 更新\nid: ✓\ndata: x\n\n".encode()])
    assert (event.event, event.id) == ("更新", "✓")


def test_incomplete_event_at_end_of_stream_is_discarded() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: complete\n\ndata: never finished\n") == [SSEEvent(b"complete")]
    assert parser.flush() == []
    assert parser.feed(b"data: fresh\n\n") == [SSEEvent(b"fresh")]


def test_leading_utf8_bom_is_stripped_even_when_split() -> None:
    parser = SSEParser()
    assert parser.feed(b"\xef") == []
    assert parser.feed(b"\xbb") == []
    assert parser.feed(b"\xbfdata: a\n\n") == [SSEEvent(b"a")]
    assert parser.feed(b"\xef\xbb\xbfdata: b\n\n") == []


def test_event_at_exact_size_limit_passes_and_one_byte_more_raises() -> None:
    limit = 64
    line = b"data: " + b"x" * (limit - 6)
    assert len(line) == limit
    assert _parse_all([line + b"\n\n"], SSEParser(limit)) == [SSEEvent(b"x" * (limit - 6))]
    with pytest.raises(SSEEventTooLarge):
        SSEParser(limit).feed(line + b"y\n\n")


def test_size_limit_counts_all_lines_of_one_event() -> None:
    parser = SSEParser(max_event_bytes=20)
    assert parser.feed(b"data: 123456789\n\n") == [SSEEvent(b"123456789")]
    with pytest.raises(SSEEventTooLarge):
        parser.feed(b"data: 123456789\ndata: 123456789\n")


def test_unterminated_oversized_line_raises_before_its_end_and_parser_stays_failed() -> None:
    parser = SSEParser(max_event_bytes=100)
    assert parser.feed(b"data: " + b"a" * 50) == []
    with pytest.raises(SSEEventTooLarge):
        parser.feed(b"a" * 50)
    with pytest.raises(SSEEventTooLarge):
        parser.feed(b"\n\n")
    parser.flush()
    assert parser.feed(b"data: ok\n\n") == [SSEEvent(b"ok")]


def test_encode_event_uses_canonical_lf_framing() -> None:
    assert encode_event(b"{}") == b"data: {}\n\n"
    assert encode_event(b"a\nb", event="delta") == b"event: delta\ndata: a\ndata: b\n\n"
    assert encode_event(b"") == b"data: \n\n"


def test_encode_event_rejects_what_cannot_round_trip() -> None:
    with pytest.raises(ValueError):
        encode_event(b"a\rb")
    with pytest.raises(ValueError):
        encode_event(b"a", event="x\ny")


def test_encode_then_parse_round_trips() -> None:
    events = [
        SSEEvent(b'{"x": "\xe4\xbd\xa0"}', event="message_start"),
        SSEEvent(b"multi\nline\n\ndata"),
        SSEEvent(b" leading space"),
        SSEEvent(b""),
    ]
    encoded = b"".join(encode_event(e.data, e.event) for e in events)
    assert _parse_all([encoded]) == events


_event_names = st.none() | st.text(
    st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), min_size=1, max_size=12
)
_datas = st.binary(max_size=40).map(lambda b: b.replace(b"\r", b"")) | st.text(max_size=20).map(
    lambda s: s.replace("\r", "").encode()
)


@settings(max_examples=examples(150), deadline=None)
@given(
    events=st.lists(st.tuples(_datas, _event_names), max_size=8),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12),
)
def test_property_encoded_events_split_anywhere_parse_back(
    events: list[tuple[bytes, str | None]], cuts: list[int]
) -> None:
    stream = b"".join(encode_event(data, name) for data, name in events)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert _parse_all(chunks) == [SSEEvent(data, name) for data, name in events]


def _reference_parse(stream: bytes) -> list[SSEEvent]:
    """A direct, unoptimised reading of the WHATWG algorithm, used as an oracle."""
    stream = stream.removeprefix(b"\xef\xbb\xbf")
    lines = re.split(rb"\r\n|\r|\n", stream)
    lines.pop()  # text after the last line terminator is not a complete line
    events: list[SSEEvent] = []
    data: bytes | None = None
    event = ""
    last_id = ""
    retry: int | None = None
    for line in lines:
        if line == b"":
            if data is not None:
                events.append(SSEEvent(data.removesuffix(b"\n"), event or None, last_id or None, retry))
            data, event, retry = None, "", None
            continue
        if line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        value = value.removeprefix(b" ")
        if name == b"data":
            data = (data or b"") + value + b"\n"
        elif name == b"event":
            event = value.decode("utf-8", "replace")
        elif name == b"id" and b"\x00" not in value:
            last_id = value.decode("utf-8", "replace")
        elif name == b"retry" and re.fullmatch(rb"[0-9]+", value):
            retry = int(value)
    return events


_tokens = st.sampled_from(
    [
        b"data:",
        b"data: x",
        b"data:  y",
        b"data",
        b"event: e",
        b"event:",
        b"id: 1",
        b"id: \x00",
        b"id",
        b"retry: 15",
        b"retry: 1x",
        b": comment",
        b"other: z",
        b"\r",
        b"\n",
        b"\r\n",
        b"\n\n",
        b"\xef\xbb\xbf",
        "你好".encode(),
        b" ",
    ]
)


@settings(max_examples=examples(150), deadline=None)
@given(
    tokens=st.lists(_tokens, max_size=30),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=10),
)
def test_property_arbitrary_streams_split_anywhere_match_the_reference_algorithm(
    tokens: list[bytes], cuts: list[int]
) -> None:
    stream = b"".join(tokens)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert _parse_all(chunks) == _reference_parse(stream)
