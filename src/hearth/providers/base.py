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

    The stream has already received its first event when a provider returns it, so errors before
    the first byte can still fail over. Iteration of :meth:`events` ends after ``[DONE]``; an upstream that stops
    without it raises ``UpstreamNetworkError``. ``usage`` is known once iteration has ended.
    """

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
