"""The `hearth` command line: apply is idempotent and refuses bad files whole.

The commands run in this process (``tests.support.hearth_in_process``: exit code, stdout and stderr),
except where an operator's view is the point: a refused file, and a refused ``hearth serve``, are run
as real ``python -m hearth`` processes.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support import MASTER_KEY, hearth_in_process, hearth_process


def _env(cwd: Path) -> dict[str, str]:
    return {"HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{cwd}/h.db", "HEARTH_MASTER_KEY": MASTER_KEY}


def _hearth(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``hearth ARGS`` in this process."""
    return hearth_in_process(args, cwd=cwd, env=_env(cwd))


def _hearth_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m hearth ARGS`` as a real process."""
    return hearth_process(args, cwd=cwd, env=_env(cwd))


REGISTRY = {
    "providers": [{"name": "p", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
    "endpoints": [{"name": "e", "provider": "p", "upstream_model": "x", "api_key": "sk-cli-test-000000"}],
    "models": [{"name": "m", "endpoints": ["e"]}],
}


def test_apply_twice_reports_unchanged_the_second_time(tmp_path: Path) -> None:
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    first = _hearth(["apply", str(path)], tmp_path)
    assert first.returncode == 0, first.stderr
    assert "endpoint:e" in first.stdout
    second = _hearth(["apply", str(path)], tmp_path)
    assert second.returncode == 0 and second.stdout.strip() == "unchanged: 3"
    assert "sk-cli-test-000000" not in first.stdout + first.stderr + second.stdout + second.stderr


def test_apply_reports_an_endpoint_kept_disabled_with_its_reason(tmp_path: Path) -> None:
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump(REGISTRY))
    assert _hearth(["apply", str(path)], tmp_path).returncode == 0
    asyncio.run(_disable_as_the_gateway_does(f"sqlite+aiosqlite:///{tmp_path}/h.db", "e"))
    again = _hearth(["apply", str(path)], tmp_path)
    assert again.returncode == 0, again.stderr
    kept = "kept disabled: endpoint:e (disabled by gateway: upstream answered 401: credentials rejected)"
    assert kept in again.stdout
    assert "POST /api/v1/admin/endpoints/e/enable" in again.stdout
    rotated = {**REGISTRY, "endpoints": [{**REGISTRY["endpoints"][0], "api_key": "sk-cli-test-rotated-1"}]}
    path.write_text(yaml.safe_dump(rotated))
    third = _hearth(["apply", str(path)], tmp_path)
    assert third.returncode == 0 and "re-enabled (new api_key): endpoint:e" in third.stdout, third.stdout
    assert "kept disabled" not in third.stdout


async def _disable_as_the_gateway_does(database_url: str, name: str) -> None:
    from hearth.registry.store import set_endpoint_enabled
    from hearth.store.db import create_engine

    engine = create_engine(database_url)
    try:
        assert await set_endpoint_enabled(engine, name, False, "upstream answered 401: credentials rejected",
                                          by="gateway")
    finally:
        await engine.dispose()


def test_apply_warns_when_the_registry_cannot_serve_any_call(tmp_path: Path) -> None:
    path = tmp_path / "reg.yaml"
    path.write_text(yaml.safe_dump({**REGISTRY, "endpoints": [{**REGISTRY["endpoints"][0], "enabled": False}]}))
    out = _hearth(["apply", str(path)], tmp_path)
    assert out.returncode == 0 and "created:" in out.stdout  # applied all the same
    assert "warning: the registry cannot serve any call: no enabled model has an enabled endpoint" in out.stderr
    assert "warning" not in out.stdout  # stdout stays the report, the warning is on stderr


def test_apply_refuses_a_file_with_a_dangling_reference(tmp_path: Path) -> None:
    bad = {**REGISTRY, "models": [{"name": "m", "endpoints": ["nope"]}]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    out = _hearth_process(["apply", str(path)], tmp_path)
    assert out.returncode == 2 and "unknown endpoint 'nope'" in out.stderr
    # refused whole: the valid endpoint in the same file was not written either
    good_again = tmp_path / "providers-only.yaml"
    good_again.write_text(yaml.safe_dump({"providers": REGISTRY["providers"]}))
    assert "created: provider:p" in _hearth(["apply", str(good_again)], tmp_path).stdout


def test_apply_refuses_invalid_fields(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"endpoints": [{"name": "e", "provider": "p", "upstream_model": "x",
                                                   "weight": -1}]}))
    out = _hearth(["apply", str(path)], tmp_path)
    assert out.returncode == 2 and "weight" in out.stderr


def test_serve_refuses_several_workers_with_memory_state(tmp_path: Path) -> None:
    env_out = subprocess.run([sys.executable, "-m", "hearth", "serve"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=60, env={**os.environ, "HEARTH_WORKERS": "2", "HEARTH_STATE_BACKEND": "memory"})
    assert env_out.returncode != 0 and "HEARTH_STATE_BACKEND=redis" in env_out.stderr


def test_long_running_commands_run_on_uvloop_like_hearth_serve() -> None:
    """``hearth worker`` runs its loop through ``run_service``: uvloop, as uvicorn's ``loop="auto"`` gives
    ``hearth serve`` (asyncio's loop drained 50 ms tasks ~3 % slower: bench/BENCHMARKS.md)."""
    from hearth.cli import run_service

    loops: list[str] = []

    async def main() -> None:
        loops.append(type(asyncio.get_running_loop()).__module__.split(".")[0])

    run_service(main())
    assert loops == ["uvloop"]
