"""The HTTP side of every HTTP provider: one POST, one stream open, one error mapping, Retry-After.

The OpenAI-compatible and Anthropic providers differ in their wire formats (paths, auth headers,
bodies, error shapes, stream events) and in nothing else; everything they share lives here, so both
honour the same timeout classes and raise the same errors:

* **connect** — ``connect_timeout_s`` (its own short class): a host that never accepts fails over
  at once instead of after the endpoint's whole timeout;
* **non-stream** — the whole exchange within the timeout the gateway passes (the endpoint's
  ``timeout_s``, narrowed by the call's deadline);
* **stream, first event** — the time-to-first-token timeout the gateway passes bounds everything up
  to the first event (connect, headers, first bytes); the stream is *primed* (its first event read,
  :meth:`~hearth.providers.base.UpstreamStream.prime`) before it is returned, so an upstream that
  fails before its first event can still fail over;
* **stream, idle** — armed only once the first event is in: a read that finds nothing buffered
  waits at most ``idle_timeout_s`` for the upstream to send more.

Errors: an error status becomes :class:`~hearth.errors.UpstreamHTTPError` (the provider's own error
body translated to OpenAI's shape by ``error_body``, and the upstream's Retry-After); no usable
answer becomes :class:`~hearth.errors.UpstreamNetworkError` (``timeout=True`` for timeouts).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import Any, Protocol, TypeVar

from hearth.errors import UpstreamHTTPError, UpstreamNetworkError, UpstreamOutcomeUnknown
from hearth.providers.base import HeaderExchange
from hearth.providers.http1_client import ConnectFailed, Http1Error, Http1Pool, Http1Response
from hearth.registry.snapshot import Endpoint

ErrorBody = Callable[[int, bytes], dict[str, Any]]  # (status, raw body) → an OpenAI-shaped error body
Answered = Callable[[Mapping[str, str]], None]  # told a successful answer's headers


def exchange_headers(ep: Endpoint, own: dict[str, str],
                     exchange: HeaderExchange | None) -> tuple[dict[str, str], Answered | None]:
    """One attempt's request headers (``own`` plus the forwarded client headers) and what to tell of
    the answer's headers (None when the provider relays none): see :class:`HeaderExchange`."""
    if exchange is None:
        return own, None
    headers = exchange.outgoing(ep, own)
    if not ep.relay_ratelimit_headers:
        return headers, None
    return headers, lambda answer_headers: exchange.answered(ep, answer_headers)

_DELTA_SECONDS = re.compile(r"\d+(?:\.\d+)?")
MAX_RETRY_AFTER_S = 86_400.0  # a day: a larger (or absurd) value is capped, not trusted verbatim


def parse_retry_after(headers: Mapping[str, str], *, now: float | None = None) -> float | None:
    """How long an upstream's 429/503 asks us to wait, in seconds; None if it does not say.

    ``retry-after-ms`` (OpenAI's, exact) is preferred when present and valid; else ``Retry-After``
    as delta-seconds or an HTTP-date (RFC 9110; a date in the past means 0). ``headers`` is looked
    up case-insensitively when it is a multidict (as answers' headers are); ``now`` (epoch seconds) is for tests."""
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


class _WentIdle(Exception):
    """Set on the body when the idle timer fires: it wakes the pending read."""


class UpstreamBody:
    """The streamed body of one upstream response, read chunk by chunk under the stream's timeouts.

    Until :meth:`arm_idle_timeout` (called once the stream is primed) a read waits as long as the
    first-event timeout around it allows; after it, a read that finds nothing buffered waits at most
    ``idle_timeout_s`` for the upstream to send more. A failed read is an ``UpstreamNetworkError``:
    the idle timeout with the stream-idle code, a cut connection "interrupted".

    The idle timer is one ``call_later`` handle per wait (about a microsecond), not an
    ``asyncio.timeout`` context (a dozen microseconds, paid per event on the hot path)."""

    __slots__ = ("_idle_s", "_idle_s_armed", "_loop", "_resp")

    def __init__(self, resp: Http1Response, idle_timeout_s: float) -> None:
        self._resp = resp
        self._idle_s = idle_timeout_s
        self._idle_s_armed: float | None = None
        self._loop = asyncio.get_running_loop()

    def arm_idle_timeout(self) -> None:
        self._idle_s_armed = self._idle_s

    async def read(self) -> bytes:
        """The next bytes (everything buffered, or the next arrival); ``b""`` at the end of the body."""
        resp = self._resp
        try:
            if self._idle_s_armed is None:
                return await resp.readany()
            chunk = resp.read_nowait()  # already here: no timer to arm
            if chunk or resp.at_eof():
                return chunk
            timer = self._loop.call_later(self._idle_s_armed, resp.fail, _WentIdle())
            try:
                return await resp.readany()
            finally:
                timer.cancel()
        except _WentIdle as exc:
            raise UpstreamNetworkError("upstream stream failed: no data within the idle timeout",
                                       timeout=True) from exc
        except TimeoutError as exc:
            raise UpstreamNetworkError(f"upstream stream failed: {type(exc).__name__}", timeout=True) from exc
        except Http1Error as exc:
            raise UpstreamNetworkError(f"upstream stream failed: {exc}") from exc

    def close(self) -> None:
        self._resp.close()


class PrimableStream(Protocol):
    async def prime(self) -> None: ...


S = TypeVar("S", bound=PrimableStream)


class UpstreamHTTP:
    """POSTs to upstreams over the process's one pool of keep-alive connections (see :mod:`.http1_client`)."""

    def __init__(self, pool: Http1Pool, *, connect_timeout_s: float = 3.0) -> None:
        self._pool = pool
        self._connect_s = connect_timeout_s

    async def _send(self, url: str, payload: bytes, headers: Mapping[str, str], connect_s: float) -> Http1Response:
        try:
            return await self._pool.post(url, payload, headers, connect_timeout_s=connect_s)
        except ConnectFailed as exc:
            if exc.timeout:
                raise UpstreamNetworkError("upstream timed out (connect)", timeout=True) from exc
            raise UpstreamNetworkError(f"upstream connection failed: {exc}") from exc

    @staticmethod
    async def _answer(resp: Http1Response, error_body: ErrorBody, answered: Answered | None) -> None:
        """Wait for ``resp``'s status: an error status raises (its body read, the response closed);
        a success tells its headers to ``answered``."""
        try:
            await resp.wait_headers()
            if resp.status >= 400:
                try:
                    raw = await resp.read()
                except (TimeoutError, Http1Error):
                    raw = b""
                raise UpstreamHTTPError(resp.status, error_body(resp.status, raw), parse_retry_after(resp.headers))
        except BaseException:
            resp.close()
            raise
        if answered is not None:
            answered(resp.headers)

    async def call(self, url: str, payload: bytes, headers: Mapping[str, str], *, timeout_s: float,
                   error_body: ErrorBody, answered: Answered | None = None) -> bytes:
        """A non-stream exchange: the whole answer's body within ``timeout_s`` (connect within its own class)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        resp = await self._send(url, payload, headers, min(self._connect_s, timeout_s))
        timer = loop.call_at(deadline, resp.fail, TimeoutError())
        try:
            await self._answer(resp, error_body, answered)
            return await resp.read()
        except TimeoutError as exc:  # the request was sent: the upstream may be working on it
            raise UpstreamOutcomeUnknown("upstream timed out", timeout=True) from exc
        except Http1Error as exc:
            raise UpstreamOutcomeUnknown(f"upstream read failed: {exc}") from exc
        finally:
            timer.cancel()
            resp.close()

    async def open_stream(self, url: str, payload: bytes, headers: Mapping[str, str], *,
                          first_event_timeout_s: float, idle_timeout_s: float, error_body: ErrorBody,
                          stream: Callable[[UpstreamBody], S], answered: Answered | None = None) -> S:
        """POST, wrap the body in ``stream`` and prime it, all within ``first_event_timeout_s``.

        Until the first event the idle timeout plays no part (an upstream slow to its first token is
        not idle); it is armed once the stream is primed. On any failure the response is closed."""
        try:
            async with asyncio.timeout(first_event_timeout_s):
                resp = await self._send(url, payload, headers, min(self._connect_s, first_event_timeout_s))
                body = UpstreamBody(resp, idle_timeout_s)
                try:
                    await self._answer(resp, error_body, answered)
                    opened = stream(body)
                    await opened.prime()
                except BaseException:
                    body.close()
                    raise
        except TimeoutError as exc:
            raise UpstreamNetworkError("upstream timed out before the first event", timeout=True) from exc
        except Http1Error as exc:
            raise UpstreamNetworkError(f"upstream stream failed: {exc}") from exc
        body.arm_idle_timeout()
        return opened


def stream_timeouts(ep: Endpoint, first_event_timeout_s: float, idle_timeout_s: float) -> tuple[float, float]:
    """The first-event and idle timeouts of a stream to ``ep``: its own settings where it has them.

    ``first_event_timeout_s`` is what the gateway allows (the endpoint's ``timeout_s`` narrowed by
    the call's deadline); the endpoint's ``first_token_timeout_s`` can only narrow it further.
    ``idle_timeout_s`` is the default (``HEARTH_STREAM_IDLE_TIMEOUT_S``), replaced by the endpoint's
    ``stream_idle_timeout_s``."""
    first = first_event_timeout_s if ep.first_token_timeout_s is None else min(first_event_timeout_s,
                                                                                ep.first_token_timeout_s)
    return first, (idle_timeout_s if ep.stream_idle_timeout_s is None else ep.stream_idle_timeout_s)
