"""The task types of the document pipeline (:data:`PIPELINE_FILE`): one per stage, each small and keyed to what
it reads, so a retried stage redoes only itself.

=============================  ===============  ==========================================================
task type                      queue            does
=============================  ===============  ==========================================================
``document.parse_pdf``         ``documents.cpu`` the text layer page by page (:func:`parse_pdf`), kept in
                                                ``document_pages`` by the bytes' SHA-256 — done once per file:
                                                a later attempt, stage or job on the same bytes reads it back
``document.extract_tables``    ``documents.cpu`` tables from character positions (:func:`extract_tables`)
``document.chunk``             ``documents.cpu`` the kept pages in chunks under ``[page N]`` headers
``document.extract_chunk``     ``ai.default``   one chunk through the ``extract`` capability (gateway, scenes,
                                                budgets) with the KPI schema; a result still invalid after the
                                                capability's corrective retry is returned with its errors (a
                                                review trigger), not raised
``document.validate``          ``documents.cpu`` the chunks' results merged, checked against the schema
``document.check_evidence``    ``documents.cpu`` every cited value's quote looked for on its page
``document.review_questions``  ``documents.cpu`` the review triggers (:mod:`hearth.documents.review_triggers`),
                                                with each value's page text around its quote for a reviewer
``document.complete``          ``documents.cpu`` the final result on the job, and in the result cache
=============================  ===============  ==========================================================

Parsing runs on ``documents.cpu`` (low concurrency: PDFium is one lock per process anyway) and model calls on
``ai.default``, so large PDFs never starve model calls of worker slots. Errors follow the engine's retry classes:
``pdf_corrupted`` / ``pdf_encrypted`` are 4xx and fail at once; a 429 or a timeout of the model is retried with
backoff; a schema still invalid goes to review.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.structured import validate
from hearth.clock import SYSTEM_CLOCK, Clock
from hearth.documents import job_store, page_store
from hearth.documents.chunking import chunk_pages
from hearth.documents.financial_schema import FINANCIAL_KPI_SCHEMA, merge_results
from hearth.documents.pdf_tables import extract_tables
from hearth.documents.pdf_text import PageText, count_chars, parse_pdf
from hearth.documents.review_triggers import ReviewRules, check_evidence, review_reasons
from hearth.documents.service import DocumentService
from hearth.errors import HearthError
from hearth.tasks.types import TaskContext, TaskType, TaskTypes

CPU_QUEUE = "documents.cpu"
MAX_TABLES = 500  # a stage's output is a checkpoint row: bounded
PAGE_EXCERPT_CHARS = 600


@dataclass(slots=True)
class DocumentTasks:
    """The pipeline's handlers and what they use; ``parses`` counts real parses (not reads of kept pages)."""

    engine: AsyncEngine
    documents: DocumentService
    max_pages: int
    clock: Clock = SYSTEM_CLOCK
    parses: int = 0
    _extract: Any = field(default=None)

    def register(self, types: TaskTypes) -> None:
        extract = types.get("extract_async")
        if extract is None:
            raise RuntimeError("the document pipeline needs the capability tasks registered first")
        self._extract = extract
        for name, handler, queue in (
                ("document.parse_pdf", self.parse_pdf, CPU_QUEUE),
                ("document.extract_tables", self.extract_tables, CPU_QUEUE),
                ("document.chunk", self.chunk, CPU_QUEUE),
                ("document.extract_chunk", self.extract_chunk, extract.queue),
                ("document.validate", self.validate, CPU_QUEUE),
                ("document.check_evidence", self.check_evidence, CPU_QUEUE),
                ("document.review_questions", self.review_questions, CPU_QUEUE),
                ("document.complete", self.complete, CPU_QUEUE)):
            types.register(TaskType(name, handler, queue=queue, description=f"document pipeline: {name[9:]}",
                                    validate=extract.validate if name == "document.extract_chunk" else None))

    async def pages(self, document_id: str) -> list[PageText]:
        """The document's pages: kept ones, else parsed now and kept."""
        doc = await self.documents.get(document_id, None)
        kept = await page_store.load_pages(self.engine, doc.sha256)
        if kept is not None:
            return kept
        data = await self.documents.read_bytes(document_id)
        if doc.content_type == "application/pdf":
            self.parses += 1
            parsed = await asyncio.to_thread(parse_pdf, data, max_pages=self.max_pages)
            pages = parsed.pages
        elif doc.content_type.startswith("text/"):
            text = data.decode("utf-8", errors="replace")
            pages = [PageText(number=i + 1, text=t, needs_ocr=False, chars=count_chars(t))
                     for i, t in enumerate(text.split("\f"))]
        else:  # an image: one page, all of it for an OCR engine
            pages = [PageText(number=1, text="", needs_ocr=True, chars=0)]
        await page_store.save_pages(self.engine, doc.sha256, pages)
        await self.documents.store.set_page_count(document_id, len(pages))
        return pages

    async def parse_pdf(self, ctx: TaskContext) -> dict[str, Any]:
        pages = await self.pages(_document_id(ctx.payload))
        return {"page_count": len(pages), "chars": sum(p.chars for p in pages),
                "needs_ocr_pages": [p.number for p in pages if p.needs_ocr]}

    async def extract_tables(self, ctx: TaskContext) -> dict[str, Any]:
        document_id = _document_id(ctx.payload)
        doc = await self.documents.get(document_id, None)
        if doc.content_type != "application/pdf":
            return {"tables": []}
        data = await self.documents.read_bytes(document_id)
        tables = await asyncio.to_thread(extract_tables, data)
        return {"tables": [{"page": t.page, "rows": t.rows} for t in tables[:MAX_TABLES]],
                "truncated": len(tables) > MAX_TABLES}

    async def chunk(self, ctx: TaskContext) -> dict[str, Any]:
        pages = await self.pages(_document_id(ctx.payload))
        max_chars = int(ctx.payload.get("max_chars") or 6000)
        chunks = chunk_pages(pages, max_chars=max_chars)
        return {"chunks": [{"index": c.index, "first_page": c.first_page, "last_page": c.last_page, "text": c.text}
                           for c in chunks]}

    async def extract_chunk(self, ctx: TaskContext) -> dict[str, Any]:
        try:
            data: dict[str, Any] = await self._extract.handler(ctx)
        except HearthError as exc:
            if exc.code != "schema_validation_failed":
                raise
            return {"data": None, "schema_errors": [_problem(e) for e in (exc.details or {}).get("errors", [])]}
        return {"data": data.get("data"), "schema_errors": [], "model": data.get("model"),
                "prompt_version": data.get("prompt_version")}

    async def validate(self, ctx: TaskContext) -> dict[str, Any]:
        chunks = [c for c in ctx.payload.get("results") or [] if isinstance(c, Mapping)]
        results = [c["data"] for c in chunks if isinstance(c.get("data"), Mapping)]
        errors = [f"chunk {i}: {e}" for i, c in enumerate(chunks) for e in c.get("schema_errors") or []]
        merged = merge_results(results)
        errors += [_problem(p.as_dict()) for p in validate(merged, FINANCIAL_KPI_SCHEMA)]
        return {"result": merged, "schema_errors": errors, "chunks": len(chunks)}

    async def check_evidence(self, ctx: TaskContext) -> dict[str, Any]:
        pages = await self.pages(_document_id(ctx.payload))
        evidence = check_evidence(ctx.payload.get("result"), pages={p.number: p.text for p in pages})
        kinds = [e.kind for e in evidence.values()]
        return {"evidence": {path: e.as_dict() for path, e in evidence.items()},
                "counts": {k: kinds.count(k) for k in ("exact", "fuzzy", "not_found")}}

    async def review_questions(self, ctx: TaskContext) -> dict[str, Any]:
        document_id = _document_id(ctx.payload)
        pages = {p.number: p.text for p in await self.pages(document_id)}
        result = ctx.payload.get("result")
        try:
            rules = ReviewRules.from_mapping(ctx.payload.get("rules") or {})
        except ValueError as exc:
            raise HearthError("invalid_request", str(exc), param="payload.rules") from None
        evidence = check_evidence(result, pages=pages)
        reasons = review_reasons(result, evidence=evidence, schema_errors=ctx.payload.get("schema_errors") or [],
                                 rules=rules)
        questions = []
        for r in reasons:
            ev = evidence.get(r.field) if r.field else None
            excerpt = ev.context if ev is not None and ev.context else (
                pages.get(ev.source_page, "")[:PAGE_EXCERPT_CHARS] if ev is not None and ev.source_page else "")
            questions.append({**r.as_dict(), "value": ev.value if ev else None,
                              "source_page": ev.source_page if ev else None, "quote": ev.quote if ev else None,
                              "page_excerpt": excerpt})
        return {"needs_review": bool(reasons), "reasons": [r.code for r in reasons], "questions": questions,
                "result": result}

    async def complete(self, ctx: TaskContext) -> dict[str, Any]:
        job_id = ctx.payload.get("job_id")
        if not isinstance(job_id, str):
            raise HearthError("invalid_request", "`job_id` is required.", param="payload.job_id")
        result = ctx.payload.get("result")
        reviewed = bool(ctx.payload.get("reviewed"))
        await job_store.complete(self.engine, job_id, result=result, reviewed=reviewed, now=self.clock.now())
        return {"job_id": job_id, "reviewed": reviewed}


def _document_id(payload: Mapping[str, Any]) -> str:
    value = payload.get("document_id")
    if not isinstance(value, str) or not value:
        raise HearthError("invalid_request", "`document_id` is required.", param="payload.document_id")
    return value


def _problem(raw: Any) -> str:
    if isinstance(raw, Mapping):
        path = raw.get("path") or ""
        return f"{path}: {raw.get('message')}" if path else str(raw.get("message"))
    return str(raw)
