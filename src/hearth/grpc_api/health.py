"""``grpc.health.v1.Health`` answered from Hearth's readiness (:mod:`hearth.readiness`), not from a flag.

``SERVING`` when ``/readyz`` would answer 200 (``ready`` or ``degraded``), ``NOT_SERVING`` when it would
answer 503 (``not_ready``: no state backend or no enabled endpoint; ``shutting_down``). The overall server
(service ``""``) and ``hearth.v1.AiService`` have the same status; any other name is ``NOT_FOUND`` (Check)
or ``SERVICE_UNKNOWN`` (Watch), as the health-checking protocol says.

``Watch`` sends the status, then again whenever it changes (looked at every ``watch_interval_s``); a
watch ends, with ``NOT_SERVING``, as soon as shutdown begins, so it never holds up the server's stop.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import grpc
from grpc_health.v1 import health_pb2

from hearth.readiness import readiness
from hearth.runtime import Runtime

HEALTH_SERVICE = "grpc.health.v1.Health"
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class ReadinessHealth:
    def __init__(self, rt: Runtime, services: frozenset[str], *, watch_interval_s: float = 2.0) -> None:
        self.rt = rt
        self.services = services | {""}
        self.watch_interval_s = watch_interval_s

    def handler(self) -> grpc.GenericRpcHandler:
        check = grpc.unary_unary_rpc_method_handler(
            self.check, request_deserializer=health_pb2.HealthCheckRequest.FromString,
            response_serializer=health_pb2.HealthCheckResponse.SerializeToString)
        watch = grpc.unary_stream_rpc_method_handler(
            self.watch, request_deserializer=health_pb2.HealthCheckRequest.FromString,
            response_serializer=health_pb2.HealthCheckResponse.SerializeToString)
        return grpc.method_handlers_generic_handler(HEALTH_SERVICE, {"Check": check, "Watch": watch})

    async def status(self) -> Any:
        ready = await readiness(self.rt)
        return SERVING if ready.http_status == 200 else NOT_SERVING

    async def check(self, request: Any, context: Any) -> Any:
        if request.service not in self.services:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=await self.status())

    async def watch(self, request: Any, context: Any) -> None:
        if request.service not in self.services:
            await context.write(health_pb2.HealthCheckResponse(status=SERVICE_UNKNOWN))
            return
        ended = asyncio.Event()
        streams = self.rt.shutdown.streams
        streams.add(ended.set, answer=False)  # a follower: ended as soon as shutdown begins
        try:
            last = None
            while not ended.is_set():
                status = await self.status()
                if status != last:
                    await context.write(health_pb2.HealthCheckResponse(status=status))
                    last = status
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ended.wait(), self.watch_interval_s)
            if last != NOT_SERVING:
                await context.write(health_pb2.HealthCheckResponse(status=NOT_SERVING))
        finally:
            streams.discard(ended.set)
