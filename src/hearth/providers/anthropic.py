"""Anthropic Messages upstreams, translated to and from OpenAI's chat format (streams included).

The translation itself lives in :mod:`hearth.providers.anthropic_format` (pure functions); this
module does the HTTP. A request Anthropic cannot express is refused with 400 before any call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson

from hearth.errors import HearthError, UpstreamNetworkError
from hearth.providers.anthropic_format import (
    MessagesStreamTranslator,
    TranslationError,
    UpstreamStreamError,
    anthropic_error_to_openai,
    chat_to_messages_request,
    messages_response_to_chat,
)
from hearth.providers.base import HeaderExchange, UpstreamReply, Usage
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
    def __init__(self, session: aiohttp.ClientSession, max_event_bytes: int = 1 << 20, *,
                 connect_timeout_s: float = 3.0) -> None:
        self._http = UpstreamHTTP(session, connect_timeout_s=connect_timeout_s)
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
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise UpstreamNetworkError("upstream sent a malformed response") from exc
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
