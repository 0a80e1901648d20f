"""The `hearth` command line: apply is idempotent and refuses bad files whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.support import MASTER_KEY


def _hearth(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{cwd}/h.db", "HEARTH_MASTER_KEY": MASTER_KEY}
    env.pop("HEARTH_CONFIG", None)
    return subprocess.run([sys.executable, "-m", "hearth", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


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


def test_apply_refuses_a_file_with_a_dangling_reference(tmp_path: Path) -> None:
    bad = {**REGISTRY, "models": [{"name": "m", "endpoints": ["nope"]}]}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    out = _hearth(["apply", str(path)], tmp_path)
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
