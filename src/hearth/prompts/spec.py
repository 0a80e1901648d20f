"""What an operator may say about a prompt version or a role (admin API and registry import), validated
before anything touches the database, and the immutable runtime records built from it.

A prompt version is immutable once created: its *runtime fields* (contents per locale, variables, bound
model and scene, output schema, generation parameters, quality gate) are hashed (``content_hash``), so
an import recognises an unchanged version and a changed one becomes a new version. Its *status*
(``inactive`` → ``active`` → ``inactive`` | ``disabled``) is the only thing that moves, always through
:func:`hearth.prompts.store.set_status`, which keeps exactly one ``active`` version per code.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

Status = Literal["inactive", "active", "disabled"]
CODE_PATTERN = r"^[a-z0-9][a-z0-9_.-]{0,127}$"
_LOCALE = re.compile(r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8}){0,3}$")
_VARIABLE = re.compile(r"^[a-z_][a-z0-9_]{0,63}$")
# Generation parameters a prompt may pin (sent to the model with the call); anything else is refused.
PARAMS = frozenset({"temperature", "top_p", "max_tokens", "presence_penalty", "frequency_penalty", "stop", "seed",
                    "response_format"})
JsonScalar = str | int | float | bool | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class VariableSpec(_Strict):
    name: str = Field(description="a lower-case identifier used in the template as `{{ name }}`")
    required: bool = False
    allowed: list[JsonScalar] | None = Field(default=None, description="the only values accepted, if set")
    default: Any = Field(default=None, description="used when the request does not give the variable")
    description: str | None = None

    @field_validator("name")
    @classmethod
    def _identifier(cls, name: str) -> str:
        if not _VARIABLE.fullmatch(name):
            raise ValueError(f"variable name {name!r} must be a lower-case identifier (a-z, 0-9, _)")
        return name

    @model_validator(mode="after")
    def _default_allowed(self) -> VariableSpec:
        if self.allowed is not None and self.default is not None and self.default not in self.allowed:
            raise ValueError(f"variable {self.name!r}: the default is not one of the allowed values")
        return self


class ContentSpec(_Strict):
    system: str | None = Field(default=None, description="an optional system message template")
    user: str = Field(description="the user message template (Jinja2, sandboxed)")


class RulesSpec(_Strict):

    min_chars: int | None = Field(default=None, ge=0)
    max_chars: int | None = Field(default=None, ge=1)
    must_include: list[str] = Field(default_factory=list)
    must_not_include: list[str] = Field(default_factory=list)


class JudgeSpec(_Strict):

    prompt_code: str = Field(min_length=1, max_length=128)
    threshold: float = Field(default=0.7, ge=0.0, le=1.0)
    model: str | None = None


class QualityGateSpec(_Strict):

    rules: RulesSpec = Field(default_factory=RulesSpec)
    judge: JudgeSpec | None = None
    max_regenerations: int = Field(default=1, ge=0, le=5)


class PromptVersionSpec(_Strict):
    """The runtime fields of one version."""

    default_locale: str = "en"
    contents: dict[str, ContentSpec | str] = Field(
        description="templates per locale: a string (the user message) or {system, user}; must include "
        "the default locale")
    variables: list[VariableSpec] = Field(default_factory=list)
    model: str | None = Field(default=None, description="a public model name this prompt is bound to")
    scene: str | None = Field(default=None, description="the scene its calls run in, unless the request names one")
    output_schema: dict[str, Any] | None = Field(default=None, description="a JSON Schema the output must match")
    params: dict[str, Any] = Field(default_factory=dict, description="generation parameters: " + ", ".join(
        sorted(PARAMS)))
    quality_gate: dict[str, Any] | None = Field(default=None, description="rule checks and an optional judge")

    @field_validator("default_locale")
    @classmethod
    def _locale(cls, value: str) -> str:
        return check_locale(value)

    @field_validator("contents")
    @classmethod
    def _contents(cls, value: dict[str, ContentSpec | str]) -> dict[str, ContentSpec | str]:
        if not value:
            raise ValueError("contents must hold at least one locale")
        for locale in value:
            check_locale(locale)
        return value

    @field_validator("params")
    @classmethod
    def _params(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - PARAMS)
        if unknown:
            raise ValueError(f"unknown generation parameters {unknown}; allowed: {sorted(PARAMS)}")
        return value

    @field_validator("quality_gate")
    @classmethod
    def _gate(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else QualityGateSpec.model_validate(value).model_dump()

    @field_validator("output_schema")
    @classmethod
    def _schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            try:
                canonical = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
            except orjson.JSONEncodeError:
                raise ValueError("output_schema must be plain JSON (string keys, JSON values)") from None
            problem = _schema_problem(canonical)
            if problem is not None:
                raise ValueError(f"output_schema is not a valid JSON Schema: {problem}")
        return value

    @model_validator(mode="after")
    def _default_present(self) -> PromptVersionSpec:
        if self.default_locale not in self.contents:
            raise ValueError(f"contents has no entry for the default locale {self.default_locale!r}")
        names = [v.name for v in self.variables]
        if len(names) != len(set(names)):
            raise ValueError("variable names must be unique")
        return self

    def normalized_contents(self) -> dict[str, dict[str, str | None]]:
        return {locale: ({"system": None, "user": c} if isinstance(c, str) else {"system": c.system, "user": c.user})
                for locale, c in sorted(self.contents.items())}

    def content_hash(self) -> str:
        """sha256 of the runtime fields, canonical JSON: equal hashes mean an equal version."""
        doc = {"default_locale": self.default_locale, "contents": self.normalized_contents(),
               "variables": [v.model_dump() for v in self.variables], "model": self.model, "scene": self.scene,
               "output_schema": self.output_schema, "params": self.params, "quality_gate": self.quality_gate}
        return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()


class PromptCreate(PromptVersionSpec):
    """``POST /api/v1/prompts``: a new code with version 1, or a new version of an existing code."""

    code: str = Field(pattern=CODE_PATTERN)
    display_name: str | None = Field(default=None, max_length=256)
    description: str | None = None
    activate: bool | None = Field(default=None, description="make the new version the active one; default: only "
                                  "if the prompt has no active version yet")
    operator: str = Field(default="api", min_length=1, max_length=128)
    reason: str | None = None


class VersionPatch(_Strict):
    """``PATCH .../versions/{version}``: a status change (audited: operator and reason are required) and/or
    the prompt's display fields."""

    status: Status | None = None
    canary_share: float | None = Field(default=None, ge=0.0, le=0.5, description="share of requests (0–0.5) "
                                       "served by this non-active version; 0 ends the canary")
    display_name: str | None = Field(default=None, max_length=256)
    description: str | None = None
    operator: str | None = Field(default=None, min_length=1, max_length=128)
    reason: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _audited(self) -> VersionPatch:
        if (self.status is not None or self.canary_share is not None) and (not self.operator or not self.reason):
            raise ValueError("a status or canary change needs `operator` and `reason` (they go to the audit trail)")
        if self.status is None and self.canary_share is None and self.display_name is None \
                and self.description is None:
            raise ValueError("nothing to change")
        return self


class RoleSpec(_Strict):
    code: str = Field(pattern=CODE_PATTERN)
    display_name: str | None = Field(default=None, max_length=256)
    default_locale: str = "en"
    persona: dict[str, str] = Field(description="the system prompt per locale; must include the default locale")
    prompt_code: str | None = Field(default=None, pattern=CODE_PATTERN)
    model: str | None = None
    scene: str | None = None
    enabled: bool = True

    @field_validator("default_locale")
    @classmethod
    def _locale(cls, value: str) -> str:
        return check_locale(value)

    @model_validator(mode="after")
    def _default_present(self) -> RoleSpec:
        for locale in self.persona:
            check_locale(locale)
        if self.default_locale not in self.persona:
            raise ValueError(f"persona has no entry for the default locale {self.default_locale!r}")
        return self


class RolePatch(_Strict):
    display_name: str | None = Field(default=None, max_length=256)
    default_locale: str | None = None
    persona: dict[str, str] | None = None
    prompt_code: str | None = Field(default=None, description="a prompt code, or \"\" to unbind")
    model: str | None = Field(default=None, description="a model name, or \"\" to unbind")
    scene: str | None = None
    enabled: bool | None = None


def check_locale(value: str) -> str:
    if not _LOCALE.fullmatch(value):
        raise ValueError(f"{value!r} is not a locale tag (e.g. en, zh, zh-CN)")
    return value


# ---- runtime records (what the catalog serves) -------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    required: bool
    allowed: tuple[JsonScalar, ...] | None
    default: Any
    description: str | None


@dataclass(frozen=True, slots=True)
class PromptVersion:
    code: str
    version: int
    status: Status
    default_locale: str
    contents: Mapping[str, Mapping[str, str | None]]
    variables: tuple[Variable, ...]
    model: str | None
    scene: str | None
    output_schema: Mapping[str, Any] | None
    params: Mapping[str, Any]
    quality_gate: Mapping[str, Any] | None
    canary_share: float
    content_hash: str


@dataclass(frozen=True, slots=True)
class Role:
    code: str
    display_name: str
    default_locale: str
    persona: Mapping[str, str]
    prompt_code: str | None
    model: str | None
    scene: str | None
    enabled: bool


def version_from_row(row: Mapping[str, Any]) -> PromptVersion:
    variables = tuple(Variable(v["name"], bool(v.get("required")),
                               tuple(v["allowed"]) if v.get("allowed") is not None else None,
                               v.get("default"), v.get("description")) for v in row["variables"])
    return PromptVersion(code=row["code"], version=int(row["version"]), status=row["status"],
                         default_locale=row["default_locale"], contents=row["contents"], variables=variables,
                         model=row["model"], scene=row["scene"], output_schema=row["output_schema"],
                         params=row["params"] or {}, quality_gate=row["quality_gate"],
                         canary_share=float(row["canary_share"] or 0.0), content_hash=row["content_hash"])


def role_from_row(row: Mapping[str, Any]) -> Role:
    return Role(code=row["code"], display_name=row["display_name"], default_locale=row["default_locale"],
                persona=row["persona"], prompt_code=row["prompt_code"], model=row["model"], scene=row["scene"],
                enabled=bool(row["enabled"]))


@functools.lru_cache(maxsize=256)
def _schema_problem(canonical: bytes) -> str | None:
    """Why a JSON Schema (as canonical JSON) is not valid, or None. Cached: checking a schema against the
    meta-schema costs milliseconds, and every start loads the same shipped prompts again (the document
    pipeline's extraction prompt, say)."""
    try:
        Draft202012Validator.check_schema(orjson.loads(canonical))
    except SchemaError as exc:
        return str(exc.message)
    return None
