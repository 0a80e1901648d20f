"""The images door's parts on their own: the PNG drawing, signed URLs, the registry's image settings (stored
and loaded on both databases), routing by size and per-image prices."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.gateway.budget import highest_price, micro_cost
from hearth.gateway.image_calls import models_for_size
from hearth.images.urls import FILES_PATH, ImageUrls, derive_key
from hearth.providers.png_label import glyph, label_png
from hearth.providers.simulated import image_label
from hearth.registry.config import RegistrySpec
from hearth.registry.key_vault import KeyVault, parse_master_key
from hearth.registry.snapshot import Endpoint, Model, Price, Registry
from hearth.registry.store import apply_registry, load_registry
from tests.support import MASTER_KEY, gateway_registry, png_image

SHA = hashlib.sha256(b"an image").hexdigest()


def _image_endpoint(**extra: Any) -> dict[str, Any]:
    return {"name": "i", "provider": "openai-like", "upstream_model": "up-image", "capabilities": ["images"], **extra}


def test_the_label_png_is_a_valid_png_of_the_asked_size_and_shows_its_text() -> None:
    png = label_png(["[SIMULATED 1/1]", "A RED FOX"], width=300, height=120)
    assert png_image(png)[:2] == (300, 120)
    assert label_png(["A RED FOX"], width=64, height=64) != label_png(["A RED DOG"], width=64, height=64)
    assert label_png(["same"], width=64, height=64) == label_png(["same"], width=64, height=64)  # deterministic
    assert glyph("a") == glyph("A") and glyph("你") == glyph("€")  # lower case drawn upper, unknowns as a box
    with pytest.raises(ValueError, match="width and height"):
        label_png(["x"], width=0, height=10)


def test_the_simulated_label_names_the_image_and_the_prompts_first_words() -> None:
    assert image_label("a quarterly report poster in blue and gold tones", 2, 3) == [
        "[SIMULATED 2/3]", "a quarterly", "report poster in", "blue"]  # six words


def test_signed_urls_verify_until_they_expire_and_only_for_their_own_name() -> None:
    urls = ImageUrls(derive_key(parse_master_key(MASTER_KEY)), ttl_s=60)
    path = urls.path(SHA, "png", now=1000.0)
    name, query = path.removeprefix(FILES_PATH).split("?")
    params = dict(p.split("=", 1) for p in query.split("&"))
    assert params["expires"] == "1060"
    assert urls.verify(name, params["expires"], params["signature"], now=1060.0) == SHA
    refusals = [
        (name, params["expires"], params["signature"], 1061.0),  # expired
        (name, "1061", params["signature"], 1000.0),  # a longer life, same signature
        (f"{hashlib.sha256(b'other').hexdigest()}.png", params["expires"], params["signature"], 1000.0),
        (name.replace(".png", ".jpg"), params["expires"], params["signature"], 1000.0),
        ("../../etc/passwd", params["expires"], params["signature"], 1000.0),
        (name, None, params["signature"], 1000.0),
        (name, params["expires"], None, 1000.0),
    ]
    for args in refusals:
        with pytest.raises(HearthError) as refused:
            urls.verify(*args[:3], now=args[3])
        assert refused.value.code == "image_url_invalid", args
    other = ImageUrls(derive_key(parse_master_key("11" * 32)), ttl_s=60)  # another deployment's key
    with pytest.raises(HearthError):
        other.verify(name, params["expires"], params["signature"], now=1000.0)


def test_image_sizes_are_checked_and_need_the_images_capability() -> None:
    with pytest.raises(ValidationError, match="no `images` capability"):
        RegistrySpec.model_validate(gateway_registry([{**_image_endpoint(image_sizes=["64x64"]),
                                                       "capabilities": ["chat"]}]))
    with pytest.raises(ValidationError, match="WIDTHxHEIGHT"):
        RegistrySpec.model_validate(gateway_registry([_image_endpoint(image_sizes=["large"])]))
    with pytest.raises(ValidationError, match="WIDTHxHEIGHT"):
        RegistrySpec.model_validate(gateway_registry([_image_endpoint(image_sizes=["8192x8192"])]))
    spec = RegistrySpec.model_validate(gateway_registry([_image_endpoint(image_sizes=["64x64", "32x32", "64x64"])]))
    assert spec.endpoints[0].image_sizes == ["32x32", "64x64"]


async def test_image_sizes_and_per_image_prices_are_stored_and_loaded(engine: AsyncEngine) -> None:
    registry = gateway_registry([_image_endpoint(base_url="http://127.0.0.1:9/v1", image_sizes=["64x64"]),
                                 {"name": "c", "provider": "openai-like", "base_url": "http://127.0.0.1:9/v1",
                                  "upstream_model": "up"}],
                                prices=[{"model": "up-image", "input_per_1m": 1, "output_per_1m": 0, "per_image": 0.04},
                                        {"model": "up", "input_per_1m": 1, "output_per_1m": 2}])
    registry["models"] = [{"name": "img", "kind": "image", "endpoints": ["i"]}, {"name": "m", "endpoints": ["c"]}]
    vault = KeyVault(parse_master_key(MASTER_KEY))
    await apply_registry(engine, RegistrySpec.model_validate(registry), vault)
    again = await apply_registry(engine, RegistrySpec.model_validate(registry), vault)
    assert not again.changed  # idempotent with the new columns too
    loaded = await load_registry(engine, vault)
    assert loaded.endpoints["i"].image_sizes == frozenset({"64x64"}) and loaded.endpoints["c"].image_sizes is None
    assert loaded.models["img"].kind == "image"
    assert loaded.prices["up-image"].per_image == 0.04 and loaded.prices["up"].per_image == 0.0
    assert loaded.prices["up-image"].cost(1000, 0, images=3) == pytest.approx(0.001 + 0.12)


def test_per_image_prices_reserve_the_highest_price_and_cost_in_micro_units() -> None:
    eps = (Endpoint("x", "p", "openai", "http://x", "ux"), Endpoint("y", "p", "openai", "http://y", "uy"))

    registry = Registry(models={"img": Model("img", "image", eps)},
                        prices={"ux": Price("ux", 0, 0, per_image=0.02), "uy": Price("uy", 0, 0, per_image=0.05)})
    top = highest_price(registry, ("img",))
    assert top is not None and top.per_image == 0.05
    assert micro_cost(top, 0, 0, 3) == 150_000 and micro_cost(Price("p", 1, 0), 10, 0, 3) == 10


def test_routing_by_size_keeps_endpoints_that_draw_it_or_any_size() -> None:
    small = Endpoint("small", "p", "openai", "http://s", "u", image_sizes=frozenset({"64x64"}))
    any_size = Endpoint("any", "p", "openai", "http://a", "u")
    big = Endpoint("big", "p", "openai", "http://b", "u", image_sizes=frozenset({"1024x1024"}))
    models = [Model("img", "image", (small, any_size, big))]
    assert [e.name for e in models_for_size(models, "64x64")[0].endpoints] == ["small", "any"]
    assert models_for_size(models, None) is models and models_for_size(models, "auto") is models
    with pytest.raises(HearthError) as refused:
        models_for_size([Model("img", "image", (small, big))], "512x512")
    assert refused.value.code == "unsupported_feature" and refused.value.param == "size"
    assert refused.value.details["sizes_offered"] == ["1024x1024", "64x64"]
