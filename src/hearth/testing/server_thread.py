"""Run a real Hearth HTTP server (uvicorn) on 127.0.0.1 in a background thread, for tests.

The server has its own event loop, so a test's client traffic and the server never share a loop:
what the test sees is what a remote caller would see over TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time
from typing import Any

import uvicorn

from hearth.api.http_protocol import uvicorn_http_options
from hearth.app import create_asgi, fastapi_app
from hearth.runtime import Runtime
from hearth.settings import Settings

_uvicorn_log = logging.getLogger("uvicorn.error")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class _PromptServer(uvicorn.Server):
    """uvicorn's server, told to stop by an event instead of noticing ``should_exit`` at its next 0.1 s
    tick, and done with its connections as soon as they are closed instead of after a fixed 0.1 s pause:
    a test suite starts and stops hundreds of servers."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.wake: asyncio.Event | None = None

    async def main_loop(self) -> None:
        self.wake = asyncio.Event()
        counter = 0
        while not await self.on_tick(counter):  # a tick whose counter is a multiple of 10 refreshes the Date header
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), 1.0)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's graceful shutdown, with its waits for connections and requests to end polled every
        5 ms (uvicorn's pauses 0.1 s first, then polls every 0.1 s): stop accepting, ask each connection to
        close after its response, wait up to ``timeout_graceful_shutdown`` (then cancel what still runs),
        and run the lifespan shutdown."""
        _uvicorn_log.info("Shutting down")
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                # uvicorn's server state has no event to wait on
                while (self.server_state.connections or self.server_state.tasks) and not self.force_exit:  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
                for server in self.servers:
                    await server.wait_closed()
        except TimeoutError:
            _uvicorn_log.error("Cancel %s running task(s), timeout graceful shutdown exceeded",
                               len(self.server_state.tasks))
            for task in self.server_state.tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
        if not self.force_exit:
            await self.lifespan.shutdown()


class HearthServerThread:
    def __init__(self, settings: Settings, port: int | None = None) -> None:
        self.port = port or free_port()
        self.settings = settings.model_copy(update={"port": self.port, "host": "127.0.0.1"})
        self.asgi = create_asgi(self.settings)
        self.app = fastapi_app(self.asgi)
        config = uvicorn.Config(self.asgi, host="127.0.0.1", port=self.port, log_config=None,
                                access_log=False, lifespan="on", timeout_graceful_shutdown=2,
                                **uvicorn_http_options())  # the HTTP protocol `hearth serve` runs
        self._server = _PromptServer(config)
        self._thread: threading.Thread | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._error: BaseException | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def runtime(self) -> Runtime:
        rt: Runtime = self.app.state.runtime
        return rt

    def start(self, timeout: float = 15.0) -> HearthServerThread:
        def run() -> None:
            self.loop = asyncio.new_event_loop()
            asyncio.set_event_loop(self.loop)
            try:
                self.loop.run_until_complete(self._server.serve())
            except BaseException as exc:
                self._error = exc
            finally:
                self.loop.close()

        self._thread = threading.Thread(target=run, name=f"hearth-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                raise RuntimeError(f"Hearth failed to start: {self._error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError("Hearth did not start in time")
            time.sleep(0.01)
        return self

    def call(self, coro: Any, timeout: float = 10.0) -> Any:
        """Run a coroutine on the server's loop (e.g. to inspect the state backend) and wait."""
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Graceful stop (the lifespan shutdown runs: writers flush, locks are released)."""
        self._server.should_exit = True
        wake, loop = self._server.wake, self.loop
        if wake is not None and loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the thread is ending anyway
                loop.call_soon_threadsafe(wake.set)
        if self._thread is not None:
            self._thread.join(20)
            if self._thread.is_alive():
                raise RuntimeError(f"Hearth on port {self.port} did not stop within 20 s")
