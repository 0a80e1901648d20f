"""The gRPC door in a real ``hearth serve`` process (docs/grpc.md): started with the HTTP server when
``HEARTH_GRPC_PORT`` is set, and part of its graceful shutdown on SIGTERM — a health watch turns
``NOT_SERVING`` and ends at once, a stream still running when the stream grace is over ends with
``UNAVAILABLE`` ``service_shutting_down`` (logged so, settled), and the process exits within its bound."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import select

from hearth.shutdown import EXIT_TIMED_OUT
from hearth.store.db import create_engine
from hearth.store.tables import request_logs
from hearth.testing.server_thread import free_port
from hearth.v1 import ai_service_pb2 as pb
from hearth.v1.ai_service_pb2_grpc import AiServiceStub
from tests.e2e import processes
from tests.support import AUTH, MASTER_KEY, gateway_registry, write_config

STREAM_GRACE_S = 2.0
BOUND_S = 15.0


async def test_sigterm_ends_a_grpc_stream_after_the_grace_and_the_process_exits(tmp_path: Path, fake: Any) -> None:
    fake.set_defaults(chunks=400, chunk_delay_ms=50)  # 20 s: still streaming when the grace is over
    config = write_config(tmp_path / "hearth.yaml", gateway_registry([
        {"name": "a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up"}]))
    grpc_port = free_port()
    db = tmp_path / "hearth.db"
    server = processes.start(tmp_path, {
        "HEARTH_CONFIG": config, "HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{db}", "HEARTH_MASTER_KEY": MASTER_KEY,
        "HEARTH_GRPC_PORT": grpc_port, "HEARTH_SHUTDOWN_STREAM_GRACE_S": STREAM_GRACE_S,
        "HEARTH_SHUTDOWN_TIMEOUT_S": BOUND_S, "HEARTH_TASK_GRACE_S": STREAM_GRACE_S, "HEARTH_EMBEDDED_WORKER": "false",
        "HEARTH_LOG_LEVEL": "info"})
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            watch = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.SERVING
            stream = AiServiceStub(channel).StreamChat(
                pb.ChatRequest(model="m", messages=[pb.ChatMessage(role="user", content="hello")]),
                metadata=(("authorization", AUTH["Authorization"]), ("x-request-id", "grpc-sigterm-1")))
            assert (await stream.read()).delta
            signalled = time.monotonic()
            server.proc.send_signal(signal.SIGTERM)
            assert (await watch.read()).status == health_pb2.HealthCheckResponse.NOT_SERVING
            assert await watch.read() is grpc.aio.EOF
            watch_ended = time.monotonic() - signalled
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                while await stream.read() is not grpc.aio.EOF:
                    pass
            stream_ended = time.monotonic() - signalled
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert dict(ended.value.trailing_metadata())["hearth-error-code"] == "service_shutting_down"
        code = await asyncio.to_thread(server.proc.wait, BOUND_S + 5)
        exited = time.monotonic() - signalled
    finally:
        server.stop()
    log = server.output()
    assert code != EXIT_TIMED_OUT and code in (0, -signal.SIGTERM), (code, log[-3000:])
    assert watch_ended < 1.0  # at once, not when the grace is over
    assert STREAM_GRACE_S - 0.2 < stream_ended < STREAM_GRACE_S + 2
    assert exited < BOUND_S
    assert "grpc_listening" in log
    engine = create_engine(f"sqlite+aiosqlite:///{db}")
    try:
        async with engine.connect() as conn:
            row = (await conn.execute(select(request_logs.c.route, request_logs.c.status, request_logs.c.error_code)
                                      .where(request_logs.c.request_id == "grpc-sigterm-1"))).one()
    finally:
        await engine.dispose()
    assert tuple(row) == ("grpc", 503, "service_shutting_down")
