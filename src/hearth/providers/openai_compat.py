"""OpenAI-compatible upstreams: OpenAI, DeepSeek, Qwen compatible mode, vLLM, Ollama's ``/v1``.

The request body is forwarded with the public model name replaced by the endpoint's upstream
model. Responses are relayed byte for byte; they are parsed only to read usage (and, in streams,
to check each event is JSON), so callers see exactly what the upstream sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from hearth.errors import UpstreamNetworkError, UpstreamOutcomeUnknown
from hearth.observability.logging import scrub
from hearth.providers.base import HeaderExchange, UpstreamReply, Usage
from hearth.providers.http1_client import Http1Pool
from hearth.providers.upstream_http import UpstreamBody, UpstreamHTTP, exchange_headers, stream_timeouts
from hearth.registry.snapshot import Endpoint
from hearth.wire.sse import SSEEventTooLarge, SSEParser
from hearth.wire.tokens import estimate_text

_DONE = b"[DONE]"
_ALWAYS_B64_MODELS = ("gpt-image-",)  # OpenAI image models that always answer base64 and refuse `response_format`


def upstream_error_body(status: int, raw: bytes) -> dict[str, Any]:
    """The upstream's OpenAI error object if it sent one, else a generic one (raw body not echoed)."""
    try:
        data = orjson.loads(raw)
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            err = data["error"]
            return {"error": {"message": str(err.get("message", "upstream error"))[:2000],
                              "type": err.get("type") or "api_error", "param": err.get("param"),
                              "code": err.get("code")}}
    except orjson.JSONDecodeError:
        pass
    return {"error": {"message": f"upstream returned status {status}", "type": "api_error", "param": None,
                      "code": f"upstream_{status}"}}


def _usage_of(obj: Any) -> Usage | None:
    u = obj.get("usage") if isinstance(obj, dict) else None
    if isinstance(u, dict) and isinstance(u.get("prompt_tokens"), int):
        return Usage(u["prompt_tokens"], int(u.get("completion_tokens") or 0))
    return None


def _output_estimate(reply: dict[str, Any]) -> int:
    """The output of a chat answer that reports no usage, estimated offline: every choice's content and tool
    calls (an upstream bills each of the ``n`` choices); 0 for answers without choices (embeddings)."""
    total = 0
    choices = reply.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            continue
        if isinstance(message.get("content"), str):
            total += estimate_text(message["content"])
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict):
                total += estimate_text(orjson.dumps(call.get("function")).decode())
    return total


class OpenAIStream:
    """Relays an upstream SSE stream event by event (see :class:`~hearth.providers.base.UpstreamStream`)."""

    def __init__(self, body: UpstreamBody, max_event_bytes: int, drop_usage_chunk: bool) -> None:
        self._body = body
        self._parser = SSEParser(max_event_bytes)
        self._pending: list[bytes] = []
        self._drop_usage_chunk = drop_usage_chunk
        self._done = False
        self._failure: UpstreamNetworkError | None = None
        self.usage: Usage | None = None
        self._text: list[str] = []

    @property
    def completion_estimate(self) -> int:
        return estimate_text("".join(self._text))

    def _accept(self, data: bytes) -> bytes | None:
        """Validate one event; returns the payload to relay or None to drop it."""
        if data == _DONE:
            self._done = True
            return None
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise UpstreamNetworkError("upstream sent a malformed stream event") from exc
        if not isinstance(obj, dict):
            raise UpstreamNetworkError("upstream sent a malformed stream event")
        if "error" in obj and "choices" not in obj:
            err = upstream_error_body(200, data)["error"]
            upstream_code = f" (upstream code: {err['code']})" if err.get("code") else ""
            raise UpstreamNetworkError(f"the upstream reported an error: {scrub(err['message'])}{upstream_code}",
                                       code="upstream_stream_error")
        choices = obj.get("choices")
        if choices:
            delta = choices[0].get("delta") if isinstance(choices[0], dict) else None
            if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                self._text.append(delta["content"])
        usage = _usage_of(obj)
        if usage is not None:
            self.usage = usage
            if self._drop_usage_chunk and not choices:
                return None
        return data

    async def _fill(self) -> bool:
        """Read until at least one relayable event is pending; False at a clean end of stream.

        A failure discovered after good events in the same read is deferred until those events
        have been relayed, so the caller gets everything valid and then the error.
        """
        while not self._pending:
            if self._failure is not None:
                raise self._failure
            if self._done:
                return False
            chunk = await self._body.read()
            if not chunk:
                self._parser.flush()
                raise UpstreamNetworkError("upstream stream ended before [DONE]")
            try:
                for ev in self._parser.feed(chunk):
                    payload = self._accept(ev.data)
                    if payload is not None:
                        self._pending.append(payload)
            except SSEEventTooLarge as exc:
                self._failure = UpstreamNetworkError("upstream sent an oversized stream event")
                self._failure.__cause__ = exc
            except UpstreamNetworkError as exc:
                self._failure = exc
        return True

    async def prime(self) -> None:
        await self._fill()

    async def batches(self) -> AsyncIterator[list[bytes]]:
        while await self._fill():
            batch, self._pending = self._pending, []
            yield batch

    async def aclose(self) -> None:
        self._body.close()


def _with_output_limit_field(ep: Endpoint, body: dict[str, Any]) -> dict[str, Any]:
    """``max_tokens`` under the name this endpoint reads (``max_tokens_field``)."""
    if ep.max_tokens_field != "max_tokens" and "max_tokens" in body:
        body = dict(body)
        body.setdefault(ep.max_tokens_field, body.pop("max_tokens"))
    return body


class OpenAICompatProvider:
    def __init__(self, pool: Http1Pool, max_event_bytes: int = 1 << 20, *,
                 connect_timeout_s: float = 3.0) -> None:
        self._http = UpstreamHTTP(pool, connect_timeout_s=connect_timeout_s)
        self._max_event_bytes = max_event_bytes

    @staticmethod
    def _headers(ep: Endpoint, accept: str = "application/json") -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": accept}
        if ep.api_key:
            h["Authorization"] = f"Bearer {ep.api_key}"
        return h

    async def _json_call(self, path: str, ep: Endpoint, body: dict[str, Any], timeout_s: float,
                         *, exchange: HeaderExchange | None) -> UpstreamReply:
        payload = orjson.dumps({**_with_output_limit_field(ep, body), "model": ep.upstream_model})
        headers, answered = exchange_headers(ep, self._headers(ep), exchange)
        raw = await self._http.call(ep.base_url + path, payload, headers, timeout_s=timeout_s,
                                    error_body=upstream_error_body, answered=answered)
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:  # it answered: the work is done, and may be billed
            raise UpstreamOutcomeUnknown("upstream sent a malformed response") from exc
        if not isinstance(obj, dict):
            raise UpstreamOutcomeUnknown("upstream sent a malformed response")
        usage = _usage_of(obj)
        return UpstreamReply(raw, usage, 0 if usage is not None else _output_estimate(obj))

    async def chat(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                   headers: HeaderExchange | None = None) -> UpstreamReply:
        return await self._json_call("/chat/completions", ep, body, timeout_s, exchange=headers)

    async def embeddings(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                         headers: HeaderExchange | None = None) -> UpstreamReply:
        return await self._json_call("/embeddings", ep, body, timeout_s, exchange=headers)

    async def images(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                     headers: HeaderExchange | None = None) -> UpstreamReply:
        """``POST {base_url}/images/generations``, the answer relayed as is; usage counts the images returned
        and the prompt's ``input_tokens`` (an image's own output tokens are priced per image)."""
        if ep.upstream_model.startswith(_ALWAYS_B64_MODELS):  # they refuse `response_format`: always base64
            body = {k: v for k, v in body.items() if k != "response_format"}
        reply = await self._json_call("/images/generations", ep, body, timeout_s, exchange=headers)
        obj = orjson.loads(reply.body)
        data = obj.get("data")
        usage = obj.get("usage")
        prompt = usage.get("input_tokens") if isinstance(usage, dict) else None
        if not isinstance(prompt, int):
            prompt = estimate_text(str(body.get("prompt") or ""))
        return UpstreamReply(reply.body, Usage(prompt, 0, images=len(data) if isinstance(data, list) else 0))

    async def chat_stream(self, ep: Endpoint, body: dict[str, Any], first_byte_timeout_s: float,
                          idle_timeout_s: float, *, headers: HeaderExchange | None = None) -> OpenAIStream:
        first_s, idle_s = stream_timeouts(ep, first_byte_timeout_s, idle_timeout_s)
        body = _with_output_limit_field(ep, body)
        opts = body.get("stream_options")
        wants_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        upstream_body = {**body, "model": ep.upstream_model,
                         "stream_options": {**(opts if isinstance(opts, dict) else {}), "include_usage": True}}
        request_headers, answered = exchange_headers(ep, self._headers(ep, "text/event-stream"), headers)
        return await self._http.open_stream(
            ep.base_url + "/chat/completions", orjson.dumps(upstream_body), request_headers,
            first_event_timeout_s=first_s, idle_timeout_s=idle_s, error_body=upstream_error_body, answered=answered,
            stream=lambda reader: OpenAIStream(reader, self._max_event_bytes, drop_usage_chunk=not wants_usage))
