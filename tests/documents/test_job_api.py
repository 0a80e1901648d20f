"""``/api/v1/documents/{id}/job`` over real HTTP on a Hearth test server (embedded worker), SQLite and PostgreSQL:
a job started (202) and followed to its result, its progress as Server-Sent Events ending with the result, the
same file again answered from the cache (200), bad review rules refused before anything starts, and another
caller's document and jobs invisible."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.documents import pdf_factory
from tests.support import ADMIN, AUTH, gateway_registry

URL = "/api/v1/documents"
OTHER = {"Authorization": "Bearer other-key-456"}


@pytest.fixture
def server(fake: Any, hearth_server: Any, database_url: str, tmp_path: Path) -> Any:
    fake.set_defaults(content=json.dumps(pdf_factory.financial_result()))
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    registry["callers"].append({"name": "other", "key": "other-key-456"})
    return hearth_server(registry, database_url=database_url, document_dir=tmp_path / "documents",
                         scheduler_interval_s=0.1, task_poll_s=0.05)


async def upload(server: Any, http: Any) -> str:
    created = await http.post(server.base_url + URL, headers=AUTH,
                              files={"file": ("report.pdf", pdf_factory.financial_report(), "application/pdf")})
    assert created.status_code == 201, created.text
    return str(created.json()["data"]["id"])


async def test_a_job_is_started_followed_as_events_and_answered_from_the_cache_the_second_time(
        server: Any, http: Any, fake: Any) -> None:
    doc = await upload(server, http)
    started = await http.post(f"{server.base_url}{URL}/{doc}/job", headers=AUTH, json={"model": "m"})
    assert started.status_code == 202, started.text
    job = started.json()["data"]
    assert job["cache_hit"] is False and job["state"] in ("queued", "parsing_pdf")

    events = []
    async with http.stream("GET", f"{server.base_url}{URL}/{doc}/job/events", headers=AUTH, timeout=60) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        async for line in stream.aiter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    progress = [e["progress"] for e in events]
    assert progress == sorted(progress) and events[-1]["state"] == "completed"  # the stream ended with it
    assert events[-1]["result"] == pdf_factory.financial_result()

    newest = await http.get(f"{server.base_url}{URL}/{doc}/job", headers=AUTH)
    assert newest.status_code == 200 and newest.json()["data"]["id"] == job["id"]
    assert newest.json()["data"]["progress"] == 100
    calls = fake.stats.requests
    second = await http.post(f"{server.base_url}{URL}/{await upload(server, http)}/job", headers=AUTH,
                             json={"model": "m"})
    assert second.status_code == 200 and second.json()["data"]["cache_hit"] is True
    assert second.json()["data"]["result"] == pdf_factory.financial_result() and fake.stats.requests == calls


async def test_unknown_review_rules_are_refused_and_nothing_starts(server: Any, http: Any) -> None:
    doc = await upload(server, http)
    refused = await http.post(f"{server.base_url}{URL}/{doc}/job", headers=AUTH,
                              json={"review_rules": {"be_strict": True}})
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_request"
    missing = await http.get(f"{server.base_url}{URL}/{doc}/job", headers=AUTH)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "document_job_not_found"
    extra = await http.post(f"{server.base_url}{URL}/{doc}/job", headers=AUTH, json={"modle": "m"})
    assert extra.status_code == 400


async def test_another_callers_document_and_job_are_404_and_the_admin_sees_them(server: Any, http: Any) -> None:
    doc = await upload(server, http)
    job = (await http.post(f"{server.base_url}{URL}/{doc}/job", headers=AUTH, json={"model": "m"})).json()["data"]
    for path in (f"{URL}/{doc}/job", f"{URL}/jobs/{job['id']}"):
        other = await http.get(server.base_url + path, headers=OTHER)
        assert other.status_code == 404, path
        assert (await http.get(server.base_url + path, headers=ADMIN)).status_code == 200
    start = await http.post(f"{server.base_url}{URL}/{doc}/job", headers=OTHER, json={})
    assert start.status_code == 404 and start.json()["error"]["code"] == "document_not_found"
    for _ in range(300):  # let the job end before the server stops (its worker would hand the tasks back)
        if (await http.get(f"{server.base_url}{URL}/jobs/{job['id']}", headers=AUTH)).json()["data"]["state"] in (
                "completed", "failed"):
            break
        await asyncio.sleep(0.05)  # polling the job, not waiting for a window
