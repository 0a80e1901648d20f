"""The batch task type, attempt by attempt, on a real runtime (gateway, database of each kind, fake upstream):
a resumed attempt runs only the lines without an answer; an answer is recorded once; the completion window's end,
a cancel before the task ran and a vanished input file each end the batch as OpenAI would."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from hearth.batches.batch_store import BatchStore
from hearth.batches.batch_task import BATCH_TASK, BatchTasks
from hearth.batches.executor import ExecutorLimits
from hearth.batches.file_store import FileStore
from hearth.batches.service import BatchService, batch_request
from hearth.capabilities.sources import SourceLimits
from hearth.errors import HearthError
from hearth.runtime import Runtime, start_runtime
from hearth.settings import Settings
from hearth.tasks.capability_tasks import CapabilityServices
from hearth.tasks.types import TaskContext, TaskRecord
from hearth.testing.fake_clock import FakeClock
from hearth.testing.fake_upstream import FakeUpstream
from tests.support import MASTER_KEY, gateway_registry, write_config

CALLER = "tester"


@dataclass
class Rig:
    rt: Runtime
    clock: FakeClock
    files: FileStore
    service: BatchService
    tasks: BatchTasks
    services: CapabilityServices  # what a worker hands its handlers (the batch task uses its gateway)

    @property
    def store(self) -> BatchStore:
        return self.service.store

    async def create(self, n: int) -> str:
        lines = [{"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                  "body": {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}} for i in range(n)]
        data = ("\n".join(json.dumps(line) for line in lines) + "\n").encode()
        uploaded = await self.files.upload(data, filename="in.jsonl", purpose="batch", caller=CALLER)
        req = batch_request({"input_file_id": uploaded.id, "endpoint": "/v1/chat/completions",
                             "completion_window": "24h"}, caller=CALLER, tenant=None)
        return (await self.service.create(req, check_body=lambda body: None, request_id_=None)).id

    async def run(self, batch_id: str, *, attempt: int = 1, task_id: str | None = None) -> dict[str, Any]:
        """One attempt of the batch's own task (or of another task naming the batch: ``task_id``)."""
        batch = await self.store.get(batch_id)
        assert batch is not None
        record = TaskRecord(id=task_id or batch.row["task_id"], task_type=BATCH_TASK, queue="ai.default",
                            attempt=attempt, max_attempts=10, payload={"batch_id": batch_id}, caller=CALLER,
                            tenant=None, end_user=None, request_id=None, priority=0)
        return await self.tasks.run(TaskContext(record, self.services, report=lambda ctx: None))

    async def outputs(self, file_id: str | None) -> list[dict[str, Any]]:
        if file_id is None:
            return []
        return [json.loads(line) for line in (await self.files.content(file_id, CALLER)).decode().splitlines()]


@pytest.fixture
async def rig(tmp_path: Path, database_url: str, fake: FakeUpstream) -> AsyncIterator[Rig]:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    settings = Settings(config=write_config(tmp_path / "hearth.yaml", registry), database_url=database_url,
                        master_key=MASTER_KEY, embedded_worker=False, scheduler_enabled=False,
                        document_dir=tmp_path / "blobs", task_grace_s=1.0)
    rt = await start_runtime(settings)
    try:
        clock = FakeClock()
        assert rt.files is not None
        files = FileStore(rt.engine, rt.files.blobs, max_bytes=1 << 20, clock=clock)
        service = BatchService(rt.engine, files, rt.tasks.service, max_lines=100, clock=clock)
        tasks = BatchTasks(rt.engine, files, service.store, ExecutorLimits(concurrency=2, poll_s=0.05), clock=clock)
        services = CapabilityServices(gateway=rt.gateway, prompts=rt.prompts, session=None, limits=SourceLimits())
        yield Rig(rt, clock, files, service, tasks, services)
    finally:
        await rt.stop()


async def test_a_resumed_attempt_runs_only_the_lines_without_an_answer(rig: Rig, fake: FakeUpstream) -> None:
    batch_id = await rig.create(5)
    # a previous attempt answered lines 0 and 2 before its worker died
    earlier = {0: '{"id":"batch_req_earlier0","custom_id":"c0"}', 2: '{"id":"batch_req_earlier2","custom_id":"c2"}'}
    for line, output in earlier.items():
        assert await rig.store.record(batch_id, line, ok=True, output=output, now=rig.clock.now())

    assert await rig.run(batch_id, attempt=2) == {"batch_id": batch_id, "status": "completed"}

    assert fake.stats.requests == 3  # lines 1, 3 and 4 only
    batch = await rig.store.get(batch_id)
    assert batch is not None and batch.view()["request_counts"] == {"total": 5, "completed": 5, "failed": 0}
    output = await rig.outputs(batch.row["output_file_id"])
    assert [o["custom_id"] for o in output] == ["c0", "c1", "c2", "c3", "c4"]
    assert output[0]["id"] == "batch_req_earlier0" and output[2]["id"] == "batch_req_earlier2"  # kept, not redone


async def test_a_line_answer_is_recorded_once(rig: Rig) -> None:
    batch_id = await rig.create(2)
    assert await rig.store.record(batch_id, 1, ok=True, output="{}", now=rig.clock.now())
    assert not await rig.store.record(batch_id, 1, ok=False, output='{"second": true}', now=rig.clock.now())
    batch = await rig.store.get(batch_id)
    assert batch is not None and (batch.row["completed"], batch.row["failed"]) == (1, 0)
    assert await rig.store.count_answers(batch_id) == (1, 0)
    assert [o async for o in rig.store.outputs(batch_id)] == [(1, True, "{}")]


async def test_past_the_completion_window_the_unsent_lines_are_answered_batch_expired(
        rig: Rig, fake: FakeUpstream) -> None:
    batch_id = await rig.create(3)
    rig.clock.advance(24 * 3600 + 1)

    assert (await rig.run(batch_id))["status"] == "expired"

    assert fake.stats.requests == 0
    batch = await rig.store.get(batch_id)
    assert batch is not None and batch.row["expired_at"] is not None and batch.row["output_file_id"] is None
    errors = await rig.outputs(batch.row["error_file_id"])
    assert [(e["custom_id"], e["response"], e["error"]["code"]) for e in errors] == [
        ("c0", None, "batch_expired"), ("c1", None, "batch_expired"), ("c2", None, "batch_expired")]
    assert batch.view()["request_counts"] == {"total": 3, "completed": 0, "failed": 3}


async def test_a_batch_cancelled_before_its_task_ran_ends_cancelled_without_a_call(
        rig: Rig, fake: FakeUpstream) -> None:
    batch_id = await rig.create(3)
    assert (await rig.service.cancel(batch_id, CALLER)).status == "cancelling"

    assert (await rig.run(batch_id))["status"] == "cancelled"

    batch = await rig.store.get(batch_id)
    assert batch is not None and batch.row["cancelled_at"] is not None
    assert (batch.row["output_file_id"], batch.row["error_file_id"], fake.stats.requests) == (None, None, 0)
    assert (await rig.run(batch_id, attempt=2))["status"] == "cancelled"  # a finished batch is left as it is


async def test_an_input_file_deleted_before_the_task_ran_fails_the_batch_with_the_cause(rig: Rig) -> None:
    batch_id = await rig.create(2)
    batch = await rig.store.get(batch_id)
    assert batch is not None
    await rig.files.delete(batch.row["input_file_id"], CALLER)

    with pytest.raises(HearthError) as failed:
        await rig.run(batch_id)

    assert failed.value.code == "file_not_found"
    view = (await rig.service.get(batch_id, CALLER)).view()
    assert view["status"] == "failed" and view["failed_at"] is not None
    assert [e["code"] for e in view["errors"]["data"]] == ["file_not_found"]


async def test_a_task_submitted_through_the_task_api_for_a_batch_is_refused_and_leaves_it_alone(
        rig: Rig, fake: FakeUpstream) -> None:
    batch_id = await rig.create(2)

    with pytest.raises(HearthError) as refused:
        await rig.run(batch_id, task_id="tsk_someone_else")

    assert refused.value.code == "invalid_request" and refused.value.param == "payload.batch_id"
    batch = await rig.store.get(batch_id)
    assert batch is not None and batch.status == "validating" and fake.stats.requests == 0
