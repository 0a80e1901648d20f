"""What a gRPC call's metadata says: who calls (authenticated as on HTTP), its id, its own limits.

Authentication is the HTTP door's, by the same functions (:func:`hearth.auth.internal.identify_caller`,
:func:`hearth.auth.internal.check_signature`): metadata keys are HTTP header names, lower case, so
``authorization: Bearer <key>``, ``x-internal-token`` + ``x-hearth-caller`` and the signing headers
(``x-timestamp``, ``x-nonce``, ``x-signature``) mean what they mean on HTTP. A signature covers the request
as gRPC sends it over HTTP/2: method ``POST``, the path ``/hearth.v1.AiService/<Method>``, and the
serialized request message as the body. The nonce is not claimed here: it goes with the call's admission
(the gateway claims it atomically with the limits, as for ``/v1/chat/completions``).

The call's deadline is the sooner of the gRPC deadline and ``x-hearth-timeout-ms``; either only narrows
Hearth's own ``request_timeout_s`` (:meth:`hearth.gateway.service.Gateway._call`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hearth.api.call_limits import caller_max_attempts, caller_timeout_s
from hearth.auth.internal import PendingNonce, check_signature, identify_caller
from hearth.observability.request_id import valid_request_id
from hearth.registry.snapshot import Caller
from hearth.runtime import Runtime


@dataclass(slots=True, frozen=True)
class CallMetadata:
    """The call's text metadata (lower-case keys; the first of repeated keys) and its raw pairs."""

    headers: Mapping[str, str]
    raw: list[tuple[bytes, bytes]]
    request_id: str
    timeout_s: float | None
    max_attempts: int | None
    client_ip: str | None

    def value(self, name: str) -> str | None:
        value = self.headers.get(name)
        return value[:256] if value else None


def call_request_id(context: Any) -> str:
    """The call's request id: its ``x-request-id`` if Hearth keeps it (as on HTTP), else a fresh one."""
    sent = next((v for k, v in context.invocation_metadata() or () if k == "x-request-id" and isinstance(v, str)),
                None)
    return valid_request_id(sent)


def read_metadata(context: Any, request_id: str, *, trust_forwarded_for: bool) -> CallMetadata:
    """The metadata of the call ``context`` serves (binary ``-bin`` entries are not headers: skipped)."""
    headers: dict[str, str] = {}
    raw: list[tuple[bytes, bytes]] = []
    for key, value in context.invocation_metadata() or ():
        if isinstance(value, str):
            headers.setdefault(key, value)
            raw.append((key.encode("latin-1"), value.encode("latin-1", "replace")))
    timeout_s = caller_timeout_s(headers)  # x-hearth-timeout-ms (400 when malformed, as on HTTP)
    remaining = context.time_remaining()
    if remaining is not None:  # the gRPC deadline: what the client waits at most
        timeout_s = remaining if timeout_s is None else min(timeout_s, remaining)
    return CallMetadata(headers=headers, raw=raw, request_id=request_id,
                        timeout_s=max(timeout_s, 0.001) if timeout_s is not None else None,
                        max_attempts=caller_max_attempts(headers),
                        client_ip=_client_ip(context.peer(), headers, trust_forwarded_for))


def _client_ip(peer: str | None, headers: Mapping[str, str], trust_forwarded_for: bool) -> str | None:
    """``ipv4:10.0.0.7:51234`` / ``ipv6:[::1]:51234`` → the address (``x-forwarded-for`` when trusted)."""
    if trust_forwarded_for:
        forwarded = headers.get("x-forwarded-for")
        if forwarded:
            return forwarded.split(",", 1)[0].strip()[:64] or None
    if not peer:
        return None
    kind, _, rest = peer.partition(":")
    if kind == "ipv6":
        return rest.partition("]")[0].lstrip("[")[:64] or None
    if kind == "ipv4":
        return rest.rpartition(":")[0][:64] or None
    return None  # unix sockets and the like have no address


async def authenticate(rt: Runtime, metadata: CallMetadata, method_path: str,
                       body: bytes) -> tuple[Caller, PendingNonce | None]:
    """The caller and the nonce its admission claims (401/403 as :class:`~hearth.errors.HearthError`)."""
    caller = identify_caller(metadata.headers, rt.gateway.registry, rt.settings)
    scope = {"method": "POST", "raw_path": method_path.encode(), "query_string": b"", "headers": metadata.raw}
    pending = await check_signature(caller, scope, body, rt.settings, not_before=getattr(rt.state, "lost_at", None))
    return caller, pending
