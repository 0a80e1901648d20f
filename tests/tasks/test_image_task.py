"""The ``image_generate_async`` task (docs/images.md): end to end through a real server and its embedded worker,
images kept in the blob store and named in the result; and never silently generated twice — a call in doubt
fails (dead letter) instead of retrying, an attempt cut short is held for an operator."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from hearth.errors import HearthError
from hearth.images.task import IMAGE_RETRY, IMAGE_TASK
from hearth.tasks.retry import decide
from tests.support import ADMIN, AUTH, gateway_registry, png_image, request_log_row
from tests.tasks.api_helpers import TASKS, finished


def _registry(fake: Any, *, timeout_s: float = 60.0) -> dict[str, Any]:
    reg = gateway_registry([
        {"name": "s", "provider": "sim", "upstream_model": "sim-image", "capabilities": ["images"],
         "image_sizes": ["128x128"]},
        {"name": "i", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up-image",
         "capabilities": ["images"], "timeout_s": timeout_s}])
    reg["models"] = [{"name": "sim", "kind": "image", "endpoints": ["s"]},
                     {"name": "img", "kind": "image", "endpoints": ["i"]}]
    return reg


def _start(hearth_server: Any, fake: Any, tmp_path: Path, database_url: str, **settings: Any) -> Any:
    return hearth_server(_registry(fake, **settings.pop("registry", {})), database_url=database_url,
                         document_dir=tmp_path / "blobs", task_poll_s=0.1, task_reap_s=0.2, **settings)


async def _submit(http: Any, server: Any, payload: dict[str, Any]) -> str:
    r = await http.post(server.base_url + TASKS, headers=AUTH, json={"task_type": IMAGE_TASK, "payload": payload})
    assert r.status_code == 202, r.text
    task_id: str = r.json()["data"]["task_id"]
    return task_id


async def test_the_task_stores_its_images_in_the_blob_store_and_names_them_in_its_result(
        database_url, fake, hearth_server, http, tmp_path):
    server = _start(hearth_server, fake, tmp_path, database_url)
    task_id = await _submit(http, server, {"model": "sim", "prompt": "quarterly poster, blue", "n": 2,
                                           "size": "128x128"})
    task = await finished(http, server, task_id)
    assert task["state"] == "succeeded" and task["versions"] == {"model": "sim"}
    result = (await http.get(f"{server.base_url}{TASKS}/{task_id}/result", headers=AUTH)).json()["data"]["result"]
    assert result["images"] == 2 and result["model"] == "sim" and len(set(result["blob_keys"])) == 2
    for item, key in zip(result["data"], result["blob_keys"], strict=True):
        assert item["blob_key"] == key and item["content_type"] == "image/png"
        stored = (tmp_path / "blobs" / key).read_bytes()  # the local blob store: one file per key
        assert len(stored) == item["size"] and png_image(stored)[:2] == (128, 128)
        served = await http.get(server.base_url + item["url"])  # the signed path, on this server
        assert served.status_code == 200 and served.content == stored
    row = await request_log_row(http, server, f"{task_id}.1")  # the call of attempt 1, through the gateway core
    assert (row["route"], row["status"], row["task_id"], row["model"]) == ("images", 200, task_id, "sim")


@pytest.mark.parametrize(("payload", "param"), [
    ({"model": "sim", "prompt": "x", "n": 0}, "payload.n"),
    ({"model": "sim", "prompt": ""}, "payload.prompt"),
    ({"model": "sim", "prompt": "x", "response_format": "b64_json"}, "payload.response_format"),
])
async def test_a_bad_payload_is_refused_at_submission(payload, param, database_url, fake, hearth_server, http,
                                                      tmp_path):
    server = _start(hearth_server, fake, tmp_path, database_url)
    r = await http.post(server.base_url + TASKS, headers=AUTH, json={"task_type": IMAGE_TASK, "payload": payload})
    assert r.status_code == 400 and r.json()["error"]["details"]["param"] == param


def test_calls_in_doubt_fail_instead_of_retrying_and_refused_calls_retry():
    for code in ("upstream_outcome_unknown", "upstream_timeout", "deadline_exceeded", "internal_error"):
        assert decide(HearthError(code), attempt=1, max_attempts=3, policy=IMAGE_RETRY).verdict == "fail", code
    for code in ("upstream_rate_limited", "upstream_error", "capacity_exhausted", "no_healthy_endpoint"):
        assert decide(HearthError(code), attempt=1, max_attempts=3, policy=IMAGE_RETRY).verdict == "retry", code


async def test_an_upstream_timeout_fails_the_task_into_a_dead_letter_without_drawing_again(
        database_url, fake, hearth_server, http, tmp_path):
    server = _start(hearth_server, fake, tmp_path, database_url, registry={"timeout_s": 0.3})
    fake.set_defaults(hang=True)  # the upstream may be drawing (and billing): Hearth cannot know
    task_id = await _submit(http, server, {"model": "img", "prompt": "x"})
    task = await finished(http, server, task_id)
    assert task["state"] == "failed" and task["error"]["code"] == "upstream_outcome_unknown"
    assert [a["outcome"] for a in task["attempts"]] == ["failed"]  # one attempt, not retried
    assert fake.stats.requests == 1
    letter = (await http.get(f"{server.base_url}/api/v1/ai/dead-letters/{task_id}", headers=ADMIN)).json()["data"]
    assert letter["task_type"] == IMAGE_TASK


async def test_an_attempt_cut_short_by_a_shutdown_is_held_for_an_operator_and_never_rerun(
        database_url, fake, hearth_server, http, tmp_path):
    first = _start(hearth_server, fake, tmp_path, database_url)
    fake.set_defaults(hang=True)
    task_id = await _submit(http, first, {"model": "img", "prompt": "x"})
    for _ in range(200):  # the call is at the upstream
        if fake.stats.in_flight == 1:
            break
        await asyncio.sleep(0.05)
    assert fake.stats.in_flight == 1
    first.stop()  # the worker hands the running attempt back: not safe to repeat, so it is held
    fake.set_defaults(hang=False)
    second = _start(hearth_server, fake, tmp_path, database_url)
    task = await finished(http, second, task_id)
    assert task["state"] == "hold" and "not safe to repeat" in task["hold_reason"]
    await asyncio.sleep(0.5)  # several reaper passes of the second server: nothing moves a held task
    again = (await http.get(f"{second.base_url}{TASKS}/{task_id}", headers=AUTH)).json()["data"]
    assert again["state"] == "hold" and fake.stats.requests == 1
