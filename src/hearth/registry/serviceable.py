"""Whether a registry can serve any call at all: the start-up check (seed 000).

A process that starts with no enabled provider, or no enabled model with an enabled endpoint, answers
every model call with an error; the operator should hear that at start, not from the first caller. By
default Hearth logs a warning (``registry_not_serviceable``) and starts anyway (an empty registry is
normal before the first ``hearth apply``); with ``HEARTH_REGISTRY_STRICT=true`` it refuses to start,
with nothing written to the database (the check runs inside the start-up apply, before its commit).
"""

from __future__ import annotations

from hearth.registry.snapshot import Registry

STRICT_HINT = ("HEARTH_REGISTRY_STRICT=true refuses to start such a registry; apply one with an enabled "
               "provider and an enabled model with an enabled endpoint (hearth apply FILE, or HEARTH_CONFIG)")


class RegistryNotServiceable(SystemExit):
    """A strict start refused: the message says what is missing (and ``SystemExit`` exits non-zero)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"the registry cannot serve any call: {'; '.join(problems)}. "
                         "Apply a registry with an enabled provider and an enabled model with an enabled "
                         "endpoint (hearth apply FILE, or HEARTH_CONFIG), enable a disabled endpoint "
                         "(POST /api/v1/admin/endpoints/{name}/enable), or start without "
                         "HEARTH_REGISTRY_STRICT")


def serviceability_problems(registry: Registry) -> list[str]:
    """What keeps ``registry`` from serving any call; empty when it can serve at least one model.

    A model counts when it is enabled and at least one endpoint of its pool is enabled as the router
    sees it (the endpoint's provider enabled too). When enabled models exist but none can be served, the
    message names each with its endpoints' disable reasons, which say what to fix.
    """
    problems = []
    if not registry.enabled_providers:
        problems.append("no enabled provider")
    enabled = [m for m in registry.models.values() if m.enabled]
    if not enabled:
        problems.append("no enabled model")
    elif not any(ep.enabled for m in enabled for ep in m.endpoints):
        details = ", ".join(
            f"{m.name}: " + ", ".join(f"{ep.name} [{ep.disabled_reason or 'disabled'}]" for ep in m.endpoints)
            for m in sorted(enabled, key=lambda m: m.name))
        problems.append(f"no enabled model has an enabled endpoint ({details})")
    return problems


def refuse_unless_serviceable(registry: Registry) -> None:
    """Raise :class:`RegistryNotServiceable` if ``registry`` cannot serve any call (the strict check)."""
    problems = serviceability_problems(registry)
    if problems:
        raise RegistryNotServiceable(problems)
