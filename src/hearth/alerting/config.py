"""Whether this process raises alerts, and with which thresholds: :class:`AlertConfig` from the settings.

Alerts are on when ``HEARTH_ALERT_URL`` (or the older ``HEARTH_ALERT_WEBHOOK_URL``, which used to receive dead
letters only) is set. They are signed like task callbacks, so ``HEARTH_CALLBACK_SIGNING_KEY`` is required, and
the URL passes the callbacks' address guard at start (and again before every delivery): an alert a receiver
cannot authenticate, or one aimed at a private address not allowed, refuses the start instead of being sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hearth.capabilities.address_guard import AddressGuard
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.settings import Settings

log = get_logger("hearth.alerting")


@dataclass(frozen=True, slots=True)
class AlertConfig:
    url: str
    signing_key: str
    window_s: float = 3600.0
    check_interval_s: float = 30.0
    breaker_open_s: float = 300.0
    budget_thresholds: tuple[float, ...] = (0.8, 1.0)
    queue_age_s: dict[str, float] = field(default_factory=dict)
    review_lead_s: float = 900.0
    max_attempts: int = 8
    base_delay_s: float = 1.0
    max_delay_s: float = 300.0
    timeout_s: float = 10.0
    lease_s: float = 30.0


def alert_url(settings: Settings) -> str | None:
    return settings.alert_url or settings.alert_webhook_url


def alert_config(settings: Settings) -> AlertConfig | None:
    """The process's alert configuration; None when no alert URL is set (nothing is raised or sent)."""
    url = alert_url(settings)
    if url is None or not settings.callback_signing_key:
        return None
    return AlertConfig(url=url, signing_key=settings.callback_signing_key, window_s=settings.alert_window_s,
                       check_interval_s=settings.alert_check_interval_s,
                       breaker_open_s=settings.alert_breaker_open_minutes * 60,
                       budget_thresholds=tuple(sorted(settings.alert_budget_thresholds)),
                       queue_age_s=dict(settings.alert_queue_age_s), review_lead_s=settings.alert_review_lead_s,
                       max_attempts=settings.alert_max_attempts)


async def check_alert_url(settings: Settings, guard: AddressGuard) -> None:
    """Start-up check of the alert URL: ``SystemExit`` naming the setting when it cannot be used.

    A host name that does not resolve now is accepted with a warning: it is checked before every delivery,
    and an unreachable receiver is what the retries are for."""
    url = alert_url(settings)
    if url is None:
        return
    name = "HEARTH_ALERT_URL" if settings.alert_url else "HEARTH_ALERT_WEBHOOK_URL"
    if not settings.callback_signing_key:
        raise SystemExit(f"{name} needs HEARTH_CALLBACK_SIGNING_KEY: alerts are signed like task callbacks, so "
                         "the receiver can tell them from forgeries")
    try:
        await guard.check_url(url)
    except HearthError as exc:
        if exc.code == "file_url_refused":
            raise SystemExit(f"{name} is refused: {exc.message.replace('fetch from', 'call')} "
                             "(HEARTH_CALLBACK_URL_ALLOW lists private networks Hearth may call)") from None
        log.warning("alert_url_unresolved", error=exc.code)
