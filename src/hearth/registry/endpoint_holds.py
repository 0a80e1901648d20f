"""Whose decision an endpoint's ``enabled`` is, and what an apply of the registry file may change about it.

Three parties disable endpoints: the registry file (``enabled: false``, recorded as ``config``), the
gateway (an upstream answered 401/403: the key is bad, recorded as ``gateway``) and an operator through
the admin API (``admin``). The file is the authority for its own ``enabled: false``, but it cannot
overrule a runtime decision it knows nothing about: re-applying the file that holds a rejected key, or
restarting with it, would put that key straight back into rotation. So a runtime disable is a *hold*:
it survives ``hearth apply`` and restarts until an operator enables the endpoint (admin API) or the
file brings a NEW key for it (the one thing that can fix a rejected credential).

This module holds the rule only (no SQL): :func:`resolve` gets the stored state and what the file says,
and returns the columns to write and what to report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

DisabledBy = Literal["config", "gateway", "admin"]
RUNTIME_DISABLERS: frozenset[str] = frozenset({"gateway", "admin"})
DISABLED_IN_CONFIG = "disabled in config"


@dataclass(frozen=True, slots=True)
class StoredState:
    """An endpoint row's enabled-state columns as the database holds them."""

    enabled: bool
    disabled_by: str | None
    disabled_reason: str | None
    disabled_at: datetime | None

    @property
    def held(self) -> bool:
        """Disabled at runtime (gateway or admin): only an operator's enable or a new key lifts it."""
        return not self.enabled and self.disabled_by in RUNTIME_DISABLERS


@dataclass(frozen=True, slots=True)
class KeptDisabled:
    """An endpoint the file wants enabled that stays disabled by a runtime decision (reported by apply)."""

    name: str  # "endpoint:<name>", like the other report entries
    reason: str
    disabled_by: str

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "reason": self.reason, "disabled_by": self.disabled_by}


@dataclass(frozen=True, slots=True)
class Resolution:
    values: dict[str, Any]  # enabled, disabled_reason, disabled_by, disabled_at
    outcome: Literal["kept_disabled", "re_enabled"] | None = None


def resolve(stored: StoredState | None, *, file_enabled: bool, new_key: bool, now: datetime) -> Resolution:
    """The enabled-state columns an apply writes for one endpoint.

    * held and no new key: the stored state stays as it is; ``kept_disabled`` if the file wants it enabled;
    * held and a new key: the hold is lifted; ``re_enabled`` if the file wants it enabled;
    * otherwise the file decides: enabled, or disabled ``config`` (its ``disabled_at`` kept while it stays so,
      so re-applying an unchanged file writes nothing).
    """
    if stored is not None and stored.held and not new_key:
        values = {"enabled": False, "disabled_reason": stored.disabled_reason, "disabled_by": stored.disabled_by,
                  "disabled_at": stored.disabled_at}
        return Resolution(values, "kept_disabled" if file_enabled else None)
    outcome: Literal["re_enabled"] | None = "re_enabled" if stored is not None and stored.held and file_enabled \
        else None
    if file_enabled:
        return Resolution({"enabled": True, "disabled_reason": None, "disabled_by": None, "disabled_at": None},
                          outcome)
    already = stored is not None and not stored.enabled and stored.disabled_by == "config"
    return Resolution({"enabled": False, "disabled_reason": DISABLED_IN_CONFIG, "disabled_by": "config",
                       "disabled_at": stored.disabled_at if already and stored is not None else now}, outcome)


def runtime_state(enabled: bool, reason: str | None, *, by: DisabledBy, now: datetime) -> dict[str, Any]:
    """The columns an enable or a runtime disable writes: enabling clears every trace of the disable."""
    if enabled:
        return {"enabled": True, "disabled_reason": None, "disabled_by": None, "disabled_at": None}
    return {"enabled": False, "disabled_reason": reason, "disabled_by": by, "disabled_at": now}


def effective_state(*, enabled: bool, reason: str | None, disabled_by: str | None, provider: str,
                    provider_enabled: bool) -> tuple[bool, str | None, str | None]:
    """(enabled, reason, disabled_by) as the router sees it: an endpoint of a disabled provider is skipped,
    so it is shown disabled too, ``disabled_by`` ``provider``. The endpoint's own disable, if any, is named
    first (it is the one that needs lifting)."""
    if not enabled:
        return False, reason, disabled_by
    if not provider_enabled:
        return False, f"provider {provider!r} disabled", "provider"
    return True, None, None
