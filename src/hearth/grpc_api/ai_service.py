"""``hearth.v1.AiService``: the gRPC door onto the same gateway core and capabilities as the HTTP API.

Each method parses its request, authenticates from the metadata (:mod:`hearth.grpc_api.call_metadata`),
translates to what the HTTP door would hand the core, and calls the **same** functions: Chat and
StreamChat call :class:`~hearth.gateway.service.Gateway` (``complete`` / ``open_stream``) with a
:class:`~hearth.gateway.context.CallContext` whose route is ``grpc`` — admission, budgets, scenes,
routing and failover, the request log and usage events all hold as on ``/v1/chat/completions``; the
capability methods build their call with :func:`~hearth.capabilities.requests.call_from_body` from the
HTTP bodies' own models and run :class:`~hearth.capabilities.service.Capabilities` (their rows say
``route = capability``, as the HTTP ones do). Errors end the call with a gRPC status and the stable code
in the trailers (:mod:`hearth.grpc_api.status_codes`).

A stream's lifetime is the HTTP relay's: the relay (:class:`~hearth.gateway.relay.RelayStream`) owns the
call, and is always closed — when the stream ends, fails, when the client cancels (grpc cancels this
handler's task: the upstream request is closed and the leases released at once; the log says 499
``client_disconnected``), when the client stops reading for ``stream_send_timeout_s`` (499
``client_too_slow``), and when the shutdown's stream grace is over (``UNAVAILABLE``
``service_shutting_down``, logged 503).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, NoReturn, TypeVar

import grpc
import orjson
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import DecodeError, Message
from google.protobuf.struct_pb2 import Struct

from hearth.capabilities import requests as bodies
from hearth.capabilities.chat import ChatOptions, chat_key, chat_once
from hearth.capabilities.requests import CapabilityRequest, call_from_body
from hearth.capabilities.service import Capabilities, CapabilityCall, CapabilityResult
from hearth.capabilities.sources import read_input
from hearth.errors import HearthError, UpstreamHTTPError
from hearth.gateway.context import CallContext
from hearth.gateway.model_name import shown_model
from hearth.gateway.relay import RelayStream
from hearth.grpc_api.call_metadata import CallMetadata, authenticate, call_request_id, read_metadata
from hearth.grpc_api.chat_format import ChunkReader, StreamError, chat_body, chat_response
from hearth.grpc_api.status_codes import (
    GrpcFailure,
    client_too_slow,
    from_hearth_error,
    from_stream_error,
    from_upstream_refusal,
)
from hearth.observability.logging import get_logger
from hearth.providers.base import HeaderExchange
from hearth.registry.snapshot import Caller
from hearth.runtime import Runtime, source_limits
from hearth.v1 import ai_service_pb2 as pb
from hearth.validation import parse_model

log = get_logger("hearth.grpc")

SERVICE = "hearth.v1.AiService"
ROUTE = "grpc"
M = TypeVar("M", bound=Message)
T = TypeVar("T")
#: The capability methods: their request message, the HTTP body model it is checked as, the capability.
CAPABILITIES: dict[str, tuple[type[Message], type[CapabilityRequest], str]] = {
    "Summarize": (pb.SummarizeRequest, bodies.SummarizeRequest, "summarize"),
    "Extract": (pb.ExtractRequest, bodies.ExtractRequest, "extract"),
    "ExtractBill": (pb.ExtractBillRequest, bodies.BillRequest, "extract_bill"),
    "Generate": (pb.GenerateRequest, bodies.GenerateRequest, "generate"),
    "RoleChat": (pb.RoleChatRequest, bodies.ChatRequest, "chat"),
}
_SHUTDOWN_MESSAGE = ("This Hearth process is shutting down and ended the stream before the answer was complete; "
                     "retry the call (another replica answers).")


class _Authenticated:
    """One call after authentication: its metadata, caller and the nonce its admission claims."""

    __slots__ = ("caller", "metadata", "nonce")

    def __init__(self, metadata: CallMetadata, caller: Caller, nonce: Any) -> None:
        self.metadata = metadata
        self.caller = caller
        self.nonce = nonce


class AiService:
    """The methods of ``hearth.v1.AiService`` on one runtime (see the module docstring)."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._closing: set[asyncio.Task[None]] = set()

    async def closed(self) -> None:
        """Every stream's relay is closed (the server's stop awaits this before the runtime closes).

        Finished tasks are skipped, not awaited: one may still be in the set while its done callback waits in
        the loop, and a ``gather`` of finished tasks completes without yielding — looping on it starved the
        loop, so that callback never ran (a shutdown then hung until its watchdog, exit 70)."""
        while pending := [task for task in self._closing if not task.done()]:
            await asyncio.gather(*pending, return_exceptions=True)

    def handler(self) -> grpc.GenericRpcHandler:
        """The method table (requests arrive as bytes: a signature covers the bytes as sent)."""
        unary: dict[str, Callable[[bytes, Any], Awaitable[Message]]] = {"Chat": self.chat}
        for method, (message, model, capability) in CAPABILITIES.items():
            unary[method] = functools.partial(self._capability, method=method, message=message, model=model,
                                              capability=capability)
        handlers = {name: grpc.unary_unary_rpc_method_handler(fn, response_serializer=_serialize)
                    for name, fn in unary.items()}
        handlers["StreamChat"] = grpc.unary_stream_rpc_method_handler(self.stream_chat, response_serializer=_serialize)
        return grpc.method_handlers_generic_handler(SERVICE, handlers)

    # ---- the model gateway ------------------------------------------------------------------------------
    async def chat(self, raw: bytes, context: Any) -> pb.ChatResponse:
        async def run(call: _Authenticated) -> pb.ChatResponse:
            request = _parse(pb.ChatRequest, raw)
            ctx = self._context(call, request)
            gw = self.rt.gateway
            reply = await gw.complete(ctx, chat_body(request, stream=False))
            response = chat_response(reply.body, call.metadata.request_id)
            public = shown_model(gw.registry, ctx.model, ctx.endpoint)
            if public is not None:
                response.model = public
            return response

        return await self._answered(context, "Chat", raw, run)

    async def stream_chat(self, raw: bytes, context: Any) -> None:
        async def open_stream(call: _Authenticated) -> tuple[str, RelayStream]:
            request = _parse(pb.ChatRequest, raw)
            relay = await self.rt.gateway.open_stream(self._context(call, request), chat_body(request, stream=True))
            return call.metadata.request_id, relay

        request_id, relay = await self._answered(context, "StreamChat", raw, open_stream)
        failure = await self._relay(relay, context, request_id)
        if failure is not None:
            await _abort(context, failure)

    async def _relay(self, relay: RelayStream, context: Any, request_id: str) -> GrpcFailure | None:
        """Relay the stream as :class:`ChatChunk` messages; the relay is closed on every way out."""
        task = asyncio.current_task()
        assert task is not None
        ending = False

        def end_for_shutdown() -> None:  # the stream grace is over (hearth.shutdown)
            nonlocal ending
            ending = True
            task.cancel()

        streams = self.rt.shutdown.streams
        streams.add(end_for_shutdown, answer=True)
        send_timeout = self.rt.settings.stream_send_timeout_s
        reader = ChunkReader(request_id)
        frames = relay.frames()
        try:
            async for piece in frames:
                for chunk in reader.read(piece):
                    try:
                        async with asyncio.timeout(send_timeout):  # the client stopped reading
                            await context.write(chunk)
                    except TimeoutError:
                        relay.client_left("client_too_slow")
                        return client_too_slow(send_timeout, request_id)
            return None
        except StreamError as exc:
            if exc.pending is not None:
                await context.write(exc.pending)
            return from_stream_error(exc.code, exc.message, request_id)
        except asyncio.CancelledError:
            if not ending:
                raise  # the client cancelled (or its deadline passed): the relay logs 499 client_disconnected
            task.uncancel()
            relay.shutdown_frame()  # the log says 503 service_shutting_down
            return from_stream_error("service_shutting_down", _SHUTDOWN_MESSAGE, request_id)
        finally:
            streams.discard(end_for_shutdown)
            # Closed once the handler has returned, as the HTTP door closes after the body's end: the client
            # has its status before the call is settled and logged (on a stream's own task, never cancelled).
            closing = asyncio.get_running_loop().create_task(_close(relay, frames))
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    def _context(self, call: _Authenticated, request: pb.ChatRequest) -> CallContext:
        md = call.metadata
        return CallContext(request_id=md.request_id, caller=call.caller, route=ROUTE,
                           end_user=request.user[:256] or md.value("x-hearth-user"),
                           tenant=request.tenant[:256] or md.value("x-hearth-tenant"), client_ip=md.client_ip,
                           requested_scene=request.scene or md.value("x-hearth-scene"), pending_nonce=call.nonce,
                           timeout_s=md.timeout_s, max_attempts=md.max_attempts, headers=HeaderExchange(md.headers))

    # ---- capabilities -----------------------------------------------------------------------------------
    async def _capability(self, raw: bytes, context: Any, *, method: str, message: type[Message],
                          model: type[CapabilityRequest], capability: str) -> pb.CapabilityResponse:
        """As ``POST /api/v1/ai/<capability>``: the body's model checks the fields, the same service runs it."""
        rt = self.rt

        async def run(call: _Authenticated) -> pb.CapabilityResponse:
            md = call.metadata
            fields = _json_numbers(MessageToDict(_parse(message, raw), preserving_proto_field_name=True))
            body = _validated(model, fields)
            capability_call = call_from_body(
                capability, body, caller=call.caller, request_id=md.request_id, snapshot=rt.prompts.snapshot,
                tenant=md.value("x-hearth-tenant"), user=md.value("x-hearth-user"), scene=md.value("x-hearth-scene"),
                client_ip=md.client_ip, nonce=call.nonce, timeout_s=md.timeout_s)
            result = await self._run_capability(capability_call, body, fields)
            return capability_response(result.data, md.request_id)

        return await self._answered(context, method, raw, run)

    async def _run_capability(self, call: CapabilityCall, body: CapabilityRequest,
                              fields: dict[str, Any]) -> CapabilityResult:
        rt, s = self.rt, self.rt.settings
        service = Capabilities(rt.gateway, offline_fallback=s.offline_fallback)
        if isinstance(body, bodies.ChatRequest):
            options = ChatOptions(engine=rt.engine, runs=rt.chat_runs, heartbeat_s=s.sse_heartbeat_s,
                                  keep_s=s.chat_keep_s, wait_s=s.request_timeout_s + 30)
            return await chat_once(service, call, rt.prompts.snapshot, key=chat_key(call, body.request_id),
                                   options=options)
        if call.capability != "generate":  # summarize and extractions read their input first
            source = await read_input(fields, source_limits(s), session=rt.session)
            call.text, call.source = source.text, source.source
        return await service.run(call, rt.prompts.snapshot)

    # ---- plumbing -------------------------------------------------------------------------------------
    async def _answered(self, context: Any, method: str, raw: bytes,
                        run: Callable[[_Authenticated], Awaitable[T]]) -> T:
        """``run`` for the authenticated call; any error ends the call with its gRPC status (raises)."""
        request_id = call_request_id(context)
        try:
            md = read_metadata(context, request_id, trust_forwarded_for=self.rt.settings.trust_forwarded_for)
            caller, nonce = await authenticate(self.rt, md, f"/{SERVICE}/{method}", raw)
            result = await run(_Authenticated(md, caller, nonce))
        except HearthError as exc:
            await _abort(context, from_hearth_error(exc, request_id))
        except UpstreamHTTPError as exc:
            await _abort(context, from_upstream_refusal(exc, request_id))
        except Exception as exc:  # a bug: logged, and an INTERNAL status with the stable code
            log.error("grpc_unhandled_error", method=method, error=type(exc).__name__, exc_info=exc)
            await _abort(context, from_hearth_error(HearthError("internal_error"), request_id))
        context.set_trailing_metadata((("x-request-id", request_id),))
        return result


async def _close(relay: RelayStream, frames: object) -> None:
    """Close a stream's relay: upstream closed, leases released, budgets settled, the request log written."""
    try:
        if isinstance(frames, AsyncGenerator):  # ended early: its deadline timer goes now, not at GC
            with contextlib.suppress(Exception):
                await frames.aclose()
        await relay.close()
    except Exception as exc:  # logged: nobody awaits this task's result
        log.error("grpc_stream_close_failed", error=type(exc).__name__, exc_info=exc)


def capability_response(data: dict[str, Any], request_id: str) -> pb.CapabilityResponse:
    """The HTTP envelope's ``data`` (JSON-ready), whole and with its common parts typed."""
    struct = Struct()
    struct.update(orjson.loads(orjson.dumps(data)))
    message = data.get("message")
    text = data.get("summary") or data.get("text") or (message.get("content") if isinstance(message, dict) else None)
    raw_usage = data.get("usage")
    usage: dict[str, Any] = raw_usage if isinstance(raw_usage, dict) else {}
    return pb.CapabilityResponse(
        data=struct, text=text if isinstance(text, str) else "", model=str(data.get("model") or ""),
        usage=pb.Usage(prompt_tokens=int(usage.get("prompt_tokens") or 0),
                    completion_tokens=int(usage.get("completion_tokens") or 0),
                    total_tokens=int(usage.get("total_tokens") or 0)),
        degraded=bool(data.get("degraded")), request_id=request_id)


def _parse(message: type[M], raw: bytes) -> M:
    try:
        parsed: M = message.FromString(raw)
        return parsed
    except DecodeError as exc:
        raise HearthError("invalid_request", f"The request is not a valid {message.DESCRIPTOR.full_name}.") from exc


def _validated(model: type[CapabilityRequest], fields: dict[str, Any]) -> CapabilityRequest:
    return parse_model(model, fields, "request")


def _json_numbers(value: Any) -> Any:
    """``google.protobuf.Struct`` holds every number as a double: ``3`` is ``3.0`` in it. Integral values go
    back to ints, as the same JSON read by the HTTP door would give them (prompt variables, schemas)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _json_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_numbers(v) for v in value]
    return value


def _serialize(message: Message) -> bytes:
    serialized: bytes = message.SerializeToString()
    return serialized


async def _abort(context: Any, failure: GrpcFailure) -> NoReturn:
    """End the call with ``failure`` (``context.abort`` raises)."""
    await context.abort(failure.status, failure.message, trailing_metadata=failure.trailers)
    raise AssertionError("context.abort returned")
