"""``tests.support.start_redis_server``: a port taken between ``free_port()`` and redis-server's bind (by another
test's server) is noticed from the server's own log, not mistaken for a started Redis, and another port is tried."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis

from hearth.testing.server_thread import free_port
from tests import support


def test_a_port_taken_before_the_bind_is_skipped_for_a_free_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    if support.REDIS_SERVER_BINARY is None:
        pytest.skip("redis-server binary not found")
    with socket.socket() as squatter:  # answers nothing, but holds the port: the bind fails
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports = iter([taken])
        monkeypatch.setattr(support, "free_port", lambda: next(ports, None) or free_port())
        proc, port = support.start_redis_server(tmp_path / "redis.log")
        try:
            assert port != taken
            assert redis.Redis(port=port).info("server")["process_id"] == proc.pid
            assert b"Address already in use" in (tmp_path / "redis.log").read_bytes()  # the first try's log
        finally:
            proc.kill()
            proc.wait(5)
