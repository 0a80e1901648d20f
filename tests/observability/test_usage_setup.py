"""Usage events as settings configure them: start-up refusals, and which process relays."""

from __future__ import annotations

import pytest

from hearth.capabilities.address_guard import AddressGuard
from hearth.settings import Settings
from hearth.store.db import create_engine
from hearth.usage.setup import build_usage_events, check_usage_settings


async def test_a_usage_webhook_without_a_signing_key_refuses_the_start() -> None:
    with pytest.raises(SystemExit, match="HEARTH_USAGE_WEBHOOK_SIGNING_KEY"):
        await check_usage_settings(Settings(usage_webhook_url="http://127.0.0.1:9/usage"),
                                   AddressGuard(["127.0.0.1/32"]))


async def test_a_usage_webhook_to_a_private_address_not_allowed_refuses_the_start() -> None:
    with pytest.raises(SystemExit, match="HEARTH_CALLBACK_URL_ALLOW"):
        await check_usage_settings(Settings(usage_webhook_url="http://127.0.0.1:9/usage",
                                            callback_signing_key="k" * 24), AddressGuard())


async def test_the_callback_key_signs_the_usage_webhook_when_it_has_none_of_its_own(tmp_path) -> None:
    settings = Settings(usage_webhook_url="http://127.0.0.1:9/usage", callback_signing_key="k" * 24)
    await check_usage_settings(settings, AddressGuard(["127.0.0.1/32"]))
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/x.db")
    try:
        usage = build_usage_events(settings, engine, None, guard=AddressGuard(["127.0.0.1/32"]),  # type: ignore[arg-type]
                                   provider_of=lambda _: None)
        assert usage is not None and usage.relay is not None
        assert [s.name for s in usage.relay.sinks] == ["webhook"] and usage.writer.sinks == ("webhook",)
    finally:
        await engine.dispose()


async def test_a_process_without_the_scheduler_writes_the_outbox_but_does_not_relay(tmp_path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path}/x.db")
    try:
        usage = build_usage_events(Settings(usage_nats_url="nats://127.0.0.1:4222", scheduler_enabled=False),
                                   engine, None, guard=AddressGuard(), provider_of=lambda _: None)  # type: ignore[arg-type]
        assert usage is not None and usage.relay is None and usage.writer.sinks == ("nats",)
    finally:
        await engine.dispose()
