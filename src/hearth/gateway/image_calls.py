"""What the gateway needs to know about an image generation call, beyond what every call has.

An image call (``POST /v1/images/generations``, the ``image_generate_async`` task) goes through the same
:class:`~hearth.gateway.service.Gateway` steps as a chat call — caller admission, strict budgets, endpoint
attempts with failover, settlement, the request log — with three differences, all decided here:

* **routing by size**: the endpoints of an ``image`` model are narrowed to those that have the ``images``
  capability (:mod:`hearth.gateway.endpoint_capabilities`) *and* list the requested ``size`` in their
  ``image_sizes`` (an endpoint without ``image_sizes`` draws any size). No endpoint left → 400
  ``unsupported_feature`` naming the size, before any limit is charged;
* **the reservation**: ``n`` images at the highest ``per_image`` price of any endpoint the call may use,
  plus the prompt's upper bound in tokens at the input rate (no completion tokens);
* **the settlement**: the images the upstream actually returned (:attr:`Usage.images`), so a provider
  that draws fewer than asked is charged for what it drew;
* **no failover once the request was sent**: an endpoint that took the request and then timed out (or cut
  the connection) may still draw and bill the images, so the call ends there with 502/504
  ``upstream_outcome_unknown`` (``x-should-retry: false``) instead of asking a second endpoint. Refusals
  (429, 5xx answers) and connections never made fail over as usual. Such a call — and one whose client
  left while its request was at the upstream — is settled as if all ``n`` images were drawn (flagged
  estimated): a budget may be charged for images nobody got, never overspent by images it did not count.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from hearth.errors import HearthError, UpstreamOutcomeUnknown
from hearth.registry.snapshot import Endpoint, Model
from hearth.wire.tokens import estimate_text

__all__ = ["MAX_IMAGES", "image_count", "models_for_size", "outcome_unknown", "prompt_bound",
           "prompt_estimate"]

MAX_IMAGES: Final = 10  # OpenAI's own limit on `n`
ANY_SIZE: Final = "auto"  # the upstream picks (gpt-image-1): every endpoint can serve it


def image_count(body: dict[str, Any]) -> int:
    """The ``n`` of a checked body (1 when absent)."""
    n = body.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) else 1


def prompt_estimate(body: dict[str, Any]) -> int:
    """The prompt's approximate tokens (what rate limits are charged with)."""
    prompt = body.get("prompt")
    return estimate_text(prompt) if isinstance(prompt, str) else 0


def prompt_bound(body: dict[str, Any]) -> int:
    """An upper bound of the prompt's tokens (UTF-8 bytes: see :func:`hearth.wire.tokens.prompt_upper_bound`)."""
    prompt = body.get("prompt")
    return len(prompt.encode()) if isinstance(prompt, str) else 0


def _draws(ep: Endpoint, size: str) -> bool:
    return ep.image_sizes is None or size in ep.image_sizes


def models_for_size(models: list[Model], size: Any) -> list[Model]:
    """Each model narrowed to the endpoints that draw ``size`` (None or ``auto``: all of them); models with
    none left out. Raises 400 ``unsupported_feature`` naming the size (and the sizes offered) if none is left."""
    if not isinstance(size, str) or size == ANY_SIZE:
        return models
    out: list[Model] = []
    for model in models:
        capable = tuple(ep for ep in model.endpoints if _draws(ep, size))
        if len(capable) == len(model.endpoints):
            out.append(model)
        elif capable:
            out.append(replace(model, endpoints=capable))
    if out:
        return out
    offered = sorted({s for m in models for ep in m.endpoints for s in (ep.image_sizes or ())})
    raise HearthError("unsupported_feature", f"No endpoint of `{models[0].name}` draws images of size {size}"
                      + (f" (sizes offered: {', '.join(offered)})." if offered else "."), param="size",
                      details={"capabilities": ["images"], "size": size, "sizes_offered": offered})


def outcome_unknown(exc: UpstreamOutcomeUnknown) -> HearthError:
    """The caller's error for an image call whose upstream may have drawn the images (504 after a timeout)."""
    what = "did not answer in time" if exc.timeout else "cut the connection before answering"
    return HearthError("upstream_outcome_unknown", f"The image endpoint {what}; it may still draw (and bill) the "
                       "images, so Hearth did not ask another endpoint. Check before generating again.",
                       status=504 if exc.timeout else None)
