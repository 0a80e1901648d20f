"""What a request needs from an endpoint, and which endpoints of its models have it.

Endpoints declare ``capabilities`` (``chat``, ``streaming``, ``tools``, ``json``, ``vision``,
``embeddings``; see :mod:`hearth.registry.config`). A request needs ``chat`` (or ``embeddings`` on the
embeddings route) plus whatever its body asks for: ``streaming`` for a stream, ``tools`` for tools or
legacy functions, ``json`` for a ``json_object``/``json_schema`` response format, ``vision`` for image
parts. Routing then only ever sees endpoints that have all of it: each model of the route is narrowed
to its capable endpoints *before* admission, so ordering, admission, failover and the truthful
Retry-After of a refusal all speak of the endpoints that could actually serve the call. A model with
none is skipped (a scene's default route moves to its fallbacks); when no model of the route has one
the caller gets 400 ``unsupported_feature`` naming the capability — before any limit is charged.

Cheap on the hot path: the needed set is computed once per call (a shared constant for plain chat),
an endpoint's capabilities are a frozenset from the registry snapshot, and a pool whose endpoints all
qualify is used as it is (no copy).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from hearth.errors import HearthError
from hearth.registry.snapshot import Model

__all__ = ["capable_models", "required_capabilities"]

CHAT: Final = frozenset({"chat"})
CHAT_STREAM: Final = frozenset({"chat", "streaming"})
EMBEDDINGS: Final = frozenset({"embeddings"})
IMAGES: Final = frozenset({"images"})
_JSON_FORMATS: Final = frozenset({"json_object", "json_schema"})
_IMAGE_PARTS: Final = frozenset({"image_url", "input_image", "image"})
#: the request field that asked for each capability (an error's ``param``)
PARAM_OF: Final = {"streaming": "stream", "tools": "tools", "json": "response_format", "vision": "messages",
                   "chat": "model", "embeddings": "model", "images": "model"}


def required_capabilities(body: dict[str, Any], *, kind: str, stream: bool) -> frozenset[str]:
    """The capabilities an endpoint needs to serve ``body`` on a ``kind`` ("chat"/"embedding"/"image") route."""
    if kind == "embedding":
        return EMBEDDINGS
    if kind == "image":
        return IMAGES
    extra: list[str] = []
    if body.get("tools") or body.get("functions"):
        extra.append("tools")
    response_format = body.get("response_format")
    if type(response_format) is dict and response_format.get("type") in _JSON_FORMATS:
        extra.append("json")
    if _has_image(body.get("messages")):
        extra.append("vision")
    if not extra:
        return CHAT_STREAM if stream else CHAT
    return (CHAT_STREAM if stream else CHAT).union(extra)


def _has_image(messages: Any) -> bool:
    if type(messages) is not list:
        return False
    for message in messages:
        content = message.get("content") if type(message) is dict else None
        if type(content) is list:
            for part in content:
                if type(part) is dict and part.get("type") in _IMAGE_PARTS:
                    return True
    return False


def capable_models(models: list[Model], needs: frozenset[str]) -> list[Model]:
    """Each model narrowed to the endpoints that have every capability in ``needs``; models with
    none left out. Raises 400 ``unsupported_feature`` (naming what is missing) if none is left."""
    out: list[Model] = []
    for model in models:
        if all(needs <= ep.capabilities for ep in model.endpoints):
            out.append(model)
            continue
        capable = tuple(ep for ep in model.endpoints if needs <= ep.capabilities)
        if capable:
            out.append(replace(model, endpoints=capable))
    if not out:
        raise _unsupported(models, needs)
    return out


def _unsupported(models: list[Model], needs: frozenset[str]) -> HearthError:
    offered: set[str] = set()
    for model in models:
        for ep in model.endpoints:
            offered |= ep.capabilities
    missing = sorted(needs - offered)
    together = not missing  # each is offered somewhere, but no endpoint has all of them at once
    if together:
        missing = sorted(needs - CHAT)
    names = " and ".join(missing)
    where = f"`{models[0].name}`" + (" or its fallback models" if len(models) > 1 else "")
    message = (f"No endpoint of {where} supports {names} together." if together
               else f"No endpoint of {where} supports {names}.")
    return HearthError("unsupported_feature", message, param=PARAM_OF.get(missing[0], "model"),
                       details={"capabilities": missing})
