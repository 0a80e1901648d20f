"""Registering workflow definitions over HTTP (admin): validated in full, versioned, idempotent, JSON or YAML."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from tests.support import ADMIN

WORKFLOWS = "/api/v1/workflows"
SHIPPED = "document-pipeline"  # registered by Hearth at every start (hearth.documents.install)
DEFINITION: dict[str, Any] = {"name": "doc-review", "steps": [
    {"id": "extract", "kind": "task", "task_type": "test.noop", "input": {"text": "${ $.input.text }"}},
    {"id": "check", "kind": "task", "task_type": "test.noop", "needs": ["extract"],
     "input": {"data": "${ $.steps.extract.output }"}},
    {"id": "approve", "kind": "approval", "needs": ["check"], "timeout_s": 86400,
     "form": {"type": "object"}},
]}


async def test_a_definition_is_versioned_and_registering_it_unchanged_adds_nothing(server: Any, http: Any) -> None:
    url = server.base_url + WORKFLOWS
    first = await http.post(url, json=DEFINITION, headers=ADMIN)
    assert first.status_code == 201, first.text
    assert (first.json()["data"]["version"], first.json()["data"]["created"]) == (1, True)
    again = await http.post(url, json=DEFINITION, headers=ADMIN)
    assert again.status_code == 200 and (again.json()["data"]["version"], again.json()["data"]["created"]) == (1, False)
    changed = copy.deepcopy(DEFINITION)
    changed["steps"][2]["timeout_s"] = 3600
    as_yaml = await http.post(url, content=yaml.safe_dump(changed),
                              headers={**ADMIN, "Content-Type": "application/yaml"})
    assert as_yaml.status_code == 201 and as_yaml.json()["data"]["version"] == 2
    assert (await http.get(f"{url}/doc-review", headers=ADMIN)).json()["data"]["version"] == 2
    v1 = (await http.get(f"{url}/doc-review", params={"version": 1}, headers=ADMIN)).json()["data"]
    assert v1["definition"]["steps"][2]["timeout_s"] == 86400
    assert [v["version"] for v in (await http.get(f"{url}/doc-review/versions", headers=ADMIN)).json()["data"][
        "versions"]] == [1, 2]
    listed = [(w["name"], w["version"]) for w in (await http.get(url, headers=ADMIN)).json()["data"]["workflows"]]
    assert [w for w in listed if w[0] != SHIPPED] == [("doc-review", 2)]


def _with(change: Any) -> dict[str, Any]:
    d = copy.deepcopy(DEFINITION)
    change(d)
    return d


@pytest.mark.parametrize(("definition", "param"), [
    (_with(lambda d: d["steps"][0].update(needs=["approve"])), None),  # a cycle
    (_with(lambda d: d["steps"][1].update(task_type="no.such.type")), "steps[1].task_type"),
    (_with(lambda d: d["steps"][1].update(needs=["ghost"])), "steps[1].needs[0]"),
    (_with(lambda d: d["steps"][0].update(input={"x": "${ $.steps.check.output }"})), "steps[0].input"),
    (_with(lambda d: d["steps"][2].pop("timeout_s")), "steps[2]"),
])
async def test_a_bad_definition_is_a_400_naming_the_path_and_stores_nothing(
        server: Any, http: Any, definition: dict[str, Any], param: str | None) -> None:
    url = server.base_url + WORKFLOWS
    before = (await http.get(url, headers=ADMIN)).json()["data"]["workflows"]
    r = await http.post(url, json=definition, headers=ADMIN)
    assert r.status_code == 400, r.text
    if param is not None:
        assert str(r.json()["error"]["details"].get("param", "")).startswith(param), r.json()["error"]
    assert (await http.get(url, headers=ADMIN)).json()["data"]["workflows"] == before
    assert [w["name"] for w in before] == [SHIPPED]  # only what Hearth registers itself


async def test_an_unknown_workflow_is_404_and_bad_yaml_is_400(server: Any, http: Any) -> None:
    url = server.base_url + WORKFLOWS
    assert (await http.get(f"{url}/nope", headers=ADMIN)).json()["error"]["code"] == "workflow_not_found"
    bad = await http.post(url, content=b"name: [unclosed", headers={**ADMIN, "Content-Type": "application/yaml"})
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_json"


async def test_a_run_is_started_and_read_over_http(server: Any, http: Any) -> None:
    url = server.base_url + WORKFLOWS
    assert (await http.post(url, json=DEFINITION, headers=ADMIN)).status_code == 201
    started = await http.post(f"{url}/doc-review/runs", json={"caller": "tester", "input": {"text": "hi"}},
                              headers=ADMIN)
    assert started.status_code == 201, started.text
    run = started.json()["data"]
    assert (run["state"], run["version"], run["input"]) == ("running", 1, {"text": "hi"})
    assert [(s["step_id"], s["state"]) for s in run["steps"]] == [("extract", "running"), ("check", "waiting"),
                                                                  ("approve", "waiting")]
    task = run["steps"][0]["task_id"]
    again = (await http.get(f"{url}/runs/{run['id']}", headers=ADMIN)).json()["data"]
    assert again["steps"][0]["task_id"] == task  # submitted once, whoever advances the run
    assert (await http.post(f"{url}/doc-review/runs", json={"caller": "nobody"}, headers=ADMIN)).status_code == 400
    assert (await http.get(f"{url}/runs/wfr_missing", headers=ADMIN)).json()["error"]["code"] == \
        "workflow_run_not_found"
