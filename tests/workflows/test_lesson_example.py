"""The shipped lesson-preparation workflow (examples/workflows/lesson_preparation.yaml, seed 002 §2.4) and the
daily summary schedule (examples/schedules/daily_summary.json), run end to end on SQLite and PostgreSQL.

Real parts: a Hearth runtime (``start_runtime``) whose registry file's ``workflows:`` section is the shipped
YAML itself — registered at start as ``hearth apply`` does — with its embedded worker running the capability
tasks through the gateway against the fake upstream, the example prompts imported from examples/prompts, and
a local aiohttp server standing in for the analytics service (``analyse``) and the content service's webhook
(``persist``). Runs and reviews read an injected clock, so "24 h without a decision" takes no time.

Model calls of one run: ``recommend`` 1, then per iteration of the ``generation`` loop ``generate`` 1 and
``evaluate`` 1 — the fake answers each from a script, in that order (the steps run one after the other).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import pytest
import yaml
from aiohttp import web

from hearth.api.schedules import ScheduleCreate
from hearth.auth.signing import verify_request
from hearth.errors import HearthError
from hearth.prompts.registry_import import apply_plan, load_registry, plan_import
from hearth.runtime import Runtime, start_runtime
from hearth.settings import Settings
from hearth.testing.fake_clock import FakeClock
from hearth.testing.fake_upstream import FakeUpstream
from hearth.testing.server_thread import free_port
from hearth.workflows.reviews import ReviewService
from hearth.workflows.runs import RunService
from hearth.workflows.schedules import ScheduleDefinition, ScheduleService
from tests.support import MASTER_KEY, gateway_registry, write_config
from tests.workflows.run_support import settle, states, step

ROOT = Path(__file__).resolve().parents[2]
LESSON = ROOT / "examples" / "workflows" / "lesson_preparation.yaml"
DAILY_SUMMARY = ROOT / "examples" / "schedules" / "daily_summary.json"
PROMPTS = ROOT / "examples" / "prompts" / "registry.yaml"
KEY = "lesson-webhook-key-0123456789abcdef"
QUESTIONS = "1. What is 1/2 + 1/4?\n2. Which is larger, 2/3 or 3/5?\n3. Simplify 6/8."
RECOMMENDED = {"content": '{"knowledge_points": ["adding fractions", "comparing fractions"]}'}


def generation(score: float) -> list[dict[str, Any]]:
    """The fake's answers for one iteration of the loop: the questions, then the evaluation's score."""
    return [{"content": QUESTIONS}, {"content": json.dumps({"score": score, "reason": f"scored {score}"})}]


@dataclass
class Systems:
    """The analytics service and the content service's webhook, on one local server."""

    url: str
    persist_statuses: deque[int] = field(default_factory=deque)  # answers to the next POSTs; 200 once empty
    persisted: list[dict[str, Any]] = field(default_factory=list)  # bodies answered 2xx
    persist_attempts: list[dict[str, str]] = field(default_factory=list)  # headers of every POST
    analysed: list[Any] = field(default_factory=list)


@contextlib.asynccontextmanager
async def business_systems() -> AsyncIterator[Systems]:
    port = free_port()
    systems = Systems(url=f"http://127.0.0.1:{port}")

    async def analytics(request: web.Request) -> web.Response:
        systems.analysed.append(await request.json())
        return web.json_response({"weak_points": ["adding unlike fractions"]})

    nonces: set[str] = set()

    async def claim(nonce: str, _: float) -> bool:
        fresh = nonce not in nonces
        nonces.add(nonce)
        return fresh

    async def persist(request: web.Request) -> web.Response:
        raw = await request.read()
        await verify_request(key=KEY, method="POST", path_with_query=request.path_qs, body=raw,
                             headers=request.headers, claim_nonce=claim)  # signed, or raises
        systems.persist_attempts.append(dict(request.headers))
        status = systems.persist_statuses.popleft() if systems.persist_statuses else 200
        if status == 200:
            systems.persisted.append(orjson.loads(raw))
            return web.json_response({"created": 3})
        return web.json_response({"error": "down"}, status=status)

    async def report(_: web.Request) -> web.Response:
        return web.Response(text="Yesterday 42 lessons were prepared and 40 were approved by teachers.")

    app = web.Application()
    app.router.add_post("/analytics", analytics)
    app.router.add_post("/questions", persist)
    app.router.add_get("/reports/yesterday.txt", report)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield systems
    finally:
        await runner.cleanup()


@dataclass
class Lesson:
    rt: Runtime
    runs: RunService
    clock: FakeClock
    systems: Systems
    fake: FakeUpstream

    async def start(self) -> str:
        run = await self.runs.start("lesson-preparation", caller="teacher-bff", run_input={
            "class_id": "c-7", "subject_id": "math", "topic": "fractions", "count": 3, "model": "demo-chat",
            "analytics_url": f"{self.systems.url}/analytics", "persist_url": f"{self.systems.url}/questions"})
        return str(run["id"])

    async def until_review(self, run_id: str) -> dict[str, Any]:
        view = await settle(self.runs, run_id, lambda v: v["state"] != "running"
                            or step(v, "review")["state"] == "running", within_s=30)
        assert step(view, "review")["state"] == "running", states(view)
        return view


@pytest.fixture
async def lesson(tmp_path: Path, database_url: str, fake: FakeUpstream) -> AsyncIterator[Lesson]:
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up"}], model="demo-chat")  # as in examples/hearth.demo.yaml
    registry["callers"] += [{"name": "teacher-bff", "key": "teacher-key-123"},
                            {"name": "report-service", "key": "report-key-123"}]
    registry["workflows"] = [yaml.safe_load(LESSON.read_text())]  # the shipped file, applied at start
    settings = Settings(config=write_config(tmp_path / "hearth.yaml", registry), database_url=database_url,
                        master_key=MASTER_KEY, scheduler_enabled=False, offline_fallback=False,
                        callback_url_allow=["127.0.0.1/32"], callback_signing_key=KEY,
                        file_url_allow=["127.0.0.1/32"], task_poll_s=0.05, task_grace_s=1.0)
    rt = await start_runtime(settings)
    try:
        await apply_plan(rt.engine, await plan_import(rt.engine, load_registry(PROMPTS)))
        await rt.prompts.load()
        clock = FakeClock()
        runs = RunService(rt.engine, rt.workflows, rt.tasks.service, ReviewService(rt.engine, clock), clock=clock)
        async with business_systems() as systems:
            yield Lesson(rt, runs, clock, systems, fake)
    finally:
        await rt.stop()


async def test_a_gate_that_fails_twice_then_passes_generates_three_times_and_the_approved_questions_persist(
        lesson: Lesson) -> None:
    lesson.fake.script(RECOMMENDED, *generation(0.3), *generation(0.5), *generation(0.9))
    run_id = await lesson.start()
    view = await lesson.until_review(run_id)
    assert lesson.fake.stats.requests == 1 + 3 * 2  # recommend, then three generations each evaluated
    loop = step(view, "generation")
    assert loop["output"]["iterations"] == 3 and loop["output"]["until_met"] is True
    history = [h["steps"] for h in loop["detail"]["history"]]
    generated = {h["generate"]["task_id"] for h in history} | {step(view, "generate")["task_id"]}
    assert len(generated) == 3  # three generation tasks, each one model call
    scores = [(await lesson.rt.tasks.service.get(h["evaluate"]["task_id"], caller=None))["result"]["data"]["score"]
              for h in history]
    assert scores == [0.3, 0.5] and step(view, "evaluate")["output"]["data"]["score"] == 0.9
    assert lesson.systems.analysed == [{"class_id": "c-7", "subject_id": "math"}]
    assert states(view)["generation_failed"] == "skipped"

    review_id = step(view, "review")["review_id"]
    item = await lesson.runs.reviews.get(review_id)
    assert item["payload"]["questions"] == QUESTIONS and item["payload"]["score"] == 0.9
    await lesson.runs.reviews.claim(review_id, reviewer="teacher-li", lease_s=300)
    await lesson.runs.reviews.decide(review_id, reviewer="teacher-li", decision="approve", reason="good")
    view = await settle(lesson.runs, run_id, within_s=30)

    assert view["state"] == "succeeded", view["error"]
    assert lesson.systems.persisted == [{"class_id": "c-7", "subject_id": "math", "topic": "fractions",
                                         "questions": QUESTIONS}]
    assert lesson.systems.persist_attempts[0]["X-Hearth-Event"] == "lesson.questions"
    assert step(view, "persist")["output"] == {"status": 200, "body": {"created": 3}}
    assert lesson.fake.stats.requests == 7  # nothing ran twice


async def test_a_gate_that_never_passes_fails_the_run_after_three_regenerations(lesson: Lesson) -> None:
    lesson.fake.script(RECOMMENDED, *generation(0.1), *generation(0.2), *generation(0.3), *generation(0.4))
    run_id = await lesson.start()
    view = await settle(lesson.runs, run_id, within_s=30)

    assert view["state"] == "failed"
    assert lesson.fake.stats.requests == 1 + 4 * 2  # the first generation and three regenerations
    assert step(view, "generation")["output"]["until_met"] is False
    assert step(view, "generation")["output"]["iterations"] == 4
    failed = step(view, "generation_failed")
    assert failed["state"] == "failed" and failed["error"]["code"] == "workflow_failed"
    task = await lesson.rt.tasks.service.get(failed["task_id"], caller=None)  # the step's task says why
    assert "after 3 regenerations (last score 0.4: scored 0.4)" in str(task["error"]), task["error"]
    assert task["attempt"] == 1  # workflow_failed is never retried
    assert view["error"]["step"] == "generation_failed"
    assert states(view)["review"] == "skipped" and states(view)["persist"] == "skipped"
    assert lesson.systems.persist_attempts == []


async def test_a_teacher_who_modifies_the_questions_must_satisfy_the_form_and_their_version_persists(
        lesson: Lesson) -> None:
    lesson.fake.script(RECOMMENDED, *generation(0.95))
    run_id = await lesson.start()
    review_id = step(await lesson.until_review(run_id), "review")["review_id"]
    reviews = lesson.runs.reviews
    await reviews.claim(review_id, reviewer="teacher-li", lease_s=300)
    changed = {"class_id": "c-7", "subject_id": "math", "topic": "fractions", "questions": "1. What is 3/4 - 1/4?"}

    with pytest.raises(HearthError) as refused:
        await reviews.decide(review_id, reviewer="teacher-li", decision="modify", reason="shorter",
                             payload={**changed, "questions": ""})  # minLength 1
    assert refused.value.code == "invalid_request"
    assert [e["path"] for e in refused.value.details["errors"]] == ["questions"]
    assert (await reviews.get(review_id))["state"] == "claimed"  # the refused payload decided nothing

    await reviews.decide(review_id, reviewer="teacher-li", decision="modify", reason="shorter", payload=changed)
    view = await settle(lesson.runs, run_id, within_s=30)
    assert view["state"] == "succeeded", view["error"]
    assert lesson.systems.persisted == [changed]


async def test_a_rejected_lesson_ends_the_run_and_persists_nothing(lesson: Lesson) -> None:
    lesson.fake.script(RECOMMENDED, *generation(0.95))
    run_id = await lesson.start()
    review_id = step(await lesson.until_review(run_id), "review")["review_id"]
    await lesson.runs.reviews.claim(review_id, reviewer="teacher-li", lease_s=300)
    await lesson.runs.reviews.decide(review_id, reviewer="teacher-li", decision="reject", reason="off topic")
    view = await settle(lesson.runs, run_id, within_s=30)

    assert view["state"] == "failed"
    assert step(view, "review")["error"]["code"] == "review_rejected"
    assert states(view)["persist"] == "skipped"
    assert lesson.systems.persist_attempts == []


async def test_no_decision_within_24_hours_expires_the_review_and_nothing_is_approved(lesson: Lesson) -> None:
    lesson.fake.script(RECOMMENDED, *generation(0.95))
    run_id = await lesson.start()
    review_id = step(await lesson.until_review(run_id), "review")["review_id"]

    lesson.clock.advance(86_399)
    assert await lesson.runs.reviews.expire_due() == 0  # a second before the deadline: still waiting
    lesson.clock.advance(2)
    assert await lesson.runs.reviews.expire_due() == 1
    view = await settle(lesson.runs, run_id, within_s=30)

    assert view["state"] == "failed"
    assert (await lesson.runs.reviews.get(review_id))["state"] == "expired"
    assert step(view, "review")["error"]["code"] == "review_expired"
    assert states(view)["persist"] == "skipped"
    assert lesson.systems.persist_attempts == []
    with pytest.raises(HearthError) as late:
        await lesson.runs.reviews.claim(review_id, reviewer="teacher-li", lease_s=300)
    assert late.value.code == "review_expired"


async def test_a_webhook_that_is_down_then_up_receives_the_lesson_after_retries(lesson: Lesson) -> None:
    lesson.systems.persist_statuses.extend([503, 503])
    lesson.fake.script(RECOMMENDED, *generation(0.95))
    run_id = await lesson.start()
    review_id = step(await lesson.until_review(run_id), "review")["review_id"]
    await lesson.runs.reviews.claim(review_id, reviewer="teacher-li", lease_s=300)
    await lesson.runs.reviews.decide(review_id, reviewer="teacher-li", decision="approve", reason="good")
    view = await settle(lesson.runs, run_id, within_s=30)

    assert view["state"] == "succeeded", view["error"]
    attempts = lesson.systems.persist_attempts
    assert len(attempts) == 3 and len(lesson.systems.persisted) == 1
    assert len({a["X-Hearth-Delivery"] for a in attempts}) == 1  # one delivery id: the receiver can deduplicate
    task = await lesson.rt.tasks.service.get(step(view, "persist")["task_id"], caller=None)
    assert task["attempt"] == 3


async def test_the_daily_summary_schedule_fires_at_8_shanghai_time_and_summarizes_the_report(lesson: Lesson) -> None:
    raw = json.loads(DAILY_SUMMARY.read_text())
    assert raw["target"]["payload"]["file_url"].startswith("https://")
    raw["target"]["payload"]["file_url"] = f"{lesson.systems.url}/reports/yesterday.txt"  # the local stand-in
    body = ScheduleCreate.model_validate(raw)  # the API's own model: the file is a valid request body
    shanghai = ZoneInfo(body.time_zone)
    # the latest 08:00 in Shanghai that has passed: the task the occurrence submits is due for the real worker
    now = datetime.fromtimestamp(time.time() - 120, shanghai)
    eight = now.replace(hour=8, minute=0, second=0, microsecond=0)
    eight -= timedelta(days=1) if eight > now else timedelta(0)
    clock = FakeClock(eight.timestamp() - 30)
    schedules = ScheduleService(lesson.rt.engine, lesson.rt.tasks.service, lesson.runs.reviews, clock=clock)
    row = await schedules.create(ScheduleDefinition(
        name=body.name, caller=body.caller, cron=body.cron, time_zone=body.time_zone,
        target=body.target.model_dump(), misfire_policy=body.misfire_policy,
        catchup_window_s=body.catchup_window_s, overlap_policy=body.overlap_policy))
    assert row["next_at"] == eight.timestamp()

    await schedules.tick()
    assert await schedules.occurrences(row["id"], limit=10) == []  # 07:59:30: nothing due
    clock.advance(31)
    await schedules.tick()
    [occurrence] = await schedules.occurrences(row["id"], limit=10)
    assert occurrence["state"] == "fired"

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while (task := await lesson.rt.tasks.service.get(occurrence["task_id"], caller=None))["state"] != "succeeded":
        assert task["state"] in ("queued", "running") and loop.time() < deadline, (task["error_code"], task["error"])
        await asyncio.sleep(0.05)
    assert task["result"]["summary"] and lesson.fake.stats.requests == 1


async def test_an_unreachable_analytics_service_degrades_to_recommending_on_the_topic_alone(lesson: Lesson) -> None:
    lesson.fake.script(RECOMMENDED, *generation(0.95))
    run = await lesson.runs.start("lesson-preparation", caller="teacher-bff", run_input={
        "class_id": "c-7", "subject_id": "math", "topic": "fractions", "model": "demo-chat",
        "analytics_url": f"http://127.0.0.1:{free_port()}/analytics",  # nothing listens there
        "persist_url": f"{lesson.systems.url}/questions"})
    view = await lesson.until_review(str(run["id"]))

    assert step(view, "analyse")["state"] == "failed"  # after its retries (on_error: continue)
    assert step(view, "analyse")["error"]["code"] == "upstream_error"
    assert step(view, "recommend")["state"] == "succeeded"
    recommend = await lesson.rt.tasks.service.get(step(view, "recommend")["task_id"], caller=None)
    assert recommend["payload"]["text"].endswith("What the class struggles with: unknown")
    assert lesson.fake.stats.requests == 3 and lesson.systems.analysed == []


async def test_the_runs_error_says_why_no_generation_passed(lesson: Lesson) -> None:
    lesson.fake.script(RECOMMENDED, *generation(0.1), *generation(0.2), *generation(0.3), *generation(0.4))
    view = await settle(lesson.runs, await lesson.start(), within_s=30)
    assert view["state"] == "failed"
    assert "after 3 regenerations" in str(view["error"].get("message"))
