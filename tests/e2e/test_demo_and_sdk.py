"""The README's promises, against a real `hearth serve` process: demo config, curl, the openai SDK."""

from __future__ import annotations

import base64
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e import processes
from tests.support import png_image

ROOT = Path(__file__).resolve().parents[2]
DEMO_KEY = "hearth-demo-key"


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[processes.HearthProcess]:
    cwd = tmp_path_factory.mktemp("demo")
    proc = processes.start(cwd, {"HEARTH_CONFIG": ROOT / "examples" / "hearth.demo.yaml"}, name="demo")
    yield proc
    proc.stop()


def test_demo_starts_ready_fast_with_sqlite_in_var(demo_server: processes.HearthProcess) -> None:
    assert (demo_server.log_path.parent / "var" / "hearth.db").exists()
    assert "hearth_ready" in demo_server.output()


def test_readme_curl_example_answers(demo_server: processes.HearthProcess) -> None:
    out = subprocess.run(
        ["curl", "-s", f"{demo_server.base_url}/v1/chat/completions", "-H", f"Authorization: Bearer {DEMO_KEY}",
         "-H", "Content-Type: application/json",
         "-d", '{"model": "demo-chat", "messages": [{"role": "user", "content": "Hello, Hearth!"}]}'],
        capture_output=True, text=True, timeout=10, check=True).stdout
    assert '"object":"chat.completion"' in out and "Hello, Hearth!" in out and "[simulated]" in out


def test_openai_sdk_sync_non_stream_and_stream(demo_server: processes.HearthProcess) -> None:
    client = openai.OpenAI(base_url=demo_server.base_url + "/v1", api_key=DEMO_KEY, max_retries=0)
    reply = client.chat.completions.create(model="demo-chat", messages=[{"role": "user", "content": "ping"}])
    assert "ping" in (reply.choices[0].message.content or "")
    assert reply.usage is not None and reply.usage.total_tokens > 0
    chunks = list(client.chat.completions.create(model="demo-chat", stream=True,
                                                 stream_options={"include_usage": True},
                                                 messages=[{"role": "user", "content": "pong"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert "pong" in text
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert [m.id for m in client.models.list()] == ["demo-chat", "demo-embedding", "demo-image"]
    emb = client.embeddings.create(model="demo-embedding", input=["a", "b"])
    assert len(emb.data) == 2 and len(emb.data[0].embedding) > 0


def test_the_demo_answers_each_of_n_choices_and_bills_them(demo_server: processes.HearthProcess) -> None:
    client = openai.OpenAI(base_url=demo_server.base_url + "/v1", api_key=DEMO_KEY, max_retries=0)
    one = client.chat.completions.create(model="demo-chat", messages=[{"role": "user", "content": "ping"}])
    three = client.chat.completions.create(model="demo-chat", n=3, messages=[{"role": "user", "content": "ping"}])
    assert [c.index for c in three.choices] == [0, 1, 2]
    assert {c.message.content for c in three.choices} == {one.choices[0].message.content}
    assert one.usage is not None and three.usage is not None
    assert three.usage.completion_tokens == 3 * one.usage.completion_tokens
    chunks = list(client.chat.completions.create(model="demo-chat", n=2, stream=True,
                                                 messages=[{"role": "user", "content": "pong"}]))
    texts = ["".join(c.choices[0].delta.content or "" for c in chunks if c.choices and c.choices[0].index == i)
             for i in (0, 1)]
    assert texts[0] == texts[1] and "pong" in texts[0]


def test_demo_images_work_offline_as_labelled_pngs(demo_server: processes.HearthProcess) -> None:
    client = openai.OpenAI(base_url=demo_server.base_url + "/v1", api_key=DEMO_KEY, max_retries=0)
    drawn = client.images.generate(model="demo-image", prompt="A poster for the spring sale", size="256x256",
                                   response_format="b64_json")
    assert png_image(base64.b64decode(drawn.data[0].b64_json or ""))[:2] == (256, 256)
    url = client.images.generate(model="demo-image", prompt="A poster", size="512x512").data[0].url or ""
    with urllib.request.urlopen(url, timeout=10) as served:  # the signed URL needs no key
        assert served.headers["Content-Type"] == "image/png" and png_image(served.read())[:2] == (512, 512)


async def test_openai_sdk_async_non_stream_and_stream(demo_server: processes.HearthProcess) -> None:
    client = openai.AsyncOpenAI(base_url=demo_server.base_url + "/v1", api_key=DEMO_KEY, max_retries=0)
    reply = await client.chat.completions.create(model="demo-chat", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].finish_reason == "stop"
    stream = await client.chat.completions.create(model="demo-chat", stream=True,
                                                  stream_options={"include_usage": True},
                                                  messages=[{"role": "user", "content": "hi"}])
    usage = None
    async for chunk in stream:
        usage = chunk.usage or usage
    assert usage is not None and usage.prompt_tokens > 0
    await client.close()


def test_sdk_sees_openai_errors(demo_server: processes.HearthProcess) -> None:
    bad = openai.OpenAI(base_url=demo_server.base_url + "/v1", api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as auth:
        bad.models.list()
    assert auth.value.code == "invalid_api_key"
    good = openai.OpenAI(base_url=demo_server.base_url + "/v1", api_key=DEMO_KEY, max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        good.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert missing.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError):
        good.chat.completions.create(model="demo-chat", messages=[])
