"""Scene governance: which model a call uses, how many tokens it may ask for, whether it may fall back.

Rules (seed 000): no model given → the scene's default model (the *default route*); a model outside
the scene's (and the caller's) allowlist → 403 ``model_not_allowed``; any output-limit field
(``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``) above the scene's cap → 400
``scene_max_tokens_exceeded`` naming that field; without one the cap applies (the gateway injects it). Only the
default route may fall back to the scene's fallback models; an explicitly named model never does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hearth.errors import HearthError
from hearth.registry.snapshot import Caller, Model, Registry, Scene
from hearth.wire.tokens import OUTPUT_LIMIT_FIELDS, requested_max_tokens


@dataclass(slots=True, frozen=True)
class Route:
    """The models to try in order (the first is the requested or default one) and the token cap."""

    models: tuple[str, ...]
    scene: str | None
    default_route: bool
    effective_max_tokens: int | None


def resolve_scene(registry: Registry, caller: Caller, requested_scene: str | None) -> Scene | None:
    name = requested_scene or caller.default_scene
    if name is None:
        return None
    scene = registry.scenes.get(name)
    if scene is None or not scene.enabled:
        raise HearthError("scene_not_found", f"The scene `{name}` does not exist.", param="scene")
    if caller.allowed_scenes is not None and name not in caller.allowed_scenes:
        raise HearthError("scene_not_allowed", f"This caller may not use the scene `{name}`.", param="scene")
    return scene


def plan_route(registry: Registry, caller: Caller, scene: Scene | None, body: dict[str, Any]) -> Route:
    """Decide the models and the max_tokens cap for one call, enforcing scene and caller rules."""
    requested = body.get("model")
    if requested is not None and (not isinstance(requested, str) or not requested):
        raise HearthError("invalid_request", "`model` must be a non-empty string.", param="model")
    asked = requested_max_tokens(body)
    if scene is None:
        if requested is None:
            raise HearthError("invalid_request", "`model` is required when no scene applies.", param="model")
        _check_caller_allows(caller, requested)
        return Route((requested,), None, False, asked)
    if scene.max_tokens_cap is not None:
        _check_cap(scene, scene.max_tokens_cap, body)
    effective = asked if asked is not None else scene.max_tokens_cap
    if requested is None:
        _check_caller_allows(caller, scene.default_model)
        fallbacks = tuple(m for m in scene.fallback_models if _caller_allows(caller, m))
        return Route((scene.default_model, *fallbacks), scene.name, True, effective)
    if requested not in scene.allowed_models:
        raise HearthError("model_not_allowed", f"The model `{requested}` is not allowed in the `{scene.name}` scene.",
                          param="model", details={"allowed": sorted(scene.allowed_models)})
    _check_caller_allows(caller, requested)
    return Route((requested,), scene.name, False, effective)


def _check_cap(scene: Scene, cap: int, body: dict[str, Any]) -> None:
    """Every output-limit field the request names must be a count within the cap."""
    for key in OUTPUT_LIMIT_FIELDS:
        value = body.get(key)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise HearthError("invalid_request", f"`{key}` must be a positive integer.", param=key)
        if value > cap:
            raise HearthError("scene_max_tokens_exceeded",
                              f"{key} {value} exceeds the `{scene.name}` scene's cap of {cap}.",
                              param=key, details={"cap": cap, "requested": value})


def _caller_allows(caller: Caller, model: str) -> bool:
    return caller.allowed_models is None or model in caller.allowed_models


def _check_caller_allows(caller: Caller, model: str) -> None:
    if not _caller_allows(caller, model):
        raise HearthError("model_not_allowed", f"This caller may not use the model `{model}`.", param="model")


def caller_may_see(registry: Registry, caller: Caller, model: Model) -> bool:
    """Whether ``model`` is one this caller may use: what ``/v1/models`` lists and retrieves.

    Its ``allowed_models`` allowlist first; then, for a chat model and a caller bound to scenes
    (``allowed_scenes`` or a ``default_scene``: every chat call of it runs in a scene), the model must be
    one of those scenes' default, allowed or fallback models. Embedding calls have no scene.
    """
    if not model.enabled or not _caller_allows(caller, model.name):
        return False
    if model.kind != "chat" or (caller.allowed_scenes is None and caller.default_scene is None):
        return True
    names = caller.allowed_scenes if caller.allowed_scenes is not None else registry.scenes.keys()
    for name in names:
        scene = registry.scenes.get(name)
        if scene is not None and scene.enabled and (
                model.name in scene.allowed_models or model.name in scene.fallback_models):
            return True
    return False
