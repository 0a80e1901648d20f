"""The images door (issue 14, docs/images.md): ``POST /v1/images/generations`` with the official SDK, through
the gateway core — routing by capability and size, per-image budgets, the request log — and the signed URLs
that serve the stored images."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from hearth.testing.fake_upstream import FakeBehavior
from tests.support import ADMIN, AUTH, gateway_registry, ledger_summary, png_image, request_log_row

PER_IMAGE = 0.01  # currency units: 10,000 micro-units per image


def _registry(fake: Any, *, sizes: list[str] | None = None, per_image: float = PER_IMAGE) -> dict[str, Any]:
    """Model ``img`` on an OpenAI-compatible endpoint (the fake upstream), ``sim`` on the simulated provider,
    ``m`` a chat model; images priced per image, their prompts free."""
    reg = gateway_registry([
        {"name": "a", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up"},
        {"name": "i", "provider": "openai-like", "base_url": fake.base_url, "upstream_model": "up-image",
         "capabilities": ["images"], "image_sizes": sizes or ["64x64", "256x256"]},
        {"name": "s", "provider": "sim", "upstream_model": "sim-image", "capabilities": ["images"],
         "image_sizes": ["256x256"]}])
    reg["models"] = [{"name": "m", "endpoints": ["a"]}, {"name": "img", "kind": "image", "endpoints": ["i"]},
                     {"name": "sim", "kind": "image", "endpoints": ["s"]}]
    reg["prices"] = [{"model": m, "input_per_1m": 0, "output_per_1m": 0, "per_image": per_image}
                     for m in ("up-image", "sim-image")]
    return reg


def _client(server: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="test-key-123", max_retries=0)


def _server(hearth_server: Any, registry: dict[str, Any], tmp_path: Path, **settings: Any) -> Any:
    return hearth_server(registry, document_dir=tmp_path / "blobs", **settings)


async def test_sdk_b64_json_from_the_simulated_provider_is_a_valid_labelled_png(fake, hearth_server, http, tmp_path):
    server = _server(hearth_server, _registry(fake), tmp_path)
    async with _client(server) as client:
        raw = await client.images.with_raw_response.generate(
            model="sim", prompt="A lighthouse at dawn", size="256x256", response_format="b64_json")
    images = raw.parse()
    assert len(images.data) == 1 and images.data[0].url is None
    png = base64.b64decode(images.data[0].b64_json or "")
    width, height, kinds = png_image(png)
    assert (width, height) == (256, 256) and b"PLTE" in kinds
    assert fake.stats.requests == 0  # the simulated provider drew it: no network
    row = await request_log_row(http, server, raw.headers["x-request-id"])
    assert row["route"] == "images" and row["model"] == "sim" and row["endpoint"] == "s"
    assert row["status"] == 200 and row["cost"] == pytest.approx(PER_IMAGE)


async def test_sdk_url_format_stores_the_images_and_serves_them_on_signed_urls_only(
        fake, hearth_server, http, tmp_path):
    server = _server(hearth_server, _registry(fake), tmp_path)
    async with _client(server) as client:
        images = await client.images.generate(model="img", prompt="two red foxes", n=2, size="64x64",
                                              response_format="url")
    urls = [d.url or "" for d in images.data]
    assert len(urls) == 2 and len(set(urls)) == 2 and all(u.startswith(server.base_url + "/v1/images/files/")
                                                          for u in urls)
    upstream = fake.stats.last_body  # Hearth asked the upstream for the bytes, under the endpoint's model
    assert upstream["response_format"] == "b64_json" and upstream["model"] == "up-image" and upstream["n"] == 2
    for url in urls:
        r = await http.get(url)  # no Authorization: the signature is the credential
        assert r.status_code == 200 and r.headers["content-type"] == "image/png"
        assert r.headers["cache-control"].startswith("private, max-age=")
        assert png_image(r.content)[:2] == (64, 64)
        sha = url.split("/files/")[1].split(".")[0]
        assert (tmp_path / "blobs" / "sha256" / sha[:2] / sha[2:4] / sha).read_bytes() == r.content
    tampered = urls[0].replace("signature=", "signature=x")
    r = await http.get(tampered)
    assert r.status_code == 403 and r.json()["error"]["code"] == "image_url_invalid"
    later = urls[0].replace("expires=", "expires=9")  # a longer life is a different signature
    assert (await http.get(later)).status_code == 403
    bare = urls[0].split("?")[0]
    assert (await http.get(bare, headers=AUTH)).status_code == 403


async def test_n_images_are_reserved_up_front_and_settled_on_the_images_returned(
        database_url, fake, hearth_server, http, tmp_path):
    registry = _registry(fake)
    registry["budgets"] = [{"name": "daily", "caller": "tester", "scope": "caller", "period": "day",
                            "unit": "money", "limit": 0.045}]
    server = _server(hearth_server, registry, tmp_path, database_url=database_url)
    async with _client(server) as client:
        with pytest.raises(openai.RateLimitError) as refused:  # 5 images can never fit 0.045: refused before upstream
            await client.images.generate(model="img", prompt="a cat", n=5, size="64x64", response_format="b64_json")
        assert refused.value.code == "budget_exhausted" and fake.stats.requests == 0
        fake.script(FakeBehavior(image_count=1))  # asked for 3, the upstream draws 1: charged for 1
        drawn = await client.images.generate(model="img", prompt="a cat", n=3, size="64x64", response_format="b64_json")
        assert len(drawn.data) == 1
        await client.images.generate(model="img", prompt="a dog", n=2, size="64x64", response_format="b64_json")
        with pytest.raises(openai.RateLimitError):  # 0.03 spent: two more would pass the limit
            await client.images.generate(model="img", prompt="a cow", n=2, size="64x64", response_format="b64_json")
        await client.images.generate(model="img", prompt="a cow", n=1, size="64x64", response_format="b64_json")
        assert fake.stats.requests == 3
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(server.runtime.ledger.flush(), server.loop))
        ledger = await ledger_summary(database_url)
        assert ledger["charged"] == 4 * 10_000 and ledger["open"] == 0 and ledger["duplicates"] == []
        status = (await http.get(server.base_url + "/api/v1/budgets", headers=ADMIN)).json()["data"]["items"]
        assert next(i for i in status if i["budget"] == "daily")["spent"] == pytest.approx(0.04)


async def test_a_size_no_endpoint_draws_is_a_400_naming_it_and_sizes_route_between_endpoints(
        fake, fake2, hearth_server, tmp_path):
    registry = _registry(fake, sizes=["64x64"])
    registry["endpoints"].append({"name": "j", "provider": "openai-like", "base_url": fake2.base_url,
                                  "upstream_model": "up-image", "capabilities": ["images"],
                                  "image_sizes": ["128x128"]})
    registry["models"][1]["endpoints"] = ["i", "j"]
    server = _server(hearth_server, registry, tmp_path)
    async with _client(server) as client:
        with pytest.raises(openai.BadRequestError) as bad:
            await client.images.generate(model="img", prompt="x", size="1024x1024")
        err = bad.value.body
        assert isinstance(err, dict) and err["code"] == "unsupported_feature" and err["param"] == "size"
        assert "1024x1024" in err["message"] and "128x128, 64x64" in err["message"]
        assert fake.stats.requests == fake2.stats.requests == 0
        for _ in range(3):  # only j draws 128x128, only i draws 64x64
            await client.images.generate(model="img", prompt="x", size="128x128", response_format="b64_json")
        await client.images.generate(model="img", prompt="x", size="64x64", response_format="b64_json")
        assert (fake.stats.requests, fake2.stats.requests) == (1, 3)


@pytest.mark.parametrize(("body", "code", "param"), [
    ({"model": "img"}, "invalid_request", "prompt"),
    ({"model": "img", "prompt": "x", "n": 0}, "invalid_request", "n"),
    ({"model": "img", "prompt": "x", "n": 11}, "invalid_request", "n"),
    ({"model": "img", "prompt": "x", "size": "big"}, "invalid_request", "size"),
    ({"model": "img", "prompt": "x", "response_format": "gif"}, "invalid_request", "response_format"),
    ({"model": "img", "prompt": "x", "quality": "ultra"}, "invalid_request", "quality"),
    ({"model": "img", "prompt": "x", "colour": "red"}, "invalid_request", "colour"),
    ({"model": "img", "prompt": "x", "stream": True}, "unsupported_feature", "stream"),
    ({"model": "img", "prompt": "x", "output_format": "jpeg"}, "unsupported_feature", "output_format"),
    ({"prompt": "x"}, "invalid_request", "model"),
])
async def test_invalid_bodies_get_openai_400s_and_never_reach_upstream(body, code, param, fake, hearth_server, http,
                                                                       tmp_path):
    server = _server(hearth_server, _registry(fake), tmp_path)
    r = await http.post(server.base_url + "/v1/images/generations", json=body, headers=AUTH)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == code and r.json()["error"]["param"] == param
    assert fake.stats.requests == 0


async def test_a_chat_model_is_not_an_image_model_and_images_need_a_key(fake, hearth_server, http, tmp_path):
    server = _server(hearth_server, _registry(fake), tmp_path)
    r = await http.post(server.base_url + "/v1/images/generations", json={"model": "m", "prompt": "x"}, headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = await http.post(server.base_url + "/v1/images/generations", json={"model": "img", "prompt": "x"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert fake.stats.requests == 0


async def test_an_endpoint_that_times_out_may_be_drawing_so_no_other_endpoint_is_asked_and_it_is_charged(
        database_url, fake, fake2, hearth_server, http, tmp_path):
    registry = _registry(fake)
    registry["endpoints"][1]["timeout_s"] = 0.3
    registry["endpoints"].append({"name": "j", "provider": "openai-like", "base_url": fake2.base_url,
                                  "upstream_model": "up-image", "capabilities": ["images"], "priority": 1})
    registry["models"][1]["endpoints"] = ["i", "j"]
    registry["budgets"] = [{"name": "daily", "caller": "tester", "scope": "caller", "period": "day",
                            "unit": "money", "limit": 1}]
    server = _server(hearth_server, registry, tmp_path, database_url=database_url)
    fake.set_defaults(hang=True)
    r = await http.post(server.base_url + "/v1/images/generations", headers=AUTH,
                        json={"model": "img", "prompt": "x", "n": 2, "size": "64x64"})
    assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_outcome_unknown"
    assert r.headers["x-should-retry"] == "false"  # an SDK must not send it again either
    assert (fake.stats.requests, fake2.stats.requests) == (1, 0)
    row = await request_log_row(http, server, r.headers["x-request-id"])
    assert (row["status"], row["error_code"], row["cost"]) == (504, "upstream_outcome_unknown", pytest.approx(0.02))
    fake.set_defaults(hang=False, status=503)  # an answer that says it failed: nothing drawn, the next one serves
    ok = await http.post(server.base_url + "/v1/images/generations", headers=AUTH,
                         json={"model": "img", "prompt": "x", "size": "64x64", "response_format": "b64_json"})
    assert ok.status_code == 200 and fake2.stats.requests == 1


async def test_a_client_that_leaves_mid_call_closes_the_upstream_and_is_charged_as_drawn(
        fake, fake2, hearth_server, http, tmp_path):
    registry = _registry(fake)
    registry["endpoints"].append({"name": "j", "provider": "openai-like", "base_url": fake2.base_url,
                                  "upstream_model": "up-image", "capabilities": ["images"], "priority": 1})
    registry["models"][1]["endpoints"] = ["i", "j"]
    server = _server(hearth_server, registry, tmp_path)
    fake.set_defaults(latency_ms=5000)
    with pytest.raises(httpx.ReadTimeout):  # the client gives up after 0.3 s and closes its connection
        await http.post(server.base_url + "/v1/images/generations", timeout=0.3,
                        headers={**AUTH, "X-Request-Id": "left-early-1"},
                        json={"model": "img", "prompt": "x", "n": 2, "size": "64x64"})
    row = await request_log_row(http, server, "left-early-1")
    assert (row["status"], row["error_code"]) == (499, "client_disconnected")
    assert row["cost"] == pytest.approx(2 * PER_IMAGE)  # the upstream had the request: it may draw and bill
    for _ in range(40):
        if fake.stats.disconnects == 1:
            break
        await asyncio.sleep(0.025)
    assert fake.stats.disconnects == 1 and fake2.stats.requests == 0  # upstream closed, no failover


async def test_an_images_endpoint_whose_provider_cannot_draw_is_refused_without_a_call(fake, hearth_server, http,
                                                                                       tmp_path):
    registry = _registry(fake)
    registry["endpoints"].append({"name": "c", "provider": "anthropic-like", "base_url": fake.base_url,
                                  "upstream_model": "claude", "capabilities": ["images"]})
    registry["models"].append({"name": "claude-img", "kind": "image", "endpoints": ["c"]})
    server = _server(hearth_server, registry, tmp_path)
    r = await http.post(server.base_url + "/v1/images/generations", headers=AUTH,
                        json={"model": "claude-img", "prompt": "x"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_feature"
    assert "cannot generate images" in r.json()["error"]["message"] and fake.stats.requests == 0


async def test_url_images_live_in_the_database_blob_store_too(database_url, fake, hearth_server, http, tmp_path):
    server = _server(hearth_server, _registry(fake), tmp_path, database_url=database_url, document_store="database")
    async with _client(server) as client:
        images = await client.images.generate(model="sim", prompt="stored in the database", size="256x256")
    served = await http.get(images.data[0].url or "")
    assert served.status_code == 200 and png_image(served.content)[:2] == (256, 256)
    assert not (tmp_path / "blobs").exists()  # nothing on disk: the bytes are chunk rows
