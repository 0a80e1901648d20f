"""The provider contract: how the gateway talks to one upstream API family.

A provider receives an OpenAI-format request body (already validated, model already mapped) and
answers in OpenAI format, whatever the upstream speaks. Errors are raised as
:class:`~hearth.errors.UpstreamHTTPError` (the upstream answered with an error status, body in
OpenAI's error shape) or :class:`~hearth.errors.UpstreamNetworkError` (no usable answer), so the
gateway can classify them before any retry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from hearth.errors import HearthError
from hearth.registry.snapshot import Endpoint


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    images: int = 0  # images generated (priced per image: docs/images.md)


@dataclass(slots=True)
class UpstreamReply:
    body: bytes  # the OpenAI-format JSON to send to the caller unchanged
    usage: Usage | None
    completion_estimate: int = 0  # the reply's output estimated offline, charged when ``usage`` is None


RATELIMIT_PREFIX = "x-ratelimit-"


@dataclass(slots=True)
class HeaderExchange:
    """The headers that cross the gateway for one call, in both directions, per the endpoint's provider.

    ``client`` is the caller's request headers (looked up by lower-case name); the names in the
    provider's ``forward_headers`` (validated when the registry is applied: never credentials, cookies,
    hop-by-hop or ``x-hearth-*``) are sent upstream, under the provider's own headers, which win.
    ``relayed`` is what goes back to the caller: the ``x-ratelimit-*`` headers of the answer that
    served the call, when the provider has ``relay_ratelimit_headers``; each attempt starts it afresh,
    so a failover never shows the headers of an endpoint that did not serve the call.
    ``traceparent`` is the current attempt's W3C trace context, sent only when the operator turned on
    upstream propagation (``HEARTH_OTEL_PROPAGATE_UPSTREAM``; see :mod:`hearth.observability.tracing`)."""

    client: Mapping[str, str]
    relayed: dict[str, str] = field(default_factory=dict)
    traceparent: str | None = None

    def outgoing(self, ep: Endpoint, own: dict[str, str]) -> dict[str, str]:
        """The request headers of one attempt: the forwarded client headers under ``own``."""
        self.relayed = {}
        if self.traceparent is not None:
            own = {**own, "traceparent": self.traceparent}
        if not ep.forward_headers:
            return own
        client = self.client
        forwarded = {name: value for name in ep.forward_headers if (value := client.get(name)) is not None}
        return {**forwarded, **own} if forwarded else own

    def answered(self, ep: Endpoint, headers: Mapping[str, str]) -> None:
        """The upstream answered with a success status: keep what the caller should see of its headers."""
        if ep.relay_ratelimit_headers:
            self.relayed = {name.lower(): value for name, value in headers.items()
                            if name.lower().startswith(RATELIMIT_PREFIX)}


class UpstreamStream(Protocol):
    """Chunks of an OpenAI ``chat.completion.chunk`` stream, as JSON payload bytes (no SSE framing).

    A provider returns a stream already *primed* (:meth:`prime` done): its first event has been
    received, so an upstream that fails before its first event can still fail over, and the call
    commits to the stream only once something is there to relay. Iteration of :meth:`events` ends
    after ``[DONE]``; an upstream that stops without it raises ``UpstreamNetworkError`` (as does any
    failed read, with the code the relay ends the stream with). ``usage`` is known once iteration
    has ended.

    :meth:`batches` yields the events that arrived together (one read from the upstream), so the
    relay forwards them in one write: a 20-chunk answer read at once was 22 ASGI sends, each costing
    more than relaying its event (measured: ~8 % of a stream's CPU).
    """

    async def prime(self) -> None:
        """Read until the first event is available to :meth:`events` (or raise why there is none).

        Called once, before the stream is handed to the gateway, under the time-to-first-token
        timeout; a stream that needs no network (simulated) has nothing to do."""
        ...

    @property
    def usage(self) -> Usage | None: ...

    @property
    def completion_estimate(self) -> int:
        """Offline estimate of the streamed text, for upstreams that report no usage."""
        ...

    def batches(self) -> AsyncIterator[list[bytes]]:
        """Lists of events, in order, each list non-empty."""
        ...

    async def aclose(self) -> None: ...


class Provider(Protocol):
    """``headers`` (optional) carries the call's :class:`HeaderExchange`; providers without HTTP ignore it."""

    async def chat(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                   headers: HeaderExchange | None = None) -> UpstreamReply: ...

    async def chat_stream(self, ep: Endpoint, body: dict[str, Any], first_byte_timeout_s: float,
                          idle_timeout_s: float, *, headers: HeaderExchange | None = None) -> UpstreamStream: ...

    async def embeddings(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                         headers: HeaderExchange | None = None) -> UpstreamReply: ...


class ImageProvider(Protocol):
    """A provider that generates images (``images`` capability; docs/images.md).

    ``body`` is OpenAI's ``/v1/images/generations`` request (checked, ``response_format`` already
    ``b64_json``: Hearth keeps the bytes itself); the reply is OpenAI's images response, and its
    :attr:`Usage.images` counts the images returned (what the call is charged for)."""

    async def images(self, ep: Endpoint, body: dict[str, Any], timeout_s: float, *,
                     headers: HeaderExchange | None = None) -> UpstreamReply: ...


def image_provider(provider: object, ep: Endpoint) -> ImageProvider:
    """``provider`` as an :class:`ImageProvider`; 400 ``unsupported_feature`` if its kind draws no images
    (an endpoint given the ``images`` capability on such a provider)."""
    if not callable(getattr(provider, "images", None)):
        raise HearthError("unsupported_feature", f"Endpoint `{ep.name}` has the `images` capability, but its "
                          f"`{ep.kind}` provider cannot generate images.", param="model",
                          details={"capabilities": ["images"]})
    return provider  # type: ignore[return-value]


class NativeCall(Protocol):
    """A door's request in its own wire format, for the endpoints that speak that format natively.

    The gateway core plans, admits and routes a call on its chat body; per attempt, an endpoint that
    :meth:`serves` this format gets the door's original request instead (passed through, the model name
    mapped), so nothing of it is lost in translation. The answer is then in the door's format too: the
    door knows which kind it got from the endpoint that served the call. ``required``: the request has
    features only such endpoints can serve, so the call is routed to them alone."""

    @property
    def required(self) -> bool: ...

    def serves(self, ep: Endpoint) -> bool: ...

    async def chat(self, ep: Endpoint, timeout_s: float, *, headers: HeaderExchange | None = None) -> UpstreamReply:
        ...

    async def chat_stream(self, ep: Endpoint, first_byte_timeout_s: float, idle_timeout_s: float, *,
                          headers: HeaderExchange | None = None) -> UpstreamStream: ...
