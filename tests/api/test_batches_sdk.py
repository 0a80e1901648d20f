"""The OpenAI Files and Batch APIs with the official ``openai`` SDK, against a real Hearth (embedded worker) with
the fake upstream behind it, on SQLite and PostgreSQL: upload, create, poll, read the output and error files,
cancel, list with paging, ownership."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest

from hearth.auth.signing import signed_headers
from tests.e2e.task_runs import until
from tests.support import ADMIN, AUTH, SIGNING_KEY, gateway_registry, request_log_row, signing_registry

TERMINAL = ("completed", "failed", "expired", "cancelled")


def _registry(fake: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up"},
                            {"name": "e", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "emb-up", "capabilities": ["embeddings"]}])
    reg["models"] = [{"name": "m", "endpoints": ["a"]}, {"name": "emb", "kind": "embedding", "endpoints": ["e"]}]
    reg["callers"].append({"name": "other", "key": "other-key-456"})
    return reg


Clients = Callable[..., openai.AsyncOpenAI]


@pytest.fixture
async def sdk() -> AsyncIterator[Clients]:
    """``sdk(server, key=...)``: an official async client of ``server`` (no SDK retries), closed after the test."""
    made: list[openai.AsyncOpenAI] = []

    def make(server: Any, key: str = "test-key-123") -> openai.AsyncOpenAI:
        made.append(openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key=key, max_retries=0))
        return made[-1]

    yield make
    for client in made:
        await client.close()


def _line(custom_id: str, body: dict[str, Any], url: str = "/v1/chat/completions", **extra: Any) -> dict[str, Any]:
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": body, **extra}


def _chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], **extra}


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


async def _finished(client: openai.AsyncOpenAI, batch_id: str, within: float = 30) -> Any:
    async def ended() -> Any:
        batch = await client.batches.retrieve(batch_id)
        return batch if batch.status in TERMINAL else None

    return await until(ended, within=within, every=0.05, what=f"batch {batch_id} ended")


async def _lines_of(client: openai.AsyncOpenAI, file_id: str) -> list[dict[str, Any]]:
    content = await client.files.content(file_id)
    return [json.loads(line) for line in content.text.splitlines()]


async def test_a_chat_batch_runs_to_completed_with_each_custom_id_answered_once_and_bad_bodies_in_the_error_file(
        sdk, fake, hearth_server, database_url, http):
    server = hearth_server(_registry(fake), database_url=database_url)
    client = sdk(server)
    lines = [_line(f"req-{i}", _chat(f"question {i}", user=f"u{i % 2}")) for i in range(6)]
    lines.insert(3, _line("bad-temperature", _chat("hot", temperature=5)))
    lines.append(_line("bad-stream", _chat("stream please", stream=True)))
    uploaded = await client.files.create(file=("input.jsonl", _jsonl(lines)), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes == len(_jsonl(lines)) and uploaded.filename == "input.jsonl"

    created = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                          completion_window="24h", metadata={"job": "nightly"})
    assert created.status == "validating" and created.request_counts.total == 8
    assert created.metadata == {"job": "nightly"} and created.expires_at == created.created_at + 24 * 3600
    batch = await _finished(client, created.id)

    assert batch.status == "completed", batch
    assert batch.request_counts.model_dump() == {"total": 8, "completed": 6, "failed": 2}
    assert batch.in_progress_at and batch.finalizing_at and batch.completed_at
    output = await _lines_of(client, batch.output_file_id)
    assert [o["custom_id"] for o in output] == [f"req-{i}" for i in range(6)]  # input order, each once
    for o in output:
        assert o["error"] is None and o["response"]["status_code"] == 200
        assert o["id"].startswith("batch_req_") and o["response"]["request_id"] == o["id"]
        assert o["response"]["body"]["model"] == "m"  # the public name, as on the chat route
        assert o["response"]["body"]["choices"][0]["message"]["content"]
    errors = await _lines_of(client, batch.error_file_id)
    assert [(e["custom_id"], e["response"]["status_code"], e["response"]["body"]["error"]["param"]) for e in errors] \
        == [("bad-temperature", 400, "temperature"), ("bad-stream", 400, "stream")]
    assert fake.stats.requests == 6  # refused bodies never reach the upstream
    produced = await client.files.retrieve(batch.output_file_id)
    assert produced.purpose == "batch_output" and produced.filename == f"{batch.id}_output.jsonl"
    # each line was one call through the gateway core: logged on route `batch`, for the caller and the line's user
    row = await request_log_row(http, server, output[1]["id"])
    assert (row["route"], row["caller"], row["end_user"], row["status"]) == ("batch", "tester", "u1", 200)
    assert row["task_id"] is not None and row["task_id"].startswith("tsk_")


async def test_an_embeddings_batch_answers_every_line(sdk, fake, hearth_server, database_url):
    server = hearth_server(_registry(fake), database_url=database_url)
    client = sdk(server)
    lines = [_line(f"e{i}", {"model": "emb", "input": f"text {i}"}, url="/v1/embeddings") for i in range(3)]
    lines.append(_line("bad", {"model": "emb", "input": {"not": "text"}}, url="/v1/embeddings"))
    uploaded = await client.files.create(file=("emb.jsonl", _jsonl(lines)), purpose="batch")
    created = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/embeddings",
                                          completion_window="24h")
    batch = await _finished(client, created.id)
    assert batch.status == "completed" and batch.request_counts.failed == 1
    output = await _lines_of(client, batch.output_file_id)
    assert [o["custom_id"] for o in output] == ["e0", "e1", "e2"]
    (refused,) = await _lines_of(client, batch.error_file_id)  # the embeddings route's own validation
    assert (refused["custom_id"], refused["response"]["body"]["error"]["param"]) == ("bad", "input")
    assert all(o["response"]["body"]["data"][0]["embedding"] for o in output)
    assert fake.stats.by_path == {"/v1/embeddings": 3}


async def test_a_wrong_input_file_fails_the_batch_with_every_problem_listed_by_line(sdk, fake, hearth_server):
    server = hearth_server(_registry(fake))
    client = sdk(server)
    text = "\n".join([json.dumps(_line("a", _chat("x"))), "not json", json.dumps(_line("a", _chat("again"))),
                      json.dumps({**_line("b", _chat("x")), "method": "GET"}),
                      json.dumps(_line("c", _chat("x"), url="/v1/embeddings")),
                      json.dumps({"custom_id": "d", "method": "POST", "url": "/v1/chat/completions", "body": [1]}),
                      "", json.dumps({"method": "POST", "url": "/v1/chat/completions", "body": {}})])
    uploaded = await client.files.create(file=("bad.jsonl", text.encode()), purpose="batch")
    batch = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")
    assert batch.status == "failed" and batch.failed_at is not None and batch.output_file_id is None
    assert batch.errors is not None and batch.errors.object == "list"
    assert [(e.code, e.line, e.param) for e in batch.errors.data] == [
        ("invalid_json_line", 2, None), ("duplicate_custom_id", 3, "custom_id"), ("invalid_method", 4, "method"),
        ("mismatched_url", 5, "url"), ("invalid_request", 6, "body"), ("missing_required_parameter", 8, "custom_id")]
    assert fake.stats.requests == 0


@pytest.mark.parametrize(("change", "param"), [
    ({"endpoint": "/v1/completions"}, "endpoint"), ({"completion_window": "1h"}, "completion_window"),
    ({"metadata": {"k": 1}}, "metadata"), ({"input_file_id": ""}, "input_file_id")])
async def test_create_refuses_what_openai_refuses_with_a_400_naming_the_param(sdk, change, param, fake, hearth_server):
    server = hearth_server(_registry(fake))
    client = sdk(server)
    uploaded = await client.files.create(file=("in.jsonl", _jsonl([_line("a", _chat("x"))])), purpose="batch")
    body = {"input_file_id": uploaded.id, "endpoint": "/v1/chat/completions", "completion_window": "24h", **change}
    with pytest.raises(openai.BadRequestError) as refused:
        await client.post("/batches", body=body, cast_to=dict)
    assert refused.value.body["param"] == param and refused.value.code == "invalid_request"


async def test_cancel_stops_sending_and_ends_cancelled_with_the_answers_so_far(sdk, fake, hearth_server, database_url):
    server = hearth_server(_registry(fake), database_url=database_url, batch_concurrency=2)
    client = sdk(server)
    fake.set_defaults(latency_ms=50)
    lines = [_line(f"r{i}", _chat(f"q{i}")) for i in range(200)]
    uploaded = await client.files.create(file=("many.jsonl", _jsonl(lines)), purpose="batch")
    created = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                          completion_window="24h")

    async def some_answered() -> Any:
        batch = await client.batches.retrieve(created.id)
        return batch if batch.request_counts.completed >= 2 else None

    await until(some_answered, within=30, what="a few lines answered")
    cancelling = await client.batches.cancel(created.id)
    assert cancelling.status == "cancelling" and cancelling.cancelling_at is not None
    again = await client.batches.cancel(created.id)  # cancelling twice is harmless
    assert again.status in ("cancelling", "cancelled")
    batch = await _finished(client, created.id)
    assert batch.status == "cancelled" and batch.cancelled_at is not None
    done = batch.request_counts.completed
    assert 2 <= done < 200 and fake.stats.requests == done  # nothing more was sent
    output = await _lines_of(client, batch.output_file_id)
    assert [o["custom_id"] for o in output] == [f"r{i}" for i in range(done)]
    with pytest.raises(openai.ConflictError):
        await _cancel_finished(client, fake)


async def _cancel_finished(client: openai.AsyncOpenAI, fake: Any) -> None:
    """A completed batch cannot be cancelled: 409."""
    fake.set_defaults(latency_ms=0)
    uploaded = await client.files.create(file=("one.jsonl", _jsonl([_line("only", _chat("x"))])), purpose="batch")
    created = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                          completion_window="24h")
    assert (await _finished(client, created.id)).status == "completed"
    await client.batches.cancel(created.id)


async def test_batches_and_files_list_newest_first_with_keyset_paging(sdk, fake, hearth_server, database_url):
    server = hearth_server(_registry(fake), database_url=database_url)
    client = sdk(server)
    uploaded = await client.files.create(file=("in.jsonl", _jsonl([_line("a", _chat("x"))])), purpose="batch")
    ids = [(await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                        completion_window="24h")).id for _ in range(5)]
    first = await client.batches.list(limit=2)
    assert [b.id for b in first.data] == ids[::-1][:2] and first.has_more
    second = await client.batches.list(limit=2, after=first.data[-1].id)
    assert [b.id for b in second.data] == ids[::-1][2:4] and second.has_more
    third = await client.batches.list(limit=2, after=second.data[-1].id)
    assert [b.id for b in third.data] == ids[::-1][4:] and not third.has_more
    everything = [b.id async for b in await client.batches.list(limit=2)]  # the SDK's auto-paging
    assert everything == ids[::-1]
    for batch_id in ids:
        await _finished(client, batch_id)
    files = await client.files.list(purpose="batch_output")
    assert len(files.data) == 5 and all(f.purpose == "batch_output" for f in files.data)


async def test_files_and_batches_belong_to_their_caller_and_delete_removes_a_file(sdk, fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    mine, theirs = sdk(server), sdk(server, "other-key-456")
    uploaded = await mine.files.create(file=("in.jsonl", _jsonl([_line("a", _chat("x"))])), purpose="batch")
    batch = await mine.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                      completion_window="24h")
    for call in (theirs.files.retrieve(uploaded.id), theirs.files.content(uploaded.id),
                 theirs.files.delete(uploaded.id), theirs.batches.retrieve(batch.id), theirs.batches.cancel(batch.id),
                 theirs.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                       completion_window="24h")):
        with pytest.raises(openai.NotFoundError):
            await call
    assert (await theirs.files.list()).data == [] and (await theirs.batches.list()).data == []
    r = await http.get(server.base_url + f"/v1/files/{uploaded.id}", headers=ADMIN)  # the admin token is no caller
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    deleted = await mine.files.delete(uploaded.id)
    assert deleted.deleted and deleted.id == uploaded.id
    with pytest.raises(openai.NotFoundError):
        await mine.files.retrieve(uploaded.id)


async def test_uploads_other_than_batch_jsonl_are_refused(sdk, fake, hearth_server, http):
    server = hearth_server(_registry(fake), batch_file_max_bytes=100)
    client = sdk(server)
    url = server.base_url + "/v1/files"
    for data, param in (({}, "purpose"), ({"purpose": "b" * 2000}, "file")):  # missing; longer than a field may be
        r = await http.post(url, files={"file": ("x.jsonl", b"{}\n")}, data=data, headers=AUTH)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    with pytest.raises(openai.BadRequestError) as wrong_purpose:
        await client.files.create(file=("x.jsonl", b"{}\n"), purpose="fine-tune")
    assert wrong_purpose.value.body["param"] == "purpose"
    with pytest.raises(openai.APIStatusError) as too_big:
        await client.files.create(file=("x.jsonl", b"x" * 200), purpose="batch")
    assert too_big.value.status_code == 413 and too_big.value.code == "file_too_large"


async def test_a_batch_whose_task_is_cancelled_through_the_task_api_ends_cancelled_with_its_answers(
        sdk, fake, hearth_server, http, database_url):
    server = hearth_server(_registry(fake), database_url=database_url, batch_concurrency=2)
    client = sdk(server)
    fake.set_defaults(latency_ms=50)
    lines = [_line(f"r{i}", _chat(f"q{i}")) for i in range(200)]
    uploaded = await client.files.create(file=("many.jsonl", _jsonl(lines)), purpose="batch")
    created = await client.batches.create(input_file_id=uploaded.id, endpoint="/v1/chat/completions",
                                          completion_window="24h")

    async def some_answered() -> Any:
        batch = await client.batches.retrieve(created.id)
        return batch if batch.request_counts.completed >= 2 else None

    await until(some_answered, within=30, what="a few lines answered")
    tasks = (await http.get(server.base_url + "/api/v1/ai/tasks", params={"task_type": "openai_batch"},
                            headers=AUTH)).json()["data"]["tasks"]
    cancelled = await http.post(server.base_url + f"/api/v1/ai/tasks/{tasks[0]['task_id']}/cancel", headers=AUTH)
    assert cancelled.status_code == 200, cancelled.text

    batch = await _finished(client, created.id)  # retrieving it ends it, once its task is over

    assert batch.status == "cancelled" and batch.cancelled_at is not None
    output = await _lines_of(client, batch.output_file_id)
    done = batch.request_counts.completed
    assert len(output) == done and done <= fake.stats.requests <= done + 2  # the kill cut the calls in flight


async def test_a_caller_that_must_sign_signs_the_upload_as_sent_and_the_batch_create(fake, hearth_server, http):
    server = hearth_server(signing_registry(fake))
    line = json.dumps(_line("s1", _chat("x"))).encode()
    body = (b'--b\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--b\r\n'
            b'Content-Disposition: form-data; name="file"; filename="in.jsonl"\r\n\r\n' + line + b"\r\n--b--\r\n")
    base = {**AUTH, "Content-Type": "multipart/form-data; boundary=b"}
    unsigned = await http.post(server.base_url + "/v1/files", headers=base, content=body)
    assert unsigned.status_code == 401 and unsigned.json()["error"]["code"] == "signature_required"
    uploaded = await http.post(server.base_url + "/v1/files", content=body, headers={
        **base, **signed_headers(SIGNING_KEY, "POST", "/v1/files", body)})
    assert uploaded.status_code == 200 and uploaded.json()["bytes"] == len(line), uploaded.text
    create = json.dumps({"input_file_id": uploaded.json()["id"], "endpoint": "/v1/chat/completions",
                         "completion_window": "24h"}).encode()
    created = await http.post(server.base_url + "/v1/batches", content=create, headers={
        **AUTH, "Content-Type": "application/json", **signed_headers(SIGNING_KEY, "POST", "/v1/batches", create)})
    assert created.status_code == 200 and created.json()["request_counts"]["total"] == 1, created.text

    async def ended() -> Any:  # the batch runs to its end before the server stops (a clean stop, not a race)
        path = f"/v1/batches/{created.json()['id']}"
        r = await http.get(server.base_url + path, headers={**AUTH, **signed_headers(SIGNING_KEY, "GET", path, b"")})
        assert r.status_code == 200, r.text
        return r.json() if r.json()["status"] in TERMINAL else None

    assert (await until(ended, within=30, every=0.05, what="the batch ended"))["status"] == "completed"
