"""Seed 000's registry shortcuts, on top of the declarative registry: ``POST /api/v1/model/providers``
(a provider by code) and ``POST /api/v1/models`` (a model of a provider: its endpoint and its public
model, in one call). Both are idempotent upserts by code; they build a :class:`RegistrySpec` and apply it,
so every rule of the registry file holds (names, keys encrypted at rest, references checked).

A model added this way gets one endpoint named ``<provider_code>.<model_name>`` and joins the public
model's pool (existing pool members are kept, so a model served by several providers is several calls).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from hearth.registry.config import ProviderKind, RegistrySpec
from hearth.registry.names import ExternalName, RegistryName
from hearth.registry.snapshot import Registry


class ProviderShortcut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider_code: RegistryName
    kind: ProviderKind = "openai"
    base_url: str | None = Field(default=None, description="the provider's API root, e.g. https://api.openai.com/v1")
    enabled: bool = True


class ModelShortcut(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider_code: RegistryName
    model_name: RegistryName = Field(description="the public model name callers use")
    upstream_model: ExternalName | None = Field(default=None, description="the provider's name (default: model_name)")
    api_key: str | None = Field(default=None, repr=False, description="required the first time; omitted: kept")
    base_url: str | None = Field(default=None, description="default: the provider's")
    kind: Literal["chat", "embedding"] = "chat"
    max_concurrency: int = Field(default=0, ge=0)
    rpm: int = Field(default=0, ge=0)
    tpm: int = Field(default=0, ge=0)
    enabled: bool = True


def provider_spec(body: ProviderShortcut) -> RegistrySpec:
    return RegistrySpec.model_validate({"providers": [{"name": body.provider_code, "kind": body.kind,
                                                       "base_url": body.base_url, "enabled": body.enabled}]})


def model_spec(body: ModelShortcut, registry: Registry) -> RegistrySpec:
    endpoint = f"{body.provider_code}.{body.model_name}"
    current = registry.models.get(body.model_name)
    pool = [ep.name for ep in current.endpoints] if current is not None else []
    if endpoint not in pool:
        pool.append(endpoint)
    ep: dict[str, Any] = {"name": endpoint, "provider": body.provider_code,
                          "upstream_model": body.upstream_model or body.model_name, "base_url": body.base_url,
                          "max_concurrency": body.max_concurrency, "rpm": body.rpm, "tpm": body.tpm,
                          "enabled": body.enabled}
    if body.api_key is not None:
        ep["api_key"] = body.api_key
    if body.kind == "embedding":
        ep["capabilities"] = ["embeddings"]
    return RegistrySpec.model_validate({"endpoints": [ep], "models": [
        {"name": body.model_name, "endpoints": pool, "kind": body.kind, "enabled": body.enabled}]})
