"""A real upstream MCP server (Streamable HTTP, the official SDK's ``MCPServer``) for tests and benchmarks.

Each instance runs uvicorn on 127.0.0.1 (a random free port) in a thread of its own, with its own event
loop, so what Hearth sees is what it would see of a remote MCP server over TCP. It counts what a pooling
test needs to see — the sessions it opened (one per ``initialize``) and the tool calls it served — and
records the ``Authorization`` headers it received, so a test can prove the caller's credentials never
reach it and Hearth's always do. With ``token`` set, a request without ``Authorization: Bearer <token>``
is answered 401, as an upstream guarding its tools would.

Tools: ``echo(text)``, ``add(a, b)``, ``read_file(path)``, ``transfer(amount, to)`` and ``delete_file(path)``
(the last three only say what they would do); ``prefix`` puts a mark on every answer so a test can tell
two servers apart.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn
from mcp import MCPError
from mcp.server.mcpserver import MCPServer

from hearth.testing.server_thread import free_port

_Scope = MutableMapping[str, Any]
_Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
_Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
_ASGI = Callable[[_Scope, _Receive, _Send], Awaitable[None]]


def build_server(label: str, on_call: Callable[[], None] = lambda: None) -> MCPServer[Any]:
    """The SDK server with the test tools; every answer starts with ``label``; ``on_call`` runs on each call."""
    server: MCPServer[Any] = MCPServer(label)

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        on_call()
        return f"{label}:{text}"

    @server.tool()
    def add(a: int, b: int) -> str:
        """Add two integers."""
        on_call()
        return f"{label}:{a + b}"

    @server.tool()
    def read_file(path: str) -> str:
        """Pretend to read a file."""
        on_call()
        return f"{label}:read {path}"

    @server.tool()
    def transfer(amount: float, to: str) -> str:
        """Pretend to move money."""
        on_call()
        return f"{label}:sent {amount} to {to}"

    @server.tool()
    def delete_file(path: str) -> str:
        """Pretend to delete a file."""
        on_call()
        return f"{label}:deleted {path}"

    @server.tool()
    def refuse(code: int, message: str) -> str:
        """Answer with a JSON-RPC error (not a tool error result)."""
        on_call()
        raise MCPError(code=code, message=message)

    return server


class McpUpstream:
    """One upstream MCP server in a background thread: ``start()``, ``url``, counters, ``stop()``."""

    def __init__(self, label: str, *, token: str | None = None, port: int | None = None,
                 json_response: bool = True) -> None:
        self.label = label
        self.token = token
        self.port = port or free_port()  # a given port: a restarted server, which knows none of its old sessions
        self.sessions: set[str] = set()  # session ids this server handed out (one per initialize)
        self.authorizations: list[str | None] = []  # the Authorization header of every request, in order
        self.refused = 0  # requests answered 401 (missing or wrong token)
        self.calls = 0  # tools/call requests served
        # json_response=False: each answer is an SSE stream (the SDK server's default)
        app = build_server(label, self._count_call).streamable_http_app(json_response=json_response)
        config = uvicorn.Config(self._guard(app), host="127.0.0.1", port=self.port, log_config=None,
                                access_log=False, lifespan="on", log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    def _count_call(self) -> None:
        self.calls += 1

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def _guard(self, app: _ASGI) -> _ASGI:
        async def guarded(scope: _Scope, receive: _Receive, send: _Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
            auth = headers.get("authorization")
            self.authorizations.append(auth)
            if self.token is not None and auth != f"Bearer {self.token}":
                self.refused += 1
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json")]})
                await send({"type": "http.response.body", "body": b'{"error":"unauthorized"}'})
                return

            async def counting_send(message: MutableMapping[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    for key, value in message.get("headers", []):
                        if key.lower() == b"mcp-session-id":
                            self.sessions.add(value.decode())
                await send(message)

            await app(scope, receive, counting_send)

        return guarded

    def start(self, timeout: float = 15.0) -> McpUpstream:
        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._server.serve())
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name=f"mcp-upstream-{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"MCP upstream {self.label} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Stop at once: open connections (a client's standing GET stream) are not waited for."""
        self._server.should_exit = True
        self._server.force_exit = True
        if self._thread is not None:
            self._thread.join(10)


def main(argv: list[str] | None = None) -> None:
    """``python -m hearth.testing.mcp_upstream --port N [--token T] [--label L]``: serve in the foreground
    (the benchmark runs the upstream as a process of its own)."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", default=None)
    ap.add_argument("--label", default="U")
    args = ap.parse_args(argv)
    upstream = McpUpstream(args.label, token=args.token, port=args.port)
    asyncio.run(upstream._server.serve())


if __name__ == "__main__":
    main()
