"""Anthropic Messages upstreams, translated to and from OpenAI's chat format (streams included).

The translation itself lives in :mod:`hearth.providers.anthropic_format` (pure functions); this
module does the HTTP. A request Anthropic cannot express is refused with 400 before any call.

Callers of Hearth's own ``/v1/messages`` door speak Anthropic's format already: for them
:class:`NativeMessages` passes the caller's request through as it is (the model name mapped, the
caller's ``anthropic-version`` and ``anthropic-beta`` sent along) and hands back Anthropic's answer
or event stream untranslated (:class:`NativeMessagesStream`), its usage read for the call's
accounting; ``count_tokens`` asks the endpoint to count.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from hearth.errors import HearthError, UpstreamNetworkError, UpstreamOutcomeUnknown
from hearth.providers.anthropic_format import (
    MessagesStreamTranslator,
    TranslationError,
    UpstreamStreamError,
    _UsageCounts,
    anthropic_error_to_openai,
    chat_to_messages_request,
    messages_response_to_chat,
)
from hearth.providers.base import HeaderExchange, UpstreamReply, Usage
from hearth.providers.http1_client import Http1Pool
from hearth.providers.upstream_http import UpstreamBody, UpstreamHTTP, exchange_headers, stream_timeouts
from hearth.registry.snapshot import Endpoint
from hearth.wire.sse import SSEEventTooLarge, SSEParser
from hearth.wire.tokens import estimate_text

API_VERSION = "2023-06-01"


class AnthropicStream:
    def __init__(self, body: UpstreamBody, translator: MessagesStreamTranslator,
                 max_event_bytes: int) -> None:
        self._body = body
        self._tr = translator
        self._parser = SSEParser(max_event_bytes)
        self._pending: list[bytes] = []
        self._chars = 0
        self._text: list[str] = []

    @property
    def usage(self) -> Usage | None:
        prompt, completion = self._tr.usage
        return Usage(prompt, completion) if (prompt or completion) else None

    @property
    def completion_estimate(self) -> int:
        return estimate_text("".join(self._text))

    async def _fill(self) -> bool:
        while not self._pending:
            if self._tr.finished:
                return False
            chunk = await self._body.read()
            if not chunk:
                raise UpstreamNetworkError("upstream stream ended before message_stop")
            try:
                events = self._parser.feed(chunk)
                for ev in events:
                    self._pending.extend(self._tr.feed(ev.event, ev.data))
            except (SSEEventTooLarge, UpstreamStreamError) as exc:
                raise UpstreamNetworkError(f"upstream stream failed: {exc}") from exc
        return True

    async def prime(self) -> None:
        await self._fill()

    async def batches(self) -> AsyncIterator[list[bytes]]:
        while await self._fill():
            batch, self._pending = self._pending, []
            for payload in batch:
                if b'"content"' in payload:
                    obj = orjson.loads(payload)
                    for ch in obj.get("choices") or ():
                        c = (ch.get("delta") or {}).get("content")
                        if isinstance(c, str):
                            self._text.append(c)
            yield batch

    async def aclose(self) -> None:
        self._body.close()


class AnthropicProvider:
    def __init__(self, pool: Http1Pool, max_event_bytes: int = 1 << 20, *,
                 connect_timeout_s: float = 3.0) -> None:
        self._http = UpstreamHTTP(pool, connect_timeout_s=connect_timeout_s)
        self._max_event_bytes = max_event_bytes

    @staticmethod
    def _headers(ep: Endpoint, stream: bool) -> dict[str, str]:
        h = {"Content-Type": "application/json", "anthropic-version": API_VERSION,
             "Accept": "text/event-stream" if stream else "application/json"}
        if ep.api_key:
            h["x-api-key"] = ep.api_key
        return h

    @staticmethod
    def _translate(ep: Endpoint, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return chat_to_messages_request(body, ep.upstream_model)
        except TranslationError as exc:
            raise HearthError("unsupported_feature", str(exc)) from exc

    async def chat(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                   headers: HeaderExchange | None = None) -> UpstreamReply:
        payload = orjson.dumps({**self._translate(ep, body), "stream": False})
        request_headers, answered = exchange_headers(ep, self._headers(ep, False), headers)
        raw = await self._http.call(ep.base_url + "/messages", payload, request_headers,
                                    timeout_s=timeout_s, error_body=anthropic_error_to_openai, answered=answered)
        try:
            data = orjson.loads(raw)
            chat = messages_response_to_chat(data, ep.upstream_model)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:  # answered: maybe billed
            raise UpstreamOutcomeUnknown("upstream sent a malformed response") from exc
        u = chat.get("usage") or {}
        usage = Usage(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0))) if u else None
        return UpstreamReply(orjson.dumps(chat), usage)

    async def chat_stream(self, ep: Endpoint, body: dict[str, Any], first_byte_timeout_s: float,
                          idle_timeout_s: float, *, headers: HeaderExchange | None = None) -> AnthropicStream:
        first_s, idle_s = stream_timeouts(ep, first_byte_timeout_s, idle_timeout_s)
        opts = body.get("stream_options")
        include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        payload = orjson.dumps({**self._translate(ep, body), "stream": True})
        request_headers, answered = exchange_headers(ep, self._headers(ep, True), headers)
        return await self._http.open_stream(
            ep.base_url + "/messages", payload, request_headers,
            first_event_timeout_s=first_s, idle_timeout_s=idle_s, error_body=anthropic_error_to_openai,
            answered=answered,
            stream=lambda reader: AnthropicStream(reader, MessagesStreamTranslator(ep.upstream_model, include_usage),
                                                  self._max_event_bytes))

    async def embeddings(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                         headers: HeaderExchange | None = None) -> UpstreamReply:
        raise HearthError("unsupported_feature", "Anthropic endpoints do not serve embeddings.")

    # ---- native pass-through (the /v1/messages door) -------------------------------------------------
    @classmethod
    def _native_headers(cls, ep: Endpoint, stream: bool, version: str, beta: str | None) -> dict[str, str]:
        h = cls._headers(ep, stream)
        h["anthropic-version"] = version
        if beta:
            h["anthropic-beta"] = beta
        return h

    async def native_messages(self, ep: Endpoint, payload: bytes, timeout_s: float, *, version: str,
                              beta: str | None, headers: HeaderExchange | None = None) -> UpstreamReply:
        """A Messages request sent as it is; the answer's bytes as Anthropic wrote them, with their usage."""
        request_headers, answered = exchange_headers(ep, self._native_headers(ep, False, version, beta), headers)
        raw = await self._http.call(ep.base_url + "/messages", payload, request_headers,
                                    timeout_s=timeout_s, error_body=anthropic_error_to_openai, answered=answered)
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:  # answered: maybe billed
            raise UpstreamOutcomeUnknown("upstream sent a malformed response") from exc
        if not isinstance(data, dict) or data.get("type") != "message":
            raise UpstreamOutcomeUnknown("upstream sent a malformed response")
        counts = _UsageCounts()
        counts.update(data.get("usage"))
        return UpstreamReply(raw, Usage(counts.prompt, counts.output))

    async def native_stream(self, ep: Endpoint, payload: bytes, first_byte_timeout_s: float, idle_timeout_s: float,
                            *, version: str, beta: str | None,
                            headers: HeaderExchange | None = None) -> NativeMessagesStream:
        first_s, idle_s = stream_timeouts(ep, first_byte_timeout_s, idle_timeout_s)
        request_headers, answered = exchange_headers(ep, self._native_headers(ep, True, version, beta), headers)
        return await self._http.open_stream(
            ep.base_url + "/messages", payload, request_headers, first_event_timeout_s=first_s,
            idle_timeout_s=idle_s, error_body=anthropic_error_to_openai, answered=answered,
            stream=lambda reader: NativeMessagesStream(reader, self._max_event_bytes))

    async def count_tokens(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *, version: str,
                           beta: str | None) -> int:
        """The endpoint's own count of ``body``'s input tokens (``/v1/messages/count_tokens``)."""
        payload = orjson.dumps({**body, "model": ep.upstream_model})
        raw = await self._http.call(ep.base_url + "/messages/count_tokens", payload,
                                    self._native_headers(ep, False, version, beta), timeout_s=timeout_s,
                                    error_body=anthropic_error_to_openai)
        try:
            tokens = orjson.loads(raw).get("input_tokens")
        except (orjson.JSONDecodeError, AttributeError) as exc:
            raise UpstreamNetworkError("upstream sent a malformed response") from exc
        if type(tokens) is not int:
            raise UpstreamNetworkError("upstream sent a malformed response")
        return tokens


class NativeMessagesStream:
    """An Anthropic event stream relayed untranslated: each event's ``data`` is one payload.

    The payloads carry their own type (``{"type": "content_block_delta", …}``), from which the door
    writes the ``event:`` lines back. Usage is read from ``message_start`` and ``message_delta``; the
    upstream's ``error`` event ends the stream with ``upstream_stream_error`` once the events before
    it are relayed; a stream that stops before ``message_stop`` was cut."""

    def __init__(self, body: UpstreamBody, max_event_bytes: int) -> None:
        self._body = body
        self._parser = SSEParser(max_event_bytes)
        self._pending: list[bytes] = []
        self._counts = _UsageCounts()
        self._counted = False
        self._text: list[str] = []
        self._finished = False
        self._error: UpstreamNetworkError | None = None

    @property
    def usage(self) -> Usage | None:
        return Usage(self._counts.prompt, self._counts.output) if self._counted else None

    @property
    def completion_estimate(self) -> int:
        return estimate_text("".join(self._text))

    async def _fill(self) -> bool:
        while not self._pending:
            if self._error is not None:
                raise self._error
            if self._finished:
                return False
            chunk = await self._body.read()
            if not chunk:
                raise UpstreamNetworkError("upstream stream ended before message_stop")
            try:
                events = self._parser.feed(chunk)
            except SSEEventTooLarge as exc:
                raise UpstreamNetworkError(f"upstream stream failed: {exc}") from exc
            for ev in events:
                if self._finished or self._error is not None:
                    break
                self._take(ev.data)
        return True

    def _take(self, data: bytes) -> None:
        try:
            event = orjson.loads(data)
        except orjson.JSONDecodeError:
            event = None
        if not isinstance(event, dict):
            self._error = UpstreamNetworkError("upstream sent a malformed stream event")
            return
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, dict):
                piece = delta.get("text", delta.get("partial_json"))
                if isinstance(piece, str):
                    self._text.append(piece)
        elif kind == "message_start":
            message = event.get("message")
            self._counts.update(message.get("usage") if isinstance(message, dict) else None)
            self._counted = True
        elif kind == "message_delta":
            self._counts.update(event.get("usage"))
            self._counted = True
        elif kind == "message_stop":
            self._finished = True
        elif kind == "error":
            error = event.get("error")
            message = error.get("message") if isinstance(error, dict) else None
            self._error = UpstreamNetworkError(message if isinstance(message, str) and message
                                               else "upstream stream error", code="upstream_stream_error")
            return
        self._pending.append(data)

    async def prime(self) -> None:
        await self._fill()

    async def batches(self) -> AsyncIterator[list[bytes]]:
        while await self._fill():
            batch, self._pending = self._pending, []
            yield batch

    async def aclose(self) -> None:
        self._body.close()


class NativeMessages:
    """A ``/v1/messages`` request for the gateway core's native attempts (:class:`~hearth.providers.base.NativeCall`):
    Anthropic endpoints get ``body`` as it is, with their upstream model and the stream flag of the call."""

    def __init__(self, provider: AnthropicProvider, body: dict[str, Any], *, version: str, beta: str | None,
                 required: bool) -> None:
        self._provider = provider
        self._body = body
        self._version = version
        self._beta = beta
        self._required = required

    @property
    def required(self) -> bool:
        return self._required

    def serves(self, ep: Endpoint) -> bool:
        return ep.kind == "anthropic"

    def _payload(self, ep: Endpoint, stream: bool) -> bytes:
        return orjson.dumps({**self._body, "model": ep.upstream_model, "stream": stream})

    async def chat(self, ep: Endpoint, timeout_s: float, *, headers: HeaderExchange | None = None) -> UpstreamReply:
        return await self._provider.native_messages(ep, self._payload(ep, False), timeout_s, version=self._version,
                                                    beta=self._beta, headers=headers)

    async def chat_stream(self, ep: Endpoint, first_byte_timeout_s: float, idle_timeout_s: float, *,
                          headers: HeaderExchange | None = None) -> NativeMessagesStream:
        return await self._provider.native_stream(ep, self._payload(ep, True), first_byte_timeout_s, idle_timeout_s,
                                                  version=self._version, beta=self._beta, headers=headers)
