"""The built-in simulated provider does what the demo's endpoints declare: `n` choices and JSON mode."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from jsonschema import Draft202012Validator

from hearth.providers.simulated_json import PLACEHOLDER, placeholder
from tests.support import gateway_registry

SCHEMAS: list[dict[str, Any]] = [
    {"type": "object", "properties": {"total": {"type": "number"}, "currency": {"enum": ["EUR", "USD"]},
                                      "lines": {"type": "array", "minItems": 2,
                                                "items": {"type": "object", "required": ["sku"],
                                                          "properties": {"sku": {"type": "string", "minLength": 20},
                                                                         "qty": {"type": "integer", "minimum": 1}}}},
                                      "paid": {"type": ["boolean", "null"]}},
     "required": ["total", "currency", "lines", "paid"], "additionalProperties": False},
    {"type": "array", "items": {"anyOf": [{"type": "integer", "exclusiveMinimum": 5}, {"type": "string"}]},
     "minItems": 1},
    {"const": {"fixed": True}},
    {"type": "string", "format": "date"},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_a_placeholder_is_valid_against_the_plain_parts_of_its_schema(schema: dict[str, Any]) -> None:
    value = placeholder(schema)
    assert list(Draft202012Validator(schema).iter_errors(value)) == []


def test_a_placeholder_says_it_is_simulated_and_a_recursive_schema_ends() -> None:
    assert placeholder({"type": "object", "properties": {"name": {"type": "string"}}}) == {"name": PLACEHOLDER}
    deep: dict[str, Any] = {"type": "object", "properties": {}}
    deep["properties"]["child"] = deep  # a schema that refers to itself
    value = placeholder(deep)
    for _ in range(17):
        value = value["child"]
    assert value is None


def _sim_server(hearth_server: Any) -> Any:
    return hearth_server(gateway_registry([{"name": "s", "provider": "sim", "upstream_model": "sim-1",
                                            "capabilities": ["chat", "streaming", "json"]}]))


async def test_json_mode_answers_json_and_a_schema_answer_validates(hearth_server: Any) -> None:
    server = _sim_server(hearth_server)
    async with openai.AsyncOpenAI(base_url=server.base_url + "/v1", api_key="test-key-123", max_retries=0) as client:
        plain = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                     response_format={"type": "json_object"})
        assert json.loads(plain.choices[0].message.content or "") == {"simulated": True, "received": "hi"}
        fmt: Any = {"type": "json_schema", "json_schema": {"name": "invoice", "schema": SCHEMAS[0], "strict": True}}
        shaped = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                      response_format=fmt)
        streamed = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                        response_format=fmt, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in streamed if c.choices])
    document = json.loads(shaped.choices[0].message.content or "")
    assert list(Draft202012Validator(SCHEMAS[0]).iter_errors(document)) == []
    assert json.loads(text) == document
