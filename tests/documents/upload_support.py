"""Helpers of the upload tests: a small real PDF, and a local HTTP origin serving files for ``file_url``."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from reportlab.pdfgen import canvas


def small_pdf(text: str = "Revenue 2025: 1,234 million") -> bytes:
    """A one-page PDF with a text layer, made here (nothing downloaded)."""
    out = io.BytesIO()
    page = canvas.Canvas(out)
    page.drawString(72, 720, text)
    page.showPage()
    page.save()
    return out.getvalue()


@asynccontextmanager
async def origin(files: dict[str, tuple[bytes, str]]) -> AsyncIterator[str]:
    """An HTTP server on 127.0.0.1 serving ``files`` (path → (body, Content-Type)); yields its base URL."""

    async def serve(request: web.Request) -> web.Response:
        found = files.get(request.path)
        if found is None:
            return web.Response(status=404)
        body, media = found
        return web.Response(body=body, headers={"Content-Type": media})

    app = web.Application()
    app.router.add_get("/{tail:.*}", serve)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[-1][1]}"
    finally:
        await runner.cleanup()
