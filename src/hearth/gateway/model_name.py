"""Which model name a call's answers show: the public one the caller asked for, by default.

The upstream's own name is always in the ``x-hearth-upstream-model`` header; a model with
``expose_upstream_model`` shows the upstream's name in the body too. The same rule holds for
non-stream answers, stream chunks and the usage chunk Hearth synthesizes.
"""

from __future__ import annotations

from hearth.registry.snapshot import Endpoint, Registry


def shown_model(registry: Registry, public: str | None, endpoint: Endpoint | None) -> str | None:
    """The name to write into the answer's ``model``, or None to leave the upstream's bytes untouched
    (no call model or endpoint, the names are equal, or the model exposes the upstream's)."""
    if endpoint is None or public is None or endpoint.upstream_model == public:
        return None
    model = registry.models.get(public)
    if model is not None and model.expose_upstream_model:
        return None
    return public
