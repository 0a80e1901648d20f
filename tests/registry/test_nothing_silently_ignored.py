"""Nothing configured is silently ignored: a key the code would not act on is refused with its name.

The settings and registry audit of issue 8 found keys that were accepted and then had no effect; each is
now either enforced (tested where it acts) or refused here with a clear validation error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from hearth.registry.config import RegistrySpec
from hearth.settings import Settings, load_settings
from tests.support import gateway_registry, write_config


def _endpoint(**extra: Any) -> dict[str, Any]:
    return {"name": "a", "provider": "openai-like", "upstream_model": "up", **extra}


def test_endpoint_key_version_is_refused_it_never_had_an_effect() -> None:
    with pytest.raises(ValidationError, match="key_version"):
        RegistrySpec.model_validate(gateway_registry([_endpoint(key_version=2)]))


def test_an_unknown_top_level_section_is_refused_not_skipped() -> None:
    registry = gateway_registry([_endpoint()])
    registry["endpionts"] = registry.pop("endpoints")
    with pytest.raises(ValidationError, match="endpionts"):
        RegistrySpec.model_validate(registry)


def test_the_server_section_belongs_to_the_file() -> None:
    spec = RegistrySpec.model_validate({"server": {"port": 9000}, **gateway_registry([_endpoint()])})
    assert [e.name for e in spec.endpoints] == ["a"]


def test_prices_in_two_currencies_are_refused_since_money_budgets_would_add_them() -> None:
    prices = [{"model": "up", "input_per_1m": 1, "output_per_1m": 2, "currency": "USD"},
              {"model": "other", "input_per_1m": 1, "output_per_1m": 2, "currency": "CNY"}]
    with pytest.raises(ValidationError, match="more than one currency"):
        RegistrySpec.model_validate(gateway_registry([_endpoint()], prices=prices))
    one = [{**p, "currency": "CNY"} for p in prices]
    assert len(RegistrySpec.model_validate(gateway_registry([_endpoint()], prices=one)).prices) == 2


def test_a_misspelt_server_setting_in_the_file_is_refused(tmp_path: Path) -> None:
    config = write_config(tmp_path / "hearth.yaml", gateway_registry([_endpoint()]),
                          server={"request_timeout_s": 30, "reqeust_timeout_s": 5})
    with pytest.raises(ValidationError, match="reqeust_timeout_s"):
        load_settings(config=config)
    good = write_config(tmp_path / "good.yaml", gateway_registry([_endpoint()]), server={"request_timeout_s": 30})
    assert load_settings(config=good).request_timeout_s == 30


def test_settings_refuse_unknown_keywords() -> None:
    with pytest.raises(ValidationError, match="breaker_open"):
        Settings(breaker_open=5)


def test_log_level_reaches_workers_started_by_the_factory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """With HEARTH_WORKERS > 1 uvicorn spawns fresh interpreters that build the app through
    ``create_asgi()``; HEARTH_LOG_LEVEL must apply there too (it used to apply only in the parent)."""
    import logging

    from hearth.app import create_asgi

    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    monkeypatch.setenv("HEARTH_LOG_LEVEL", "debug")
    monkeypatch.setenv("HEARTH_DATABASE_URL", f"sqlite+aiosqlite:///{tmp_path}/h.db")
    try:
        root.setLevel(logging.WARNING)
        create_asgi()
        assert root.level == logging.DEBUG
    finally:
        root.setLevel(saved[0])
        root.handlers = saved[1]
