"""The gRPC server around AiService: health checking tied to readiness, reflection, the committed generated
code matching the .proto, the method table matching the service, and the status table in docs/grpc.md."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from hearth.grpc_api.ai_service import CAPABILITIES, SERVICE
from hearth.grpc_api.status_codes import BY_STATUS, grpc_status
from hearth.v1 import ai_service_pb2 as pb
from tests.support import REPO_ROOT, gateway_registry

GENERATED = ("ai_service_pb2.py", "ai_service_pb2.pyi", "ai_service_pb2_grpc.py")


def _registry(fake: Any, *, enabled: bool = True) -> dict[str, Any]:
    return gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                              "upstream_model": "up", "enabled": enabled}])


async def test_health_is_serving_when_hearth_is_ready(fake, grpc_hearth):
    door = grpc_hearth(_registry(fake))
    health = health_pb2_grpc.HealthStub(door.channel)
    for service in ("", SERVICE):
        answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
    try:
        await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
        raise AssertionError("an unknown service must be NOT_FOUND")
    except grpc.aio.AioRpcError as exc:
        assert exc.code() == grpc.StatusCode.NOT_FOUND


async def test_health_is_not_serving_without_an_enabled_endpoint(fake, grpc_hearth, http):
    door = grpc_hearth(_registry(fake, enabled=False))
    readyz = await http.get(door.server.base_url + "/readyz")
    answer = await health_pb2_grpc.HealthStub(door.channel).Check(health_pb2.HealthCheckRequest())
    assert readyz.status_code == 503 and answer.status == health_pb2.HealthCheckResponse.NOT_SERVING


async def test_a_health_watch_ends_not_serving_when_shutdown_begins(fake, grpc_hearth):
    door = grpc_hearth(_registry(fake))
    watch = health_pb2_grpc.HealthStub(door.channel).Watch(health_pb2.HealthCheckRequest(service=SERVICE))
    statuses = [(await watch.read()).status]
    door.server.call(_begin(door.server.runtime))
    while (answer := await watch.read()) is not grpc.aio.EOF:
        statuses.append(answer.status)
    assert statuses == [health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING]
    assert await watch.code() == grpc.StatusCode.OK


async def test_reflection_lists_the_services(fake, grpc_hearth):
    door = grpc_hearth(_registry(fake))
    stub = reflection_pb2_grpc.ServerReflectionStub(door.channel)
    answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
    names = {s.name async for answer in answers for s in answer.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health"} <= names


def test_the_method_table_serves_every_method_of_the_service() -> None:
    declared = {m.name for m in pb.DESCRIPTOR.services_by_name["AiService"].methods}
    assert declared == {"Chat", "StreamChat", *CAPABILITIES}
    for name, (message, _, _) in CAPABILITIES.items():
        assert pb.DESCRIPTOR.services_by_name["AiService"].methods_by_name[name].input_type.name == \
            message.DESCRIPTOR.name


def test_the_committed_generated_code_is_what_make_proto_generates(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{REPO_ROOT / 'proto'}",
                    f"--python_out={tmp_path}", f"--pyi_out={tmp_path}", f"--grpc_python_out={tmp_path}",
                    str(REPO_ROOT / "proto/hearth/v1/ai_service.proto")], check=True)
    committed = REPO_ROOT / "src/hearth/v1"
    for name in GENERATED:
        assert (tmp_path / "hearth/v1" / name).read_bytes() == (committed / name).read_bytes(), \
            f"src/hearth/v1/{name} is stale: run `make proto`"
    shipped = (committed / "ai_service.proto").read_bytes()  # the package's copy of the contract
    assert shipped == (REPO_ROOT / "proto/hearth/v1/ai_service.proto").read_bytes()


def test_the_status_table_in_the_docs_is_the_code() -> None:
    text = (REPO_ROOT / "docs/grpc.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d{3}) \| `([A-Z_]+)` \|", text, re.MULTILINE)
    assert {int(status): name for status, name in rows} == {s: code.name for s, code in BY_STATUS.items()}
    assert grpc_status(418) == grpc.StatusCode.INVALID_ARGUMENT and grpc_status(507) == grpc.StatusCode.UNAVAILABLE


async def _begin(rt: Any) -> None:
    rt.shutdown.begin()
