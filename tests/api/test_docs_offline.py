"""``/docs`` works offline (Swagger UI's assets served by Hearth itself), and the README's settings
table lists every process setting."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from hearth.settings import Settings
from tests.support import gateway_registry

README = Path(__file__).resolve().parents[2] / "README.md"


def _server(fake: Any, hearth_server: Any) -> Any:
    return hearth_server(gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                            "upstream_model": "up"}]))


async def test_docs_reference_only_same_origin_assets_that_are_served(fake, hearth_server, http):
    server = _server(fake, hearth_server)
    page = await http.get(server.base_url + "/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    html = page.text
    refs = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    refs += re.findall(r"""url\s*:\s*['"]([^'"]+)['"]""", html)  # the OpenAPI document Swagger UI loads
    assert any(r.endswith(".js") for r in refs) and any(r.endswith(".css") for r in refs), refs
    assert "/openapi.json" in refs
    assert not re.search(r"https?://|//cdn", html), "the docs page must not load anything from elsewhere"
    for ref in refs:
        url = urljoin(server.base_url + "/docs", ref)
        assert urlsplit(url).netloc == urlsplit(server.base_url).netloc, ref
        r = await http.get(url)
        assert r.status_code == 200, (ref, r.status_code)
        if ref.endswith(".js"):
            assert "javascript" in r.headers["content-type"] and len(r.content) > 10_000
        if ref.endswith(".css"):
            assert r.headers["content-type"].startswith("text/css")


async def test_the_swagger_ui_served_reads_openapi_3_1(fake, hearth_server, http):
    server = _server(fake, hearth_server)
    assert (await http.get(server.base_url + "/openapi.json")).json()["openapi"].startswith("3.1")
    html = (await http.get(server.base_url + "/docs")).text
    [bundle] = [r for r in re.findall(r"""src\s*=\s*["']([^"']+)["']""", html) if r.endswith("bundle.js")]
    js = (await http.get(urljoin(server.base_url + "/docs", bundle))).text
    version = re.search(r'PACKAGE_VERSION:"(\d+)\.\d+\.\d+"', js)
    assert version is not None and int(version.group(1)) >= 5  # Swagger UI renders OpenAPI 3.1 from 5.0 on


def test_the_readme_settings_table_lists_every_setting() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `HEARTH_")]
    documented = {name for line in rows for name in re.findall(r"`(HEARTH_[A-Z0-9_]+)`", line.split("|")[1])}
    expected = {f"HEARTH_{name.upper()}" for name in Settings.model_fields}
    assert sorted(expected - documented) == [], "settings missing from the README's table"
    assert sorted(documented - expected) == [], "the README's table names settings that do not exist"
