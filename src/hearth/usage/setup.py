"""Usage events as settings configure them: which sinks, the outbox writer, and the relay where it runs.

Nothing configured, nothing built: no writer (so no outbox row is ever written) and no relay. With a sink
configured, every process that serves calls writes the outbox; processes that run the scheduler
(``scheduler_enabled``) also relay it. Start-up refuses a webhook without a signing key, or one whose
address the guard refuses (``callback_url_allow`` lists private networks Hearth may call); a host name
that does not resolve yet, a NATS or RabbitMQ server that is down, only delay delivery.
"""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.capabilities.address_guard import AddressGuard
from hearth.errors import HearthError
from hearth.observability.logging import get_logger
from hearth.observability.request_log import RequestLogWriter
from hearth.observability.usage_events import ProviderOf
from hearth.observability.usage_outbox import UsageOutboxWriter
from hearth.settings import Settings
from hearth.usage.relay import RelayPolicy, UsageRelay
from hearth.usage.sinks import AmqpSink, NatsSink, UsageSink, WebhookSink

log = get_logger("hearth.usage")


def configured_sinks(settings: Settings) -> list[str]:
    names = []
    if settings.usage_webhook_url:
        names.append("webhook")
    if settings.usage_nats_url:
        names.append("nats")
    if settings.usage_amqp_url:
        names.append("amqp")
    return names


def _signing_key(settings: Settings) -> str | None:
    return settings.usage_webhook_signing_key or settings.callback_signing_key


async def check_usage_settings(settings: Settings, guard: AddressGuard) -> None:
    """``SystemExit`` naming the setting when the usage webhook cannot be used as configured."""
    url = settings.usage_webhook_url
    if not url:
        return
    if not _signing_key(settings):
        raise SystemExit("HEARTH_USAGE_WEBHOOK_URL needs HEARTH_USAGE_WEBHOOK_SIGNING_KEY (or "
                         "HEARTH_CALLBACK_SIGNING_KEY): usage events are signed like task callbacks")
    try:
        await guard.check_url(url)
    except HearthError as exc:
        if exc.code == "file_url_refused":
            raise SystemExit(f"HEARTH_USAGE_WEBHOOK_URL is refused: {exc.message.replace('fetch from', 'call')} "
                             "(HEARTH_CALLBACK_URL_ALLOW lists private networks Hearth may call)") from None
        log.warning("usage_webhook_url_unresolved", error=exc.code)


def build_sinks(settings: Settings, session: aiohttp.ClientSession, guard: AddressGuard) -> list[UsageSink]:
    timeout = settings.usage_relay_timeout_s
    sinks: list[UsageSink] = []
    key = _signing_key(settings)
    if settings.usage_webhook_url and key:
        sinks.append(WebhookSink(session, settings.usage_webhook_url, signing_key=key, guard=guard,
                                 timeout_s=timeout))
    if settings.usage_nats_url:
        sinks.append(NatsSink(settings.usage_nats_url, settings.usage_nats_subject,
                              jetstream=settings.usage_nats_jetstream, timeout_s=timeout))
    if settings.usage_amqp_url:
        sinks.append(AmqpSink(settings.usage_amqp_url, settings.usage_amqp_exchange, settings.usage_amqp_routing_key,
                              timeout_s=timeout))
    return sinks


def relay_policy(settings: Settings) -> RelayPolicy:
    return RelayPolicy(batch=settings.usage_relay_batch, interval_s=settings.usage_relay_interval_s,
                       max_backoff_s=settings.usage_relay_max_backoff_s, timeout_s=settings.usage_relay_timeout_s,
                       retention_s=settings.usage_outbox_retention_s)


@dataclass
class UsageEvents:
    """This process's part of usage events: the outbox writer, and the relay when it runs here."""

    writer: UsageOutboxWriter
    relay: UsageRelay | None

    def start(self, log_writer: RequestLogWriter) -> None:
        log_writer.on_written = self.writer.add
        self.writer.start()
        if self.relay is not None:
            self.relay.start()

    async def stop(self) -> None:
        """After the request-log writer stopped (its last batch handed over): write the rest, stop relaying."""
        await self.writer.stop()
        if self.relay is not None:
            await self.relay.stop()


def build_usage_events(settings: Settings, engine: AsyncEngine, session: aiohttp.ClientSession, *,
                       guard: AddressGuard, provider_of: ProviderOf) -> UsageEvents | None:
    """Usage events as configured (after :func:`check_usage_settings`); None when no sink is."""
    names = configured_sinks(settings)
    if not names:
        return None
    writer = UsageOutboxWriter(engine, names, provider_of, max_queue=settings.usage_outbox_queue,
                               batch=settings.request_log_batch, flush_s=settings.request_log_flush_s)
    relay = (UsageRelay(engine, build_sinks(settings, session, guard), relay_policy(settings))
             if settings.scheduler_enabled else None)
    return UsageEvents(writer=writer, relay=relay)
