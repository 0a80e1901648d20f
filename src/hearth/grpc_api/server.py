"""The gRPC server of a Hearth process: started with the HTTP app when ``grpc_port`` is set, stopped with it.

It runs in the HTTP server's event loop, on the same runtime (gateway, state backend, writers), so a call
through either door is governed by the same counters. It serves ``hearth.v1.AiService``
(:mod:`hearth.grpc_api.ai_service`), the standard health-checking service tied to readiness
(:mod:`hearth.grpc_api.health`) and server reflection (``grpcurl``, Postman).

Shutdown follows the process's (:mod:`hearth.shutdown`): when it begins, the server stops accepting
calls at once (new calls get ``UNAVAILABLE``); calls in flight may finish until the stream grace is
over, when a stream still open ends with ``UNAVAILABLE`` ``service_shutting_down`` (its call settled and
logged); :meth:`GrpcDoor.stop` waits for that before the runtime closes its backends.

Requests are bounded like HTTP bodies (``max_request_bytes``). With several workers (``HEARTH_WORKERS``)
every worker listens on the port (``SO_REUSEPORT``: the kernel spreads connections); with one, the port
is not shared, so a second process on the same port fails at start instead of taking half the calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
from grpc_reflection.v1alpha import reflection

from hearth.grpc_api.ai_service import SERVICE, AiService
from hearth.grpc_api.health import HEALTH_SERVICE, ReadinessHealth
from hearth.observability.logging import get_logger
from hearth.runtime import Runtime

log = get_logger("hearth.grpc")
STOP_MARGIN_S = 3.0  # past the stream grace: for the streams ended then to send their status and be settled


class GrpcDoor:
    """One process's gRPC server (see the module docstring)."""

    def __init__(self, rt: Runtime, server: Any, port: int, service: AiService) -> None:
        self.rt = rt
        self.server = server
        self.port = port
        self.service = service
        self._stopping: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, rt: Runtime) -> GrpcDoor:
        s = rt.settings
        assert s.grpc_port is not None
        options = [("grpc.max_receive_message_length", s.max_request_bytes),
                   ("grpc.so_reuseport", 1 if s.workers > 1 else 0)]
        server = grpc.aio.server(options=options)
        service = AiService(rt)
        server.add_generic_rpc_handlers((service.handler(),
                                         ReadinessHealth(rt, frozenset({SERVICE})).handler()))
        reflection.enable_server_reflection((SERVICE, HEALTH_SERVICE, reflection.SERVICE_NAME), server)
        host = s.grpc_host or s.host
        address = f"[{host}]:{s.grpc_port}" if ":" in host else f"{host}:{s.grpc_port}"
        try:
            port = server.add_insecure_port(address)
        except RuntimeError as exc:  # grpc raises when it cannot bind
            raise SystemExit(f"grpc_port: cannot listen on {address} ({exc})") from exc
        await server.start()
        door = cls(rt, server, port, service)
        rt.shutdown.on_begin(door.begin_stop)
        log.info("grpc_listening", address=f"{host}:{port}")
        return door

    def begin_stop(self) -> None:
        """Stop accepting calls now; calls in flight have the stream grace (then they are ended)."""
        if self._stopping is None:
            grace = self.rt.shutdown.left(self.rt.shutdown.stream_grace_s) + STOP_MARGIN_S
            self._stopping = asyncio.get_running_loop().create_task(self.server.stop(grace))

    async def stop(self) -> None:
        """The process is stopping (the HTTP server is done): begin shutdown if nothing did, wait for the calls."""
        self.rt.shutdown.begin()  # idempotent; calls begin_stop through on_begin
        self.begin_stop()
        assert self._stopping is not None
        await self._stopping
        await self.service.closed()  # the streams' calls settled and logged before the runtime closes
