"""The provider contract: how the gateway talks to one upstream API family.

A provider receives an OpenAI-format request body (already validated, model already mapped) and
answers in OpenAI format, whatever the upstream speaks. Errors are raised as
:class:`~hearth.errors.UpstreamHTTPError` (the upstream answered with an error status, body in
OpenAI's error shape) or :class:`~hearth.errors.UpstreamNetworkError` (no usable answer), so the
gateway can classify them before any retry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Protocol

from hearth.registry.snapshot import Endpoint


@dataclass(slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int


@dataclass(slots=True)
class UpstreamReply:
    body: bytes  # the OpenAI-format JSON to send to the caller unchanged
    usage: Usage | None


class UpstreamStream(Protocol):
    """Chunks of an OpenAI ``chat.completion.chunk`` stream, as JSON payload bytes (no SSE framing).

    A provider returns a stream already *primed* (:meth:`prime` done): its first event has been
    received, so an upstream that fails before its first event can still fail over, and the call
    commits to the stream only once something is there to relay. Iteration of :meth:`events` ends
    after ``[DONE]``; an upstream that stops without it raises ``UpstreamNetworkError`` (as does any
    failed read, with the code the relay ends the stream with). ``usage`` is known once iteration
    has ended.
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

    def events(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class Provider(Protocol):
    async def chat(self, ep: Endpoint, body: dict[str, Any], timeout_s: float) -> UpstreamReply: ...

    async def chat_stream(self, ep: Endpoint, body: dict[str, Any], first_byte_timeout_s: float,
                          idle_timeout_s: float) -> UpstreamStream: ...

    async def embeddings(self, ep: Endpoint, body: dict[str, Any], timeout_s: float) -> UpstreamReply: ...
