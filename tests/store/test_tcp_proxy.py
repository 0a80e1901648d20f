"""The outage proxy itself: ``down()`` must end every connection, including one it accepted a moment ago.

Since Python 3.12 ``Server.wait_closed()`` waits for every connection the server accepted, so a connection
whose handler had not yet registered it (still connecting to the target) hung ``down()`` — and with it a
whole test worker (seen: tests/api/test_readiness.py waited 20 minutes).
"""

from __future__ import annotations

import asyncio

from tests.store.tcp_proxy import TcpProxy


async def _silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await reader.read()
    writer.close()


async def test_down_right_after_clients_connect_returns_and_resets_them() -> None:
    target = await asyncio.start_server(_silent, "127.0.0.1", 0)
    target_port = target.sockets[0].getsockname()[1]
    try:
        for _ in range(10):
            proxy = await TcpProxy(target_port).up()
            clients = [await asyncio.open_connection("127.0.0.1", proxy.port) for _ in range(3)]
            await asyncio.wait_for(proxy.down(), 5)
            for reader, writer in clients:
                assert await asyncio.wait_for(reader.read(1), 5) == b""  # reset or closed by the proxy
                writer.close()
            with_proxy_down = asyncio.open_connection("127.0.0.1", proxy.port)
            try:
                await with_proxy_down
            except OSError:
                pass
            else:
                raise AssertionError("a proxy that is down still accepts connections")
    finally:
        target.close()
        await asyncio.wait_for(target.wait_closed(), 5)


async def test_bytes_flow_both_ways_while_up() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(5))
        await writer.drain()
        writer.close()

    target = await asyncio.start_server(echo, "127.0.0.1", 0)
    proxy = await TcpProxy(target.sockets[0].getsockname()[1]).up()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"hello")
        assert await asyncio.wait_for(reader.readexactly(5), 5) == b"hello"
        writer.close()
    finally:
        await asyncio.wait_for(proxy.down(), 5)
        target.close()
        await asyncio.wait_for(target.wait_closed(), 5)
