"""The document pipeline end to end, in a Hearth runtime (embedded worker, scheduler) against the fake upstream, on
SQLite and PostgreSQL: a 20-page report through every stage with its milestones in order; the same file again
from the cache with no model call; a changed prompt version missing the cache; a review trigger sending the job
to a reviewer whose correction is the result; a model failure retried without parsing again; a corrupt PDF
failing at once."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from hearth.prompts.spec import PromptCreate
from hearth.prompts.store import create_version
from hearth.runtime import Runtime, start_runtime
from hearth.settings import Settings
from hearth.testing.fake_upstream import FakeUpstream
from tests.documents import pdf_factory
from tests.support import MASTER_KEY, gateway_registry, write_config

STAGES = ["parsing_pdf", "extracting_tables", "chunking_document", "running_llm", "validating_schema",
          "checking_evidence", "generating_review_questions"]


@pytest.fixture
async def rt(tmp_path: Path, database_url: str, fake: FakeUpstream) -> AsyncIterator[Runtime]:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}])
    settings = Settings(config=write_config(tmp_path / "hearth.yaml", registry), database_url=database_url,
                        master_key=MASTER_KEY, offline_fallback=False, task_poll_s=0.05, task_grace_s=1.0,
                        scheduler_interval_s=0.1, document_dir=tmp_path / "blobs")
    runtime = await start_runtime(settings)
    try:
        yield runtime
    finally:
        await runtime.stop()


def answer(result: Any) -> dict[str, Any]:
    return {"content": json.dumps(result)}


async def until(rt: Runtime, job_id: str, states: tuple[str, ...] = ("completed", "failed"),
                seen: list[tuple[str, int]] | None = None, within_s: float = 30.0) -> dict[str, Any]:
    """Poll the job (as a client would) until it reaches one of ``states``; every (state, progress) seen."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        view = await rt.document_jobs.view(job_id)
        if seen is not None and (not seen or seen[-1] != (view["state"], view["progress"])):
            seen.append((view["state"], view["progress"]))
        if view["state"] in states:
            return view
        assert loop.time() < deadline, view
        await asyncio.sleep(0.02)  # polling the job's progress, not waiting for a window


async def run_ended(rt: Runtime, run_id: str, within_s: float = 10.0) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while (run := await rt.runs.get(run_id))["state"] == "running":
        assert loop.time() < deadline, run
        await asyncio.sleep(0.02)  # polling the run, not waiting for a window
    return run


async def upload(rt: Runtime, data: bytes) -> str:
    return (await rt.documents.upload(data, filename="report.pdf", caller="tester")).id


async def test_a_report_goes_through_every_stage_then_the_same_file_completes_from_the_cache(
        rt: Runtime, fake: FakeUpstream) -> None:
    fake.set_defaults(**answer(pdf_factory.financial_result()))
    doc = await upload(rt, pdf_factory.financial_report())
    job = await rt.document_jobs.start(doc, caller="tester", model="m")
    assert job["state"] in ("queued", "parsing_pdf") and job["cache_hit"] is False
    seen: list[tuple[str, int]] = []
    done = await until(rt, job["id"], seen=seen)

    assert done["state"] == "completed" and done["progress"] == 100, done
    assert done["result"] == pdf_factory.financial_result() and done["reviewed"] is False
    progress = [p for _, p in seen]
    assert progress == sorted(progress) and progress[-1] == 100  # milestones only move forward
    assert set(progress) <= {10, 30, 50, 80, 95, 100}
    stages = {s["name"]: s for s in done["stages"]}
    assert [n for n in STAGES if stages[n]["state"] == "succeeded"] == STAGES
    starts = [stages[n]["started_at"] for n in STAGES]
    assert starts == sorted(starts)  # each stage began after the one before it
    assert stages["needs_human_review"]["state"] == "skipped"  # no trigger fired
    assert (await run_ended(rt, done["run_id"]))["state"] == "succeeded"  # its last step records the job's end
    calls = fake.stats.requests
    assert calls >= 1 and rt.document_tasks.parses == 1

    again = await upload(rt, pdf_factory.financial_report())  # the same bytes, uploaded again
    hit = await rt.document_jobs.start(again, caller="tester", model="m")
    assert hit["state"] == "completed" and hit["cache_hit"] is True and hit["run_id"] is None
    assert hit["result"] == done["result"]
    assert fake.stats.requests == calls and rt.document_tasks.parses == 1  # no model call, no parse


async def test_a_new_prompt_version_misses_the_cache(rt: Runtime, fake: FakeUpstream) -> None:
    fake.set_defaults(**answer(pdf_factory.financial_result()))
    doc = await upload(rt, pdf_factory.financial_report())
    first = await until(rt, (await rt.document_jobs.start(doc, caller="tester", model="m"))["id"])
    assert first["state"] == "completed"
    calls = fake.stats.requests
    active = rt.prompts.snapshot.active["financial_kpi_extraction"]
    await create_version(rt.engine, PromptCreate(code="financial_kpi_extraction", contents=dict(
        {k: v["user"] for k, v in active.contents.items()}), output_schema=active.output_schema, activate=True,
        operator="test", reason="a new version"))

    second = await rt.document_jobs.start(doc, caller="tester", model="m")
    assert second["cache_hit"] is False and second["versions"]["prompt_version"] == active.version + 1
    assert (await until(rt, second["id"]))["state"] == "completed"
    assert fake.stats.requests > calls  # the model was asked again
    assert rt.document_tasks.parses == 1  # the kept pages were read, not parsed again


async def test_a_quote_not_on_its_page_goes_to_a_reviewer_whose_correction_is_the_result(
        rt: Runtime, fake: FakeUpstream) -> None:
    wrong = copy.deepcopy(pdf_factory.financial_result())
    wrong["kpis"]["net_income"][0]["source_page"] = 3  # the sentence is on page 7
    fake.set_defaults(**answer(wrong))
    doc = await upload(rt, pdf_factory.financial_report())
    job = await rt.document_jobs.start(doc, caller="tester", model="m")
    waiting = await until(rt, job["id"], states=("needs_human_review", "completed", "failed"))

    assert waiting["state"] == "needs_human_review", waiting
    item = await rt.reviews.get(waiting["review_item_id"])
    questions = item["payload"]["questions"]
    assert [q["code"] for q in questions] == ["evidence_not_found"]
    assert questions[0]["field"] == "/kpis/net_income/0" and questions[0]["source_page"] == 3
    corrected = pdf_factory.financial_result()
    await rt.reviews.claim(item["id"], reviewer="ana", lease_s=300)
    await rt.reviews.decide(item["id"], reviewer="ana", decision="modify", payload={"result": corrected},
                            reason="page 7, not 3")

    done = await until(rt, job["id"])
    assert done["state"] == "completed" and done["reviewed"] is True
    assert done["result"] == corrected


async def test_a_model_failure_after_parsing_is_retried_without_parsing_again(
        rt: Runtime, fake: FakeUpstream) -> None:
    fake.set_defaults(**answer(pdf_factory.financial_result()))
    fake.script({"status": 503}, {"status": 503}, {"status": 503})  # every endpoint attempt of the first call
    doc = await upload(rt, pdf_factory.financial_report())
    done = await until(rt, (await rt.document_jobs.start(doc, caller="tester", model="m"))["id"], within_s=60)
    assert done["state"] == "completed", done
    assert rt.document_tasks.parses == 1
    llm = next(s for s in (await rt.runs.get(done["run_id"]))["steps"] if s["step_id"] == "running_llm")
    attempts = [t["attempt"] for t in (await rt.tasks.service.get_many(llm["detail"]["tasks"])).values()]
    assert llm["state"] == "succeeded" and max(attempts) >= 2  # the model step failed once and ran again


async def test_a_corrupt_pdf_fails_at_once_without_a_retry(rt: Runtime, fake: FakeUpstream) -> None:
    doc = await upload(rt, pdf_factory.corrupt_pdf())
    done = await until(rt, (await rt.document_jobs.start(doc, caller="tester", model="m"))["id"])
    assert done["state"] == "failed" and done["current_step"] == "uploaded"
    assert done["error"]["code"] == "pdf_corrupted"
    parse = next(s for s in done["stages"] if s["name"] == "parsing_pdf")
    task = await rt.tasks.service.get((await rt.runs.get(done["run_id"]))["steps"][0]["task_id"], caller=None)
    assert parse["state"] == "failed" and task["attempt"] == 1
    assert fake.stats.requests == 0
