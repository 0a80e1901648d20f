"""A TCP proxy a test can cut and restore: a real database outage (connection refused, connections reset)."""

from __future__ import annotations

import asyncio
import contextlib


class TcpProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target_port`` while up; ``down()`` closes everything."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._server: asyncio.Server | None = None
        self._transports: set[asyncio.BaseTransport] = set()
        self._down = True

    async def up(self) -> TcpProxy:
        self._down = False
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def down(self) -> None:
        """Stop listening (new connections are refused) and reset every open connection — also one accepted
        whose handler has not run yet or is still connecting to the target (since Python 3.12 ``wait_closed``
        waits for every accepted connection, so one left open hangs it)."""
        self._down = True
        if self._server is not None:
            self._server.close()
            for transport in self._transports:
                transport.abort()
            self._transports.clear()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._transports.add(writer.transport)
        if self._down:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.transport.abort()
            return
        if self._down:
            up_writer.transport.abort()
            writer.transport.abort()
            return
        self._transports.add(up_writer.transport)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    @staticmethod
    def target_port_of(dsn: str) -> int:
        hostport = dsn.split("@", 1)[-1].split("/", 1)[0]
        return int(hostport.rsplit(":", 1)[1]) if ":" in hostport else 5432


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, asyncio.IncompleteReadError, RuntimeError):
        while data := await source.read(65536):
            sink.write(data)
            await sink.drain()
    sink.close()
