"""`hearth keys`: a key is printed once, listed by prefix, rotated, revoked; errors exit 2.

The commands run in this process (``tests.support.hearth_in_process``: exit code, stdout and stderr);
a refused create also as a real ``python -m hearth`` process, as an operator sees it.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
from pathlib import Path

from tests.support import MASTER_KEY, gateway_registry, hearth_in_process, hearth_process

_KEY = re.compile(r"^key: (\S+)$", re.MULTILINE)


def _env(cwd: Path) -> dict[str, str]:
    return {"HEARTH_DATABASE_URL": f"sqlite+aiosqlite:///{cwd}/h.db", "HEARTH_MASTER_KEY": MASTER_KEY}


def _hearth(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``hearth keys ARGS`` in this process."""
    return hearth_in_process(["keys", *args], cwd=cwd, env=_env(cwd))


def _hearth_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m hearth keys ARGS`` as a real process."""
    return hearth_process(["keys", *args], cwd=cwd, env=_env(cwd))


def _issued_key(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 0, out.stderr
    assert "it will not be shown again" in out.stdout
    found = _KEY.search(out.stdout)
    assert found is not None, out.stdout
    return found.group(1)


def _listed(cwd: Path) -> dict[str, list[str]]:
    out = _hearth(["list"], cwd)
    assert out.returncode == 0, out.stderr
    return {line.split()[0]: line.split() for line in out.stdout.splitlines()[1:]}


def test_create_list_rotate_revoke(tmp_path: Path) -> None:
    key = _issued_key(_hearth(["create", "billing", "--allowed-model", "m", "--allowed-model", "n"], tmp_path))
    rows = _listed(tmp_path)
    assert rows["billing"][1] == key[:6] and key.startswith(rows["billing"][1])
    assert rows["billing"][2:4] == ["enabled", "m,n"]
    assert key not in _hearth(["list"], tmp_path).stdout

    new_key = _issued_key(_hearth(["rotate", "billing"], tmp_path))
    assert new_key != key and _listed(tmp_path)["billing"][1] == new_key[:6]

    revoked = _hearth(["revoke", "billing"], tmp_path)
    assert revoked.returncode == 0, revoked.stderr
    assert "revoked" in revoked.stdout and new_key not in revoked.stdout
    assert _listed(tmp_path)["billing"][1:3] == ["-", "revoked"]


def test_errors_exit_2_with_a_message_and_change_nothing(tmp_path: Path) -> None:
    key = _issued_key(_hearth(["create", "app"], tmp_path))
    dup = _hearth_process(["create", "app"], tmp_path)
    assert dup.returncode == 2 and "already exists" in dup.stderr and "key:" not in dup.stdout
    assert _listed(tmp_path)["app"][1] == key[:6]  # the first key is still the one on record

    for args, message in ((["rotate", "ghost"], "No caller named `ghost`"),
                          (["revoke", "ghost"], "No caller named `ghost`"),
                          (["create", "bad name!"], "name: String should match pattern"),
                          (["create", "lost", "--default-scene", "nope"], "unknown scene 'nope'")):
        out = _hearth(args, tmp_path)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
    assert list(_listed(tmp_path)) == ["app"]


async def test_a_running_server_picks_up_a_cli_rotation(fake, hearth_server, http, tmp_path: Path) -> None:
    """The CLI writes the database only; the server sees the version bump within its refresh interval."""
    registry = gateway_registry([{"name": "a", "provider": "openai-like", "base_url": fake.base_url,
                                  "upstream_model": "up", "api_key": "sk-cli-keys-test-1234"}])
    server = hearth_server(registry)  # its database is tmp_path/h.db, the same file the CLI uses
    old = {"Authorization": "Bearer test-key-123"}
    assert (await http.get(server.base_url + "/v1/models", headers=old)).status_code == 200
    out = await asyncio.to_thread(_hearth, ["rotate", "tester"], tmp_path)
    new = {"Authorization": f"Bearer {_issued_key(out)}"}
    for _ in range(50):
        if (await http.get(server.base_url + "/v1/models", headers=old)).status_code == 401:
            break
        await asyncio.sleep(0.1)
    assert (await http.get(server.base_url + "/v1/models", headers=old)).status_code == 401
    assert (await http.get(server.base_url + "/v1/models", headers=new)).status_code == 200
