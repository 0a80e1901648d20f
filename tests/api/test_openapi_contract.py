"""`/openapi.json` is a valid OpenAPI document (no dangling `$ref`), and the live server keeps it:
schemathesis generates requests from it for the `/v1` routes and the admin read routes and finds no
5xx and no answer that contradicts the document."""

from __future__ import annotations

import time
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from openapi_spec_validator import validate
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support import ADMIN, AUTH, examples, gateway_registry

MAX_EXAMPLES = examples(15)
SEED = 20261201


def _registry(fake: Any) -> dict[str, Any]:
    reg = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "up", "capabilities": ["chat", "streaming", "tools", "json", "vision"]},
                            {"name": "e", "provider": "openai-like", "base_url": fake.base_url,
                             "upstream_model": "emb", "capabilities": ["embeddings"]}])
    # the request schemas' example model names, so the explicit examples reach the upstream
    reg["models"] = [{"name": "demo-chat", "endpoints": ["a"]},
                     {"name": "demo-embedding", "kind": "embedding", "endpoints": ["e"]}]
    return reg


def _pointer(doc: Any, ref: str) -> Any:
    assert ref.startswith("#/"), f"external or malformed $ref {ref!r}"
    node = doc
    for raw in ref[2:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and part in node, f"dangling $ref {ref!r}"
        node = node[part]
    return node


def _refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in _refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _refs(v)]
    return []


async def test_openapi_json_is_a_valid_document_without_dangling_refs(fake, hearth_server, http):
    server = hearth_server(_registry(fake))
    doc = (await http.get(server.base_url + "/openapi.json")).json()
    validate(doc)  # openapi-spec-validator: the document against the OpenAPI 3.1 schema
    refs = _refs(doc)
    assert refs, "expected component references"
    for ref in refs:  # the validator does not follow refs nested inside schemas; check them all
        _pointer(doc, ref)
    # every documented status is one Hearth can send: no FastAPI 422 (validation errors are 400s)
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if path.startswith(("/v1/", "/api/v1/admin")):
                assert "422" not in op["responses"], (method, path)
    # request bodies state the limits the server enforces
    chat = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert chat["properties"]["temperature"]["anyOf"][0]["maximum"] == 2
    assert chat["properties"]["messages"]["items"]["properties"]["role"]["enum"]


async def test_every_operation_documents_its_error_envelope(fake, hearth_server, http):
    """Each API's errors are documented on every operation with that API's envelope (routes share one
    model field per envelope: hearth.api.route_defaults)."""
    server = hearth_server(_registry(fake))
    doc = (await http.get(server.base_url + "/openapi.json")).json()
    envelopes = {"/v1/messages": "AnthropicError", "/v1/": "OpenAIError", "/api/v1/": "ErrorEnvelope"}
    checked = 0
    for path, item in doc["paths"].items():
        envelope = next((name for prefix, name in envelopes.items() if path.startswith(prefix)), None)
        for method, op in item.items():
            if envelope is None or "4XX" not in op["responses"]:
                continue
            for status in ("4XX", "401"):
                schema = op["responses"][status]["content"]["application/json"]["schema"]
                assert schema == {"$ref": f"#/components/schemas/{envelope}"}, (method, path, status, schema)
            checked += 1
    assert checked > 80, checked
    assert "error" in doc["components"]["schemas"]["ErrorEnvelope"]["properties"]


def _is_checked(path: str, method: str) -> bool:
    return path.startswith("/v1/") or (path.startswith("/api/v1/admin") and method == "GET")


def _fuzz(op: Any, base_url: str, headers: dict[str, str], checks: list[Any], seen: dict[int, int]) -> None:
    """Up to MAX_EXAMPLES requests for one operation, deterministically: the request body's documented
    examples first (each must succeed as documented), then a mix of requests the document allows
    (positive) and requests it forbids (negative)."""
    body = (op.definition.raw.get("requestBody") or {}).get("content", {}).get("application/json", {})
    for example in body.get("schema", {}).get("examples", []):
        case = op.Case(body=example, media_type="application/json")
        response = case.call(base_url=base_url, headers=headers, timeout=30)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        case.validate_response(response, checks=checks, headers=headers)

    @seed(SEED)
    @settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy() | op.as_strategy(generation_mode=GenerationMode.NEGATIVE))
    def run(case: Any) -> None:
        response = case.call(base_url=base_url, headers=headers, timeout=30)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        case.validate_response(response, checks=checks, headers=headers)

    run()


def test_schemathesis_finds_no_server_error_and_no_schema_violation(fake, hearth_server):
    server = hearth_server(_registry(fake))
    schema = schemathesis.openapi.from_url(server.base_url + "/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    checked = [op for op in operations if _is_checked(op.path, op.method.upper())]
    assert {op.path for op in checked} >= {"/v1/chat/completions", "/v1/embeddings", "/v1/models",
                                           "/v1/models/{model_id}", "/api/v1/admin/{kind}",
                                           "/api/v1/admin/callers/{name}", "/api/v1/admin/endpoints/{name}/status"}
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    statuses: dict[str, dict[int, int]] = {}
    started = time.monotonic()
    for op in checked:
        seen = statuses.setdefault(f"{op.method.upper()} {op.path}", {})
        _fuzz(op, server.base_url, ADMIN if op.path.startswith("/api/") else AUTH, checks, seen)
    elapsed = time.monotonic() - started
    # the server was really exercised: every operation was called, and the chat route answered 200s
    assert all(sum(s.values()) > 0 for s in statuses.values()), statuses
    assert statuses["POST /v1/chat/completions"].get(200, 0) > 0, statuses
    assert statuses["POST /v1/embeddings"].get(200, 0) > 0, statuses
    assert fake.stats.requests > 0
    assert elapsed < 90, (elapsed, statuses)
