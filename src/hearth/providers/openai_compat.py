"""OpenAI-compatible upstreams: OpenAI, DeepSeek, Qwen compatible mode, vLLM, Ollama's ``/v1``.

The request body is forwarded with the public model name replaced by the endpoint's upstream
model. Responses are relayed byte for byte; they are parsed only to read usage (and, in streams,
to check each event is JSON), so callers see exactly what the upstream sent.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp
import orjson

from hearth.errors import UpstreamHTTPError, UpstreamNetworkError
from hearth.observability.logging import scrub
from hearth.providers.base import UpstreamReply, Usage
from hearth.registry.snapshot import Endpoint
from hearth.wire.sse import SSEEventTooLarge, SSEParser
from hearth.wire.tokens import estimate_text

_DONE = b"[DONE]"


_DELTA_SECONDS = re.compile(r"\d+(?:\.\d+)?")
MAX_RETRY_AFTER_S = 86_400.0  # a day: a larger (or absurd) value is capped, not trusted verbatim


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """How long an upstream's 429/503 asks us to wait, in seconds; None if it does not say.

    ``retry-after-ms`` (OpenAI's, exact) is preferred when present and valid; else ``Retry-After``
    as delta-seconds or an HTTP-date (RFC 9110; a date in the past means 0). ``headers`` is looked
    up case-insensitively when it is aiohttp's multidict; ``now`` (epoch seconds) is for tests."""
    ms = _number(headers.get("retry-after-ms"))
    if ms is not None:
        return min(ms / 1000, MAX_RETRY_AFTER_S)
    value = (headers.get("Retry-After") or "").strip()
    if not value:
        return None
    seconds = _number(value)
    if seconds is None:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:  # RFC 9110 dates are GMT; an obsolete form may parse naive
            when = when.replace(tzinfo=UTC)
        seconds = max(0.0, when.timestamp() - (time.time() if now is None else now))
    return min(seconds, MAX_RETRY_AFTER_S)


def _number(value: str | None) -> float | None:
    if value is None or not _DELTA_SECONDS.fullmatch(value := value.strip()):
        return None
    return float(value)


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


class OpenAIStream:
    """Relays an upstream SSE stream event by event (see :class:`~hearth.providers.base.UpstreamStream`)."""

    def __init__(self, resp: aiohttp.ClientResponse, max_event_bytes: int, drop_usage_chunk: bool) -> None:
        self._resp = resp
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
            chunk = await self._resp.content.readany()
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

    async def events(self) -> AsyncIterator[bytes]:
        try:
            while await self._fill():
                batch, self._pending = self._pending, []
                for payload in batch:
                    yield payload
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise UpstreamNetworkError(f"upstream stream failed: {type(exc).__name__}",
                                       timeout=isinstance(exc, asyncio.TimeoutError)) from exc

    async def aclose(self) -> None:
        self._resp.close()


class OpenAICompatProvider:
    def __init__(self, session: aiohttp.ClientSession, max_event_bytes: int = 1 << 20, *,
                 connect_timeout_s: float = 3.0) -> None:
        self._session = session
        self._max_event_bytes = max_event_bytes
        self._connect_s = connect_timeout_s  # its own short class: a host that never accepts fails over fast

    @staticmethod
    def _headers(ep: Endpoint) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "application/json"}
        if ep.api_key:
            h["Authorization"] = f"Bearer {ep.api_key}"
        return h

    async def _post(self, url: str, ep: Endpoint, payload: bytes, client_timeout: aiohttp.ClientTimeout,
                    headers: dict[str, str] | None = None) -> aiohttp.ClientResponse:
        try:
            resp = await self._session.post(url, data=payload, headers=headers or self._headers(ep),
                                            timeout=client_timeout)
        except TimeoutError as exc:
            raise UpstreamNetworkError("upstream timed out", timeout=True) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamNetworkError(f"upstream connection failed: {type(exc).__name__}") from exc
        if resp.status >= 400:
            try:
                raw = await resp.read()
            except (TimeoutError, aiohttp.ClientError):
                raw = b""
            finally:
                resp.release()
            raise UpstreamHTTPError(resp.status, upstream_error_body(resp.status, raw),
                                    parse_retry_after(resp.headers))
        return resp

    async def _json_call(self, path: str, ep: Endpoint, body: dict[str, Any], timeout_s: float) -> UpstreamReply:
        if ep.max_tokens_field != "max_tokens" and "max_tokens" in body:  # the endpoint reads the other name
            body = dict(body)
            body.setdefault(ep.max_tokens_field, body.pop("max_tokens"))
        payload = orjson.dumps({**body, "model": ep.upstream_model})
        timeout = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(self._connect_s, timeout_s))
        resp = await self._post(ep.base_url + path, ep, payload, timeout)
        try:
            raw = await resp.read()
        except TimeoutError as exc:
            raise UpstreamNetworkError("upstream timed out", timeout=True) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamNetworkError(f"upstream read failed: {type(exc).__name__}") from exc
        finally:
            resp.release()
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise UpstreamNetworkError("upstream sent a malformed response") from exc
        if not isinstance(obj, dict):
            raise UpstreamNetworkError("upstream sent a malformed response")
        return UpstreamReply(body=raw, usage=_usage_of(obj))

    async def chat(self, ep: Endpoint, body: dict[str, Any], timeout_s: float) -> UpstreamReply:
        return await self._json_call("/chat/completions", ep, body, timeout_s)

    async def embeddings(self, ep: Endpoint, body: dict[str, Any], timeout_s: float) -> UpstreamReply:
        return await self._json_call("/embeddings", ep, body, timeout_s)

    async def chat_stream(self, ep: Endpoint, body: dict[str, Any], first_byte_timeout_s: float,
                          idle_timeout_s: float) -> OpenAIStream:
        if ep.max_tokens_field != "max_tokens" and "max_tokens" in body:  # the endpoint reads the other name
            body = dict(body)
            body.setdefault(ep.max_tokens_field, body.pop("max_tokens"))
        opts = body.get("stream_options")
        wants_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        upstream_body = {**body, "model": ep.upstream_model,
                         "stream_options": {**(opts if isinstance(opts, dict) else {}), "include_usage": True}}
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(self._connect_s, first_byte_timeout_s),
                                        sock_read=idle_timeout_s)
        headers = {**self._headers(ep), "Accept": "text/event-stream"}
        try:
            async with asyncio.timeout(first_byte_timeout_s):
                resp = await self._post(ep.base_url + "/chat/completions", ep, orjson.dumps(upstream_body),
                                        timeout, headers)
                stream = OpenAIStream(resp, self._max_event_bytes, drop_usage_chunk=not wants_usage)
                try:
                    await stream.prime()
                except BaseException:
                    resp.close()
                    raise
        except TimeoutError as exc:
            raise UpstreamNetworkError("upstream timed out before the first event", timeout=True) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamNetworkError(f"upstream stream failed: {type(exc).__name__}") from exc
        return stream
