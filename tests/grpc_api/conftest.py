"""The gRPC door's fixtures: a Hearth server with its gRPC port open, and a client stub generated from the
.proto (``hearth.v1.ai_service_pb2_grpc``, what ``make proto`` generates for any Python caller)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest

from hearth.testing.server_thread import HearthServerThread
from hearth.v1.ai_service_pb2_grpc import AiServiceStub


class GrpcHearth:
    """A running Hearth (HTTP and gRPC) and a channel to its gRPC port."""

    def __init__(self, server: HearthServerThread) -> None:
        self.server = server
        self.port: int = server.app.state.grpc.port
        self.channel = grpc.aio.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = AiServiceStub(self.channel)


@pytest.fixture
async def grpc_hearth(hearth_server: Callable[..., HearthServerThread]) -> AsyncIterator[Callable[..., GrpcHearth]]:
    """``grpc_hearth(registry, **settings)``: Hearth with ``grpc_port`` open (a free port), and a client."""
    opened: list[GrpcHearth] = []

    def start(registry: dict[str, Any], **settings: Any) -> GrpcHearth:
        client = GrpcHearth(hearth_server(registry, grpc_port=0, **settings))
        opened.append(client)
        return client

    yield start
    for client in opened:
        await client.channel.close()
