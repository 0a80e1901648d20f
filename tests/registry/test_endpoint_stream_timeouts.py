"""An endpoint's own stream timeouts: validated in the file, stored, and carried into the snapshot."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from hearth.registry.config import RegistrySpec
from hearth.registry.key_vault import KeyVault, parse_master_key
from hearth.registry.store import apply_registry, load_registry
from hearth.store.db import create_engine, migrate
from tests.support import MASTER_KEY, gateway_registry


def _endpoint(**extra: Any) -> dict[str, Any]:
    return {"name": "a", "provider": "openai-like", "upstream_model": "up", **extra}


def test_a_first_token_timeout_longer_than_the_endpoint_timeout_is_refused() -> None:
    # the first event is bounded by timeout_s too: a longer value would be cut short without a word
    with pytest.raises(ValidationError, match="first_token_timeout_s"):
        RegistrySpec.model_validate(gateway_registry([_endpoint(timeout_s=10, first_token_timeout_s=20)]))
    spec = RegistrySpec.model_validate(gateway_registry([_endpoint(timeout_s=10, first_token_timeout_s=10)]))
    assert spec.endpoints[0].first_token_timeout_s == 10


@pytest.mark.parametrize("field", ["first_token_timeout_s", "stream_idle_timeout_s"])
def test_stream_timeouts_must_be_positive(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        RegistrySpec.model_validate(gateway_registry([_endpoint(**{field: 0})]))


async def test_stream_timeouts_reach_the_snapshot_and_default_to_none(database_url: str) -> None:
    engine = create_engine(database_url)
    vault = KeyVault(parse_master_key(MASTER_KEY))
    try:
        await migrate(engine)
        registry = gateway_registry([_endpoint(first_token_timeout_s=4.5, stream_idle_timeout_s=12),
                                     _endpoint(name="b")])
        await apply_registry(engine, RegistrySpec.model_validate(registry), vault)
        snapshot = await load_registry(engine, vault)
        a, b = snapshot.endpoints["a"], snapshot.endpoints["b"]
        assert (a.first_token_timeout_s, a.stream_idle_timeout_s) == (4.5, 12.0)
        assert (b.first_token_timeout_s, b.stream_idle_timeout_s) == (None, None)
        report = await apply_registry(engine, RegistrySpec.model_validate(registry), vault)
        assert not report.changed  # stored as given: a second apply finds nothing to write
    finally:
        await engine.dispose()
