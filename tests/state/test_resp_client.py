"""Specification of the small pipelined Redis client (:mod:`hearth.state.resp`).

Everything here talks to a real Redis: the machine's Redis at ``REDIS_URL`` (keys under the
per-test ``redis_prefix``), or a private ``redis-server`` child process on a free loopback port
for the tests that need a password, a unix socket, or a server that dies mid-test. Nothing is
mocked. Every wait is bounded, so a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import uvloop

from hearth.state.resp import Address, RespClient, RespError, RespUnavailable, Script, pack
from hearth.testing.server_thread import free_port
from tests.support import REDIS_SERVER_BINARY, REDIS_URL, start_redis_server

# --------------------------------------------------------------------------- helpers


class PrivateRedis:
    """A ``redis-server`` child process on a loopback port of its own; ``start()`` again to restart it (on the
    same port, empty)."""

    def __init__(self, directory: Path, extra: tuple[str, ...]) -> None:
        self.directory, self.extra = directory, extra
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrivateRedis:
        self.proc, self.port = start_redis_server(self.directory / "redis.log", *self.extra, port=self.port)
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def url(self, userinfo: str = "", db: int = 0) -> str:
        return f"redis://{userinfo}127.0.0.1:{self.port}/{db}"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[Callable[..., PrivateRedis]]:
    """``private_redis(*extra_args)`` starts a redis-server of the test's own; all are killed afterwards."""
    if REDIS_SERVER_BINARY is None:
        pytest.skip("redis-server binary not found; needed for a private Redis this test can stop or configure")
    started: list[PrivateRedis] = []

    def start(*extra: str) -> PrivateRedis:
        server = PrivateRedis(tmp_path / f"redis-{len(started)}", extra)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.kill()


@pytest.fixture
async def client(redis_prefix: str) -> AsyncIterator[RespClient]:
    c = RespClient(REDIS_URL)
    yield c
    await c.close()


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port whose TCP connections are accepted (by the kernel's backlog) and never answered."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield listener.getsockname()[1]


def blocked_clients(server: redis.Redis) -> int:
    return int(server.info("clients")["blocked_clients"])


async def until(condition: Callable[[], bool], timeout_s: float = 3.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"condition not met within {timeout_s} s")


def cause_chain(exc: BaseException) -> list[BaseException]:
    """The exception and everything it was raised from or during (cycle-safe)."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is not None and not any(e is s for s in seen):
            seen.append(e)
            todo += [e.__cause__, e.__context__]
    return seen


# --------------------------------------------------------------------------- pack


def test_pack_writes_each_argument_as_a_bulk_string() -> None:
    assert pack(("SET", b"k\x00\r\ney", 42, 1.5)) == (
        b"*4\r\n$3\r\nSET\r\n$6\r\nk\x00\r\ney\r\n$2\r\n42\r\n$3\r\n1.5\r\n")


def test_pack_counts_utf8_bytes_not_characters() -> None:
    assert pack(("GET", "clé")) == b"*2\r\n$3\r\nGET\r\n$4\r\ncl\xc3\xa9\r\n"


def test_pack_handles_negative_numbers_empty_strings_and_no_arguments() -> None:
    assert pack(("INCRBY", "", -7, 0.1)) == b"*4\r\n$6\r\nINCRBY\r\n$0\r\n\r\n$2\r\n-7\r\n$3\r\n0.1\r\n"
    assert pack(()) == b"*0\r\n"


async def test_binary_values_round_trip_byte_for_byte(client: RespClient, redis_prefix: str) -> None:
    value = bytes(range(256)) + b"\r\n$3\r\n*1\r\n"
    assert await client.execute("SET", redis_prefix + "bin", value) == b"OK"
    assert await client.execute("GET", redis_prefix + "bin") == value
    with redis.Redis.from_url(REDIS_URL) as other:
        assert other.get(redis_prefix + "bin") == value


# --------------------------------------------------------------------------- Address.parse


def test_address_parses_host_port_and_database() -> None:
    assert Address.parse("redis://cache.internal:6380/4") == Address(
        host="cache.internal", port=6380, path=None, db=4, username=None, password=None, tls=False)


def test_address_defaults_to_port_6379_and_database_0() -> None:
    a = Address.parse("redis://cache")
    assert (a.host, a.port, a.db, a.username, a.password, a.tls) == ("cache", 6379, 0, None, None, False)


def test_address_parses_a_password_without_a_user() -> None:
    a = Address.parse("redis://:s3cret@cache/2")
    assert (a.host, a.port, a.db, a.username, a.password) == ("cache", 6379, 2, None, "s3cret")


def test_address_parses_a_user_and_password() -> None:
    a = Address.parse("redis://alice:pw@cache")
    assert (a.host, a.port, a.db, a.username, a.password) == ("cache", 6379, 0, "alice", "pw")


def test_address_rediss_scheme_means_tls() -> None:
    a = Address.parse("rediss://cache:6390/1")
    assert (a.host, a.port, a.db, a.tls) == ("cache", 6390, 1, True)
    assert Address.parse("redis://cache:6390/1").tls is False


def test_address_unix_socket_path_and_database_from_the_query() -> None:
    a = Address.parse("unix:///var/run/redis/redis.sock?db=3")
    assert (a.path, a.db, a.tls, a.username, a.password) == ("/var/run/redis/redis.sock", 3, False, None, None)
    assert Address.parse("unix:///var/run/redis/redis.sock").db == 0


def test_address_percent_decodes_user_and_password() -> None:
    a = Address.parse("redis://al%40ice:p%40ss%3Aw%2Fd%25%20x@cache:6379/0")
    assert (a.username, a.password) == ("al@ice", "p@ss:w/d% x")


@pytest.mark.parametrize("url", ["http://cache:6379/0", "tcp://cache", "cache:6379", "redis://cache/abc",
                                 "redis://cache/-1", "redis://cache/1/2", "unix:///tmp/redis.sock?db=x",
                                 "redis://cache:notaport/0"])
def test_address_rejects_bad_schemes_and_non_numeric_databases(url: str) -> None:
    with pytest.raises(ValueError):
        Address.parse(url)


@pytest.mark.parametrize("url", ["redis://cache/0?ssl_cert_reqs=none", "rediss://cache?ssl_ca_certs=/etc/ca.pem",
                                 "redis://cache/0?socket_timeout=5", "unix:///tmp/redis.sock?db=1&password=x"])
def test_address_refuses_query_options_it_does_not_apply(url: str) -> None:
    # Nothing configured is silently ignored: a TLS or timeout option in the URL that the client
    # would not apply is refused, naming it, instead of running without it.
    with pytest.raises(ValueError, match="not supported") as err:
        Address.parse(url)
    assert url.split("?", 1)[1].split("&")[-1].split("=")[0] in str(err.value)


def test_address_refuses_a_user_without_a_password() -> None:
    # AUTH needs a password; a user name alone would be dropped and the connection made as `default`.
    with pytest.raises(ValueError, match="password"):
        Address.parse("redis://alice@cache/0")


def test_client_rejects_a_bad_url_at_construction() -> None:
    with pytest.raises(ValueError, match="scheme"):
        RespClient("http://127.0.0.1:6379/0")


# --------------------------------------------------------------------------- pipelining


async def test_500_concurrent_callers_each_get_their_own_replies(client: RespClient, redis_prefix: str) -> None:
    n = 500
    counter = redis_prefix + "counter"
    await client.execute_many(*[("SET", f"{redis_prefix}own:{i}", f"value-{i}") for i in range(n)])

    async def caller(i: int) -> tuple[int, bytes, int, bytes]:
        count = await client.execute("INCR", counter)  # shared: every caller must see a different count
        own = await client.execute("GET", f"{redis_prefix}own:{i}")
        mine = await client.execute("INCRBY", f"{redis_prefix}mine:{i}", i)
        again = await client.execute("GET", f"{redis_prefix}mine:{i}")
        return count, own, mine, again

    async with asyncio.timeout(10):
        results = await asyncio.gather(*[caller(i) for i in range(n)])
    assert sorted(r[0] for r in results) == list(range(1, n + 1))
    assert [r[1] for r in results] == [f"value-{i}".encode() for i in range(n)]
    assert [r[2] for r in results] == list(range(n))
    assert [r[3] for r in results] == [str(i).encode() for i in range(n)]
    assert await client.execute("GET", counter) == str(n).encode()


async def test_concurrent_callers_share_one_connection(client: RespClient) -> None:
    async with asyncio.timeout(5):
        ids = await asyncio.gather(*[client.execute("CLIENT", "ID") for _ in range(50)])
    assert len(set(ids)) == 1


async def test_execute_many_returns_replies_in_command_order(client: RespClient, redis_prefix: str) -> None:
    k, n = redis_prefix + "k", redis_prefix + "n"
    replies = await client.execute_many(("SET", k, "a"), ("GET", k), ("INCR", n), ("INCR", n), ("GET", n),
                                        ("LPUSH", redis_prefix + "l", "x", "y"), ("LRANGE", redis_prefix + "l", 0, -1),
                                        ("DEL", k), ("GET", k))
    assert replies == [b"OK", b"a", 1, 2, b"2", 2, [b"y", b"x"], 1, None]


async def test_execute_many_is_not_a_transaction(client: RespClient, redis_prefix: str) -> None:
    a, b = redis_prefix + "a", redis_prefix + "b"
    with pytest.raises(RespError, match="not an integer"):
        await client.execute_many(("SET", a, "text"), ("INCR", a), ("SET", b, "after"))
    assert await client.execute("GET", b) == b"after"  # the command after the failing one still ran


# --------------------------------------------------------------------------- error replies


async def test_error_reply_raises_resp_error_and_the_connection_keeps_working(client: RespClient,
                                                                             redis_prefix: str) -> None:
    key = redis_prefix + "word"
    await client.execute("SET", key, "abc")
    with pytest.raises(RespError, match="not an integer"):
        await client.execute("INCR", key)
    with pytest.raises(RespError, match="WRONGTYPE"):
        await client.execute("LPUSH", key, "x")
    assert await client.execute("GET", key) == b"abc"
    assert await client.execute("INCR", redis_prefix + "n") == 1


async def test_an_error_among_concurrent_commands_does_not_shift_the_others(client: RespClient,
                                                                           redis_prefix: str) -> None:
    await client.execute_many(("SET", redis_prefix + "a", "A"), ("SET", redis_prefix + "bad", "x"),
                              ("SET", redis_prefix + "b", "B"))
    async with asyncio.timeout(5):
        a, bad, b = await asyncio.gather(client.execute("GET", redis_prefix + "a"),
                                         client.execute("INCR", redis_prefix + "bad"),
                                         client.execute("GET", redis_prefix + "b"), return_exceptions=True)
    assert (a, b) == (b"A", b"B")
    assert isinstance(bad, RespError)


async def test_unknown_command_is_a_resp_error(client: RespClient) -> None:
    with pytest.raises(RespError, match="unknown command"):
        await client.execute("NO-SUCH-COMMAND")
    assert await client.execute("PING") == b"PONG"


# --------------------------------------------------------------------------- scripts

NESTED_LUA = """
redis.call('SET', KEYS[1], ARGV[1])
return {redis.call('GET', KEYS[1]), redis.call('INCRBY', KEYS[2], ARGV[2]), {KEYS[1], {1, 'deep'}},
        redis.status_reply('FINE')}
"""


async def test_script_runs_after_script_flush_and_returns_nested_replies(client: RespClient,
                                                                         redis_prefix: str) -> None:
    script = Script.of(NESTED_LUA + f"-- {redis_prefix}")  # a body (so a SHA) no other test has loaded
    k1, k2 = redis_prefix + "s1", redis_prefix + "s2"
    assert await client.execute("SCRIPT", "FLUSH") == b"OK"
    assert await client.execute("SCRIPT", "EXISTS", script.sha) == [0]
    expected = [b"hello", 5, [k1.encode(), [1, b"deep"]], b"FINE"]
    assert await client.run(script, [k1, k2], ["hello", 5]) == expected  # EVALSHA → NOSCRIPT → EVAL
    assert await client.execute("SCRIPT", "EXISTS", script.sha) == [1]  # EVAL loaded it
    assert await client.run(script, [k1, k2], ["hello", 5]) == [b"hello", 10, [k1.encode(), [1, b"deep"]], b"FINE"]


def test_script_sha_is_the_sha1_redis_uses() -> None:
    script = Script.of("return 1")
    assert script.body == b"return 1"
    assert script.sha == b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db"  # SCRIPT LOAD "return 1"


async def test_script_error_other_than_noscript_is_raised(client: RespClient, redis_prefix: str) -> None:
    await client.execute("SET", redis_prefix + "word", "abc")
    script = Script.of("return redis.call('INCR', KEYS[1])")
    with pytest.raises(RespError, match="not an integer"):
        await client.run(script, [redis_prefix + "word"], [])
    assert await client.run(script, [redis_prefix + "n"], []) == 1


# --------------------------------------------------------------------------- cancellation


async def test_cancelled_callers_do_not_shift_replies(client: RespClient, redis_prefix: str) -> None:
    """A BLPOP holds the connection's queue in Redis, so every GET behind it is sent and still unanswered
    when some callers (the BLPOP's own among them) are cancelled."""
    n = 10
    await client.execute_many(*[("SET", f"{redis_prefix}g:{i}", f"v{i}") for i in range(n)])
    blocker = asyncio.create_task(client.execute("BLPOP", redis_prefix + "gate", 5))
    getters = [asyncio.create_task(client.execute("GET", f"{redis_prefix}g:{i}")) for i in range(n)]
    observer = redis.Redis.from_url(REDIS_URL)
    await until(lambda: blocked_clients(observer) >= 1)
    await asyncio.sleep(0.05)  # the GETs have left with the BLPOP (same loop step); let them reach Redis
    cancelled = {0, 3, 9}
    blocker.cancel()
    for i in cancelled:
        getters[i].cancel()
    observer.lpush(redis_prefix + "gate", "opened")  # the BLPOP reply nobody wants now
    async with asyncio.timeout(3):
        await asyncio.wait([blocker, *getters])
    assert blocker.cancelled()
    for i, task in enumerate(getters):
        if i in cancelled:
            assert task.cancelled()
        else:
            assert task.result() == f"v{i}".encode()
    assert await client.execute("GET", f"{redis_prefix}g:4") == b"v4"
    assert await client.execute("LLEN", redis_prefix + "gate") == 0  # the BLPOP did pop it
    observer.close()


# --------------------------------------------------------------------------- password and database


async def test_password_url_authenticates_and_writes_into_the_given_database(
        private_redis: Callable[..., PrivateRedis]) -> None:
    server = private_redis("--requirepass", "s3cret-pw")
    for userinfo in (":s3cret-pw@", "default:s3cret-pw@"):
        c = RespClient(server.url(userinfo, db=5))
        try:
            assert await c.execute("SET", f"{userinfo}key", "in-db-5") == b"OK"
            assert await c.execute("GET", f"{userinfo}key") == b"in-db-5"
        finally:
            await c.close()
        assert redis.Redis(port=server.port, password="s3cret-pw", db=5).get(f"{userinfo}key") == b"in-db-5"
        assert redis.Redis(port=server.port, password="s3cret-pw", db=0).get(f"{userinfo}key") is None


async def test_percent_encoded_password_is_decoded_before_auth(private_redis: Callable[..., PrivateRedis]) -> None:
    server = private_redis("--requirepass", "p@ss:w/rd%")
    c = RespClient(server.url(":p%40ss%3Aw%2Frd%25@", db=2))
    try:
        assert await c.execute("SET", "k", "v") == b"OK"
    finally:
        await c.close()
    assert redis.Redis(port=server.port, password="p@ss:w/rd%", db=2).get("k") == b"v"


@pytest.mark.parametrize("db", [0, 4])
async def test_wrong_password_is_unavailable_and_the_message_hides_the_password(
        private_redis: Callable[..., PrivateRedis], db: int) -> None:
    server = private_redis("--requirepass", "s3cret-pw")
    wrong = "Wr0ng-Pa55-xyzzy"
    c = RespClient(server.url(f":{wrong}@", db=db))
    try:
        for _ in range(2):  # every attempt re-dials and fails the same way; none hangs
            started = time.monotonic()
            with pytest.raises(RespUnavailable) as caught:
                await c.execute("PING")
            assert time.monotonic() - started < 3
            assert "WRONGPASS" in str(caught.value)
            for e in cause_chain(caught.value):
                assert wrong not in str(e) and wrong not in repr(e)
    finally:
        await c.close()


async def test_unix_socket_url_with_database(private_redis: Callable[..., PrivateRedis]) -> None:
    with tempfile.TemporaryDirectory(prefix="hearth-resp-") as tmp:  # short: unix socket paths are limited
        sock = Path(tmp) / "redis.sock"
        server = private_redis("--unixsocket", str(sock), "--unixsocketperm", "700")
        c = RespClient(f"unix://{sock}?db=3")
        try:
            assert await c.execute("SET", "k", "via-socket") == b"OK"
        finally:
            await c.close()
        assert redis.Redis(port=server.port, db=3).get("k") == b"via-socket"


# --------------------------------------------------------------------------- server loss and hangs


async def test_killed_server_fails_in_flight_and_next_commands_then_reconnects_after_restart(
        private_redis: Callable[..., PrivateRedis]) -> None:
    server = private_redis()
    # A long command timeout: only noticing the lost connection can make these failures prompt.
    c = RespClient(server.url(), command_timeout_s=30)
    try:
        assert await c.execute("SET", "k", "before") == b"OK"
        in_flight = [asyncio.create_task(c.execute("BLPOP", "never", 0)),
                     asyncio.create_task(c.execute("GET", "k"))]  # queued behind the BLPOP in Redis
        observer = redis.Redis(port=server.port)
        await until(lambda: blocked_clients(observer) == 1)
        killed = time.monotonic()
        server.kill()
        async with asyncio.timeout(5):
            outcomes = await asyncio.gather(*in_flight, return_exceptions=True)
        assert time.monotonic() - killed < 3
        assert all(isinstance(o, RespUnavailable) for o in outcomes), outcomes

        started = time.monotonic()
        with pytest.raises(RespUnavailable):
            await c.execute("GET", "k")
        assert time.monotonic() - started < 3

        server.start()  # same port, empty data
        async with asyncio.timeout(5):
            assert await c.execute("GET", "k") is None
            assert await c.execute("SET", "k", "after") == b"OK"
            assert await c.execute("GET", "k") == b"after"
    finally:
        await c.close()


async def test_concurrent_callers_during_an_outage_all_fail_promptly(
        private_redis: Callable[..., PrivateRedis]) -> None:
    server = private_redis()
    c = RespClient(server.url(), command_timeout_s=30)
    try:
        assert await c.execute("PING") == b"PONG"
        server.kill()
        started = time.monotonic()
        async with asyncio.timeout(5):
            outcomes = await asyncio.gather(*[c.execute("PING") for _ in range(20)], return_exceptions=True)
        assert time.monotonic() - started < 3
        assert all(isinstance(o, RespUnavailable) for o in outcomes), outcomes
    finally:
        await c.close()


async def test_nothing_listening_is_unavailable_at_once() -> None:
    c = RespClient(f"redis://127.0.0.1:{free_port()}/0")
    started = time.monotonic()
    with pytest.raises(RespUnavailable, match="cannot connect"):
        await c.execute("PING")
    assert time.monotonic() - started < 1


@pytest.mark.parametrize("url", ["redis://127.0.0.1:{port}/0", "redis://127.0.0.1:{port}/3",
                                 "redis://:pw@127.0.0.1:{port}/0"], ids=["command", "select-db", "auth"])
async def test_server_that_never_answers_is_unavailable_within_3s(silent_port: int, url: str) -> None:
    c = RespClient(url.format(port=silent_port))  # the default 2 s command timeout; the watchdog checks every 0.25 s
    started = time.monotonic()
    try:
        async with asyncio.timeout(6):
            with pytest.raises(RespUnavailable):
                await c.execute("PING")
        elapsed = time.monotonic() - started
        assert 1.5 < elapsed < 3, elapsed
    finally:
        await c.close()


async def test_every_waiter_on_a_hung_server_fails_together(silent_port: int) -> None:
    c = RespClient(f"redis://127.0.0.1:{silent_port}/0", command_timeout_s=0.5)
    started = time.monotonic()
    try:
        async with asyncio.timeout(5):
            outcomes = await asyncio.gather(*[c.execute("GET", f"k{i}") for i in range(20)], return_exceptions=True)
        assert time.monotonic() - started < 1.5
        assert all(isinstance(o, RespUnavailable) for o in outcomes), outcomes
        assert "did not answer" in str(outcomes[0])
    finally:
        await c.close()


# --------------------------------------------------------------------------- the same scenario on two loops


async def small_scenario(prefix: str) -> None:
    """Pipelining, an error reply, a script, and a reconnect after the server drops the connection."""
    c = RespClient(REDIS_URL)
    try:
        async with asyncio.timeout(10):
            counts = await asyncio.gather(*[c.execute("INCR", prefix + "n") for _ in range(200)])
            assert sorted(counts) == list(range(1, 201))
            with pytest.raises(RespError):
                await c.execute("LPUSH", prefix + "n", "x")
            assert await c.run(Script.of("return {KEYS[1], tonumber(ARGV[1]) * 2}"), [prefix + "s"], [21]) == [
                (prefix + "s").encode(), 42]
            first_id = await c.execute("CLIENT", "ID")
            redis.Redis.from_url(REDIS_URL).client_kill_filter(_id=first_id)
            await asyncio.sleep(0.2)  # the close reaches the client
            assert await c.execute("GET", prefix + "n") == b"200"  # dialled again on demand
            assert await c.execute("CLIENT", "ID") != first_id
    finally:
        await c.close()


async def test_small_scenario_under_asyncio(redis_prefix: str) -> None:
    assert not isinstance(asyncio.get_running_loop(), uvloop.Loop)
    await small_scenario(redis_prefix)


def test_small_scenario_under_uvloop(redis_prefix: str) -> None:
    async def main() -> None:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)  # transports are not asyncio.Transport
        await small_scenario(redis_prefix)

    uvloop.run(main())


def test_hung_server_watchdog_under_uvloop(silent_port: int) -> None:
    async def main() -> float:
        c = RespClient(f"redis://127.0.0.1:{silent_port}/0", command_timeout_s=0.5)
        started = time.monotonic()
        try:
            async with asyncio.timeout(5):
                with pytest.raises(RespUnavailable):
                    await c.execute("PING")
            return time.monotonic() - started
        finally:
            await c.close()

    assert uvloop.run(main()) < 1.5


# --------------------------------------------------------------------------- connection set-up edge cases


async def test_cancelling_a_caller_while_it_connects_propagates_cancellation(silent_port: int) -> None:
    # The hello (AUTH) hangs on the silent port, so the caller is cancelled inside RespClient._connect.
    c = RespClient(f"redis://:pw@127.0.0.1:{silent_port}/0", command_timeout_s=0.3)
    task = asyncio.create_task(c.execute("PING"))
    await asyncio.sleep(0.1)
    task.cancel()
    await asyncio.wait({task}, timeout=3)
    assert task.done()
    outcome = "cancelled" if task.cancelled() else repr(task.exception())
    await asyncio.sleep(0.8)  # let the watchdog abort the abandoned socket before the loop closes
    await c.close()
    assert outcome == "cancelled"


def test_a_client_used_from_a_new_event_loop_reconnects(redis_prefix: str) -> None:
    c = RespClient(REDIS_URL)
    key = redis_prefix + "loops"

    async def set_value() -> Any:
        return await c.execute("SET", key, "from-loop-1")

    async def get_value_and_close() -> Any:
        try:
            return await c.execute("GET", key)
        finally:
            await c.close()

    # The first loop's socket cannot be closed once that loop is gone (closing a transport needs its loop):
    # it is abandoned, and collected with a ResourceWarning — here, not in whichever test collects it later.
    with pytest.warns(ResourceWarning, match="unclosed"):
        assert asyncio.run(set_value()) == b"OK"
        assert asyncio.run(get_value_and_close()) == b"from-loop-1"
        gc.collect()


async def test_connection_failure_keeps_the_os_error_as_its_cause() -> None:
    c = RespClient(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(RespUnavailable) as caught:
        await c.execute("PING")
    assert caught.value.__cause__ is not caught.value
    assert isinstance(caught.value.__cause__, OSError)


async def test_refused_setup_with_a_database_logs_no_unretrieved_future(
        private_redis: Callable[..., PrivateRedis], caplog: pytest.LogCaptureFixture) -> None:
    server = private_redis("--requirepass", "s3cret-pw")
    c = RespClient(server.url(":wrong@", db=4))
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        for _ in range(3):
            try:
                await c.execute("PING")
            except RespUnavailable:
                pass
        await c.close()
        gc.collect()
        await asyncio.sleep(0)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
