"""The ``document_pages`` table: a PDF's text layer, page by page, kept by the SHA-256 of its bytes.

The parsing stage writes it once (:func:`save_pages`); every later stage — tables aside, which read positions
from the PDF itself — and every later job on the same bytes read it (:func:`load_pages`), so a model failure
retries only the model step, and a second upload of the same file is never parsed again.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.documents.pdf_text import PageText
from hearth.store.db import write_transaction
from hearth.store.tables import document_pages as _t


async def load_pages(engine: AsyncEngine, sha256: str) -> list[PageText] | None:
    """The pages of the PDF with these bytes in page order, or None if it was never parsed."""
    async with engine.connect() as conn:
        rows = (await conn.execute(select(_t.c.page, _t.c.text, _t.c.needs_ocr, _t.c.chars)
                                   .where(_t.c.sha256 == sha256).order_by(_t.c.page))).all()
    return [PageText(number=r[0], text=r[1], needs_ocr=r[2], chars=r[3]) for r in rows] or None


async def save_pages(engine: AsyncEngine, sha256: str, pages: Sequence[PageText]) -> None:
    """Keep the pages (all in one transaction; a parse that ran twice writes the same rows once)."""
    if not pages:
        return
    rows = [{"sha256": sha256, "page": p.number, "text": p.text, "needs_ocr": p.needs_ocr, "chars": p.chars}
            for p in pages]
    async with write_transaction(engine) as conn:
        insert = pg_insert if conn.dialect.name == "postgresql" else sqlite_insert
        await conn.execute(insert(_t).on_conflict_do_nothing(index_elements=["sha256", "page"]), rows)
