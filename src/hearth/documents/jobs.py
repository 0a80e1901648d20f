"""Document jobs: a document through the pipeline workflow, or straight from the result cache.

:meth:`DocumentJobs.start` computes the job's **cache key** — the SHA-256 of the document's bytes together with
the pipeline's definition version, the extraction prompt's code and active version, the model asked for and the
review rules — and looks it up: a hit is a job ``completed`` at once with the cached result (``cache_hit``, no
model call); a miss records the job and starts a run of the pipeline (:data:`PIPELINE`, shipped in
``pipeline.yaml``). A changed prompt version, pipeline version or model misses the cache.

Where a job stands is read from its run when asked (:meth:`DocumentJobs.view`): ``state`` is ``queued``, the
stage running (``parsing_pdf`` … ``generating_review_questions``), ``needs_human_review``, ``completed`` or
``failed``; ``progress`` moves by milestones (seed 003): uploaded 10, parsed 30, tables 50, model 80, validated
95, done 100.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.documents import job_store
from hearth.documents.review_triggers import ReviewRules
from hearth.documents.service import DocumentService
from hearth.errors import HearthError
from hearth.ids import new_id
from hearth.prompts.catalog import PromptCatalog
from hearth.workflows.runs import RunService
from hearth.yaml_documents import load_yaml

PIPELINE = "document-pipeline"
PIPELINE_FILE = Path(__file__).with_name("pipeline.yaml")
EXTRACTION_PROMPT = "financial_kpi_extraction"
STAGES = ("parsing_pdf", "extracting_tables", "chunking_document", "running_llm", "validating_schema",
          "checking_evidence", "generating_review_questions")
MILESTONES = {"parsing_pdf": 30, "extracting_tables": 50, "running_llm": 80, "validating_schema": 95}
UPLOADED = 10
TERMINAL_STATES = ("completed", "failed")


def pipeline_definition() -> dict[str, Any]:
    """The shipped pipeline definition (registered at start)."""
    loaded: dict[str, Any] = load_yaml(PIPELINE_FILE.read_text(encoding="utf-8"))
    return loaded


class DocumentJobs:
    def __init__(self, engine: AsyncEngine, documents: DocumentService, runs: RunService, prompts: PromptCatalog, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.engine = engine
        self.documents = documents
        self.runs = runs
        self.prompts = prompts
        self.clock = clock

    async def start(self, document_id: str, *, caller: str, model: str | None = None, locale: str | None = None,
                    prompt_code: str | None = None, review_rules: Mapping[str, Any] | None = None,
                    pipeline: str = PIPELINE) -> dict[str, Any]:
        """A job for ``caller``'s document: completed from the cache, or its pipeline run started."""
        doc = await self.documents.get(document_id, caller)
        try:
            ReviewRules.from_mapping(review_rules or {})
        except ValueError as exc:
            raise HearthError("invalid_request", str(exc), param="review_rules") from None
        definition = await self.runs.definitions.get(pipeline)
        code = prompt_code or EXTRACTION_PROMPT
        await self.prompts.refresh()
        prompt = self.prompts.snapshot.active.get(code)
        if prompt is None:
            raise HearthError("prompt_not_found", f"The prompt `{code}` does not exist or has no active version.",
                              param="prompt_code")
        versions = {"pipeline": pipeline, "pipeline_version": int(definition["version"]), "prompt_code": code,
                    "prompt_version": prompt.version, "model": model, "review_rules": dict(review_rules or {})}
        key = hashlib.sha256(doc.sha256.encode() + orjson.dumps(versions, option=orjson.OPT_SORT_KEYS)).hexdigest()
        now = self.clock.now()
        job_id = "djob_" + new_id()
        cached = await job_store.cached_result(self.engine, key)
        row: dict[str, Any] = {"id": job_id, "document_id": doc.id, "caller": caller, "cache_key": key,
                               "versions": versions, "created_at": now}
        if cached is not None:
            await job_store.insert_job(self.engine, {**row, "run_id": None, "cache_hit": True, "result": cached,
                                                     "finished_at": now})
        else:
            run_id = "wfr_" + new_id()
            await job_store.insert_job(self.engine, {**row, "run_id": run_id, "cache_hit": False})
            run_input = {"document_id": doc.id, "job_id": job_id, "model": model, "locale": locale,
                         "prompt_code": code, "review_rules": dict(review_rules or {})}
            await self.runs.start(pipeline, caller=caller, run_input=run_input,
                                  version=int(definition["version"]), run_id=run_id)
        return await self.view(job_id)

    async def latest(self, document_id: str, *, caller: str | None) -> dict[str, Any]:
        """The view of the document's newest job."""
        doc = await self.documents.get(document_id, caller)
        job = await job_store.latest_job(self.engine, doc.id)
        if job is None:
            raise HearthError("document_job_not_found", f"The document `{doc.id}` has no job yet.",
                              param="document_id")
        return await self._view(job)

    async def view(self, job_id: str) -> dict[str, Any]:
        job = await job_store.get_job(self.engine, job_id)
        if job is None:
            raise HearthError("document_job_not_found", param="job_id")
        return await self._view(job)

    async def _view(self, job: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {"id": job["id"], "document_id": job["document_id"], "run_id": job["run_id"],
                               "cache_hit": job["cache_hit"], "versions": job["versions"], "reviewed": job["reviewed"],
                               "created_at": job["created_at"], "finished_at": job["finished_at"],
                               "stages": [], "review_item_id": None, "error": None, "result": None}
        if job["finished_at"] is not None:
            return {**out, "state": "completed", "progress": 100, "current_step": "completed",
                    "result": job["result"], "stages": await self._stages(job)}
        try:
            run = await self.runs.get(job["run_id"])
        except HearthError:
            return {**out, "state": "failed", "progress": UPLOADED, "current_step": "uploaded",
                    "error": {"code": "pipeline_not_started", "message": "The job's pipeline run was never started."}}
        steps = {s["step_id"]: s for s in run["steps"]}
        out["stages"] = _stages(steps)
        progress = max([UPLOADED] + [p for s, p in MILESTONES.items() if steps.get(s, {}).get("state") == "succeeded"])
        done = [s for s in STAGES if steps.get(s, {}).get("state") == "succeeded"]
        current = done[-1] if done else "uploaded"
        if run["state"] in ("failed", "cancelled", "terminated"):
            return {**out, "state": "failed", "progress": progress, "current_step": current, "error": run["error"]}
        review = steps.get("needs_human_review", {})
        if review.get("state") == "running":
            return {**out, "state": "needs_human_review", "progress": progress, "current_step": "needs_human_review",
                    "review_item_id": review.get("review_id")}
        running = next((s for s in STAGES if steps.get(s, {}).get("state") == "running"), None)
        if running is None and not done:
            return {**out, "state": "queued", "progress": progress, "current_step": "queued"}
        return {**out, "state": running or current, "progress": progress, "current_step": running or current}

    async def _stages(self, job: Mapping[str, Any]) -> list[dict[str, Any]]:
        if job["run_id"] is None:
            return []
        try:
            run = await self.runs.get(job["run_id"])
        except HearthError:
            return []
        return _stages({s["step_id"]: s for s in run["steps"]})


def _stages(steps: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"name": name, "state": steps[name]["state"], "started_at": steps[name]["started_at"],
             "finished_at": steps[name]["finished_at"], "error": steps[name]["error"]}
            for name in (*STAGES, "needs_human_review", "completed") if name in steps]
