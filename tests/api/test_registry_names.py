"""Registry names follow one pattern (no '/', '..', whitespace or control characters) in the YAML file,
in admin bodies and in admin URL paths; a bad one is a 400 naming the field, never a 404 or a 500."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from hearth.registry.config import RegistrySpec
from hearth.registry.names import is_valid_name
from tests.support import ADMIN, gateway_registry

ROOT = Path(__file__).resolve().parents[2]
ADMIN_BASE = "/api/v1/admin"

BAD_NAMES = ["a/b", "..", "a..b", "-lead", ".hidden", "a b", "tab\tname", "new\nline", "nul\x00", "x" * 129, "",
             "ünï", "semi;colon", "a\x7f"]
GOOD_NAMES = ["a", "A1", "gpt-4o-mini", "team.app:v2", "x_y", "9lives", "x" * 128, "a.b-c_d:e"]


@pytest.mark.parametrize("name", BAD_NAMES)
def test_bad_names_are_refused_in_every_registry_kind(name: str) -> None:
    assert not is_valid_name(name)
    specs: list[dict[str, Any]] = [
        {"providers": [{"name": name, "kind": "openai"}]},
        {"quota_groups": [{"name": name}]},
        {"endpoints": [{"name": name, "provider": "p", "upstream_model": "u"}]},
        {"models": [{"name": name, "endpoints": ["e"]}]},
        {"callers": [{"name": name}]},
        {"scenes": [{"name": name, "default_model": "m"}]},
        {"budgets": [{"name": name, "limit": 1}]},
        # references to names follow the same rule
        {"endpoints": [{"name": "e", "provider": name, "upstream_model": "u"}]},
        {"endpoints": [{"name": "e", "provider": "p", "quota_group": name, "upstream_model": "u"}]},
        {"models": [{"name": "m", "endpoints": [name]}]},
        {"callers": [{"name": "c", "allowed_models": [name]}]},
        {"callers": [{"name": "c", "default_scene": name}]},
        {"scenes": [{"name": "s", "default_model": name}]},
        {"scenes": [{"name": "s", "default_model": "m", "fallback_models": [name]}]},
        {"budgets": [{"name": "b", "caller": name, "limit": 1}]},
    ]
    for spec in specs:
        with pytest.raises(ValidationError):
            RegistrySpec.model_validate(spec)


@pytest.mark.parametrize("name", GOOD_NAMES)
def test_good_names_are_accepted(name: str) -> None:
    assert is_valid_name(name)
    RegistrySpec.model_validate({"providers": [{"name": name, "kind": "openai"}],
                                 "endpoints": [{"name": name, "provider": name, "upstream_model": "org/model@v1"}],
                                 "models": [{"name": name, "endpoints": [name]}],
                                 "budgets": [{"name": name, "caller": "*", "limit": 1}]})


def test_upstream_models_and_price_keys_stay_free_form_but_bounded() -> None:
    ok = RegistrySpec.model_validate({"endpoints": [{"name": "e", "provider": "p",
                                                    "upstream_model": "meta-llama/Llama-3.1-70B Instruct"}],
                                      "prices": [{"model": "meta-llama/Llama-3.1-70B Instruct", "input_per_1m": 1,
                                                  "output_per_1m": 2}]})
    assert ok.prices[0].model.startswith("meta-llama/")
    for bad in ("", " padded", "new\nline", "x" * 257):
        with pytest.raises(ValidationError):
            RegistrySpec.model_validate({"endpoints": [{"name": "e", "provider": "p", "upstream_model": bad}]})
        with pytest.raises(ValidationError):
            RegistrySpec.model_validate({"prices": [{"model": bad, "input_per_1m": 1, "output_per_1m": 1}]})
    with pytest.raises(ValidationError):
        RegistrySpec.model_validate({"budgets": [{"name": "b", "limit": 1, "subject": "t\x00"}]})


def test_the_demo_config_is_still_valid() -> None:
    raw = yaml.safe_load((ROOT / "examples" / "hearth.demo.yaml").read_text())
    spec = RegistrySpec.model_validate(raw)
    assert spec.models and spec.callers


def _registry(fake: Any) -> dict[str, Any]:
    return gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                              "upstream_model": "up"}])


# URL-encoded so the server really receives them (httpx would normalise some of them away)
BAD_PATHS = ["a%2Fb", "a/b", "a..b", "%2E%2E", "a%20b", "a%00b", "a%0Ab", "x" * 129, "-x", "%C3%BC"]


async def test_admin_paths_and_bodies_refuse_bad_names_with_400(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    base = server.base_url + ADMIN_BASE
    failures = []
    for kind, body in (("providers", {"kind": "openai"}), ("quota-groups", {}),
                       ("endpoints", {"provider": "openai-like", "upstream_model": "u"}),
                       ("models", {"endpoints": ["a"]}), ("scenes", {"default_model": "m"}),
                       ("budgets", {"limit": 1})):
        for bad in BAD_PATHS:
            r = await http.put(f"{base}/{kind}/{bad}", json=body, headers=ADMIN)
            if r.status_code != 400 or r.json()["error"]["code"] != "invalid_request":
                failures.append((kind, bad, r.status_code, r.text[:200]))
    for bad in BAD_PATHS:
        for method, path in (("POST", f"/endpoints/{bad}/enable"), ("POST", f"/endpoints/{bad}/disable"),
                             ("GET", f"/endpoints/{bad}/status"), ("GET", f"/callers/{bad}"),
                             ("PUT", f"/callers/{bad}"), ("POST", f"/callers/{bad}/rotate"),
                             ("POST", f"/callers/{bad}/revoke")):
            r = await http.request(method, base + path, headers=ADMIN, json={} if method == "PUT" else None)
            if r.status_code != 400 or r.json()["error"]["code"] != "invalid_request":
                failures.append((method, path, r.status_code, r.text[:200]))
    assert not failures, failures

    # references inside a body, with the field named
    r = await http.put(f"{base}/endpoints/e2", json={"provider": "open/ai", "upstream_model": "u"}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["loc"] == ["provider"]
    r = await http.put(f"{base}/models/m2", json={"endpoints": ["a", "../a"]}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["loc"] == ["endpoints", 1]
    r = await http.post(f"{base}/callers", json={"name": "evil\nname"}, headers=ADMIN)
    assert r.status_code == 400 and r.json()["error"]["details"]["errors"][0]["loc"] == ["name"]

    # good names still work, and a price key may be an upstream model name with '/'
    r = await http.put(f"{base}/providers/p.v2:x", json={"kind": "openai"}, headers=ADMIN)
    assert r.status_code == 200, r.text
    r = await http.put(f"{base}/prices/meta-llama/Llama-3.1-70B", json={"input_per_1m": 1, "output_per_1m": 2},
                       headers=ADMIN)
    assert r.status_code == 200, r.text
    r = await http.put(f"{base}/prices/bad%0Aprice", json={"input_per_1m": 1, "output_per_1m": 2}, headers=ADMIN)
    assert r.status_code == 400
    assert (await http.get(f"{base}/endpoints/a/status", headers=ADMIN)).status_code == 200
    assert (await http.post(f"{base}/endpoints/a/disable", headers=ADMIN)).status_code == 200
