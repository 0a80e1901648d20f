"""A real OpenAI/Anthropic-compatible HTTP server standing in for LLM providers.

Tests and benchmarks point the gateway at this server instead of a paid API. It
speaks the wire formats exactly (``chat.completion``, ``chat.completion.chunk``,
embeddings, models, Anthropic Messages) and can misbehave on demand through
:class:`FakeBehavior` knobs, either as constructor defaults or as a scripted queue
consumed one behaviour per API request.

Determinism (so tests can compute expected values):

* The reply is built from ``n`` word pieces, ``reply_pieces(n)``; ``n`` is
  ``behavior.chunks`` capped by the request's ``max_tokens`` /
  ``max_completion_tokens`` (finish reason ``"length"``/``"max_tokens"`` when
  capped). A stream sends one piece per content event, so the concatenated deltas
  equal the non-stream text. The pieces include ``—``, ``你好`` and ``🔥``.
* Usage: ``prompt_tokens = text_chars // 4 + 1`` where ``text_chars`` counts the
  characters of every message's text (a string content, or the ``text`` of each
  content part; for Anthropic the ``system`` prompt too); ``completion_tokens = n`` for each of the
  request's ``n`` choices (every choice carries the same reply; a stream interleaves them by index).
  Embeddings: each string input costs ``len(s) // 4 + 1``, each token-array input
  ``len(tokens)``. See :func:`prompt_tokens_for`.
* Ids are ``chatcmpl-fake-<seq>`` / ``msg_fake_<seq>`` where ``seq`` is the
  request's 1-based number since the last reset; ``created`` is a constant.
* Embedding vectors come from :func:`fake_embedding` (unit length, float32).
* Images (``/v1/images/generations``): ``n`` labelled PNGs, 64x64 unless ``size`` says otherwise,
  ``input_tokens`` = :func:`prompt_tokens_for` of the prompt (see ``FakeUpstream._images``).

Only requests under ``/v1`` are counted in :class:`FakeStats`; the ``/_fake``
control routes are not, so polling stats does not disturb them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import itertools
import math
import random
import re
import signal
import struct
import sys
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self

import orjson
from aiohttp import web

from hearth.providers.png_label import label_png

__all__ = [
    "CREATED",
    "DEFAULT_EMBEDDING_DIMS",
    "MODELS",
    "FakeBehavior",
    "FakeStats",
    "FakeUpstream",
    "fake_embedding",
    "prompt_tokens_for",
    "reply_pieces",
    "reply_text",
    "run",
    "wants_tool_call",
]

SplitMode = Literal["none", "bytes", "coalesce"]
_SPLIT_MODES = ("none", "bytes", "coalesce")

CREATED = 1_700_000_000
DEFAULT_EMBEDDING_DIMS = 8
MODELS = ("fake-chat", "fake-embed", "fake-claude")
_WORDS = ("Hello", "—", "this", "is", "a", "fake", "reply", "你好", "from", "hearth", "🔥", "ok")
_FINGERPRINT = "fp_hearth_fake"
_COALESCE = 3
_CACHE_MAX = 256

_JSON_HEADERS = {"Content-Type": "application/json"}
_SSE_HEADERS = {"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
_GARBAGE_BODY = b'{"id": "chatcmpl-broken", "choices": [<<not json>>'
_GARBAGE_EVENT = b"data: {this is not json\n\n"
_DONE = b"data: [DONE]\n\n"
ERROR_EVENT_MESSAGE = "The server is overloaded; try again later."
_ERROR_EVENT = (b'data: {"error": {"message": "' + ERROR_EVENT_MESSAGE.encode()
                + b'", "type": "server_error", "param": null, "code": "overloaded"}}\n\n')
_MULTIBYTE_LEAD = re.compile(rb"[\xc0-\xff]")


@dataclass(slots=True, frozen=True)
class FakeBehavior:
    """How the server answers one request; every field defaults to "behave well".

    ``split``: ``"none"`` writes each SSE event in one write, ``"bytes"`` writes
    each event in several writes cut at pseudo-random positions (always one inside
    a multi-byte character when the event has one), ``"coalesce"`` writes three
    events per write. ``status`` other than 200 returns a provider-format error
    body (``retry_after`` then adds ``Retry-After`` in whole seconds, rounded up,
    and ``retry-after-ms``). ``malformed`` returns a non-JSON body, or inserts one
    non-JSON event after the first content event of a stream. ``hang`` never
    answers until the client leaves (or the server stops).
    ``disconnect_after_chunks=N`` closes the TCP connection right after the N-th
    content event (after the role/preamble events when 0), with no terminator.
    ``usage_in_stream`` gates the OpenAI usage chunk requested with
    ``stream_options.include_usage``; Anthropic streams always carry usage. ``usage_in_reply`` gates the
    ``usage`` of a non-stream OpenAI chat answer (some compatible servers send none).
    ``first_event_delay_ms`` sends a stream's status and headers at once, then
    waits that long before its first event (``latency_ms`` delays the headers too).
    ``extra_prompt_tokens`` is added to the reported prompt usage of chat answers.
    ``content`` replaces a non-stream chat answer's generated text (its usage still counts ``chunks`` tokens).
    ``tool_call`` names a tool to call instead of answering text (see :func:`wants_tool_call`).
    ``response_headers`` are sent with the answer (say ``x-ratelimit-remaining-requests``), whatever it
    is; the headers the server *received* are in :attr:`FakeStats.last_headers`.
    """

    latency_ms: float = 0.0
    chunks: int = 20
    chunk_delay_ms: float = 0.0
    split: SplitMode = "none"
    status: int = 200
    retry_after: float | None = None
    hang: bool = False
    malformed: bool = False
    disconnect_after_chunks: int | None = None
    usage_in_stream: bool = True
    usage_in_reply: bool = True
    first_event_delay_ms: float = 0.0
    extra_prompt_tokens: int = 0  # bill more prompt tokens than the text has (a hidden system prompt, say)
    error_after_chunks: int | None = None  # an OpenAI error event after the N-th content event, then the end
    response_headers: dict[str, str] = field(default_factory=dict)  # added to every answer (errors too)
    content: str | None = None  # a non-stream chat answer's exact message content (JSON for extraction tests, say)
    image_count: int | None = None  # an images answer carries this many images, whatever `n` asked
    # call this tool (chat: ``tool_calls``; Anthropic: a ``tool_use`` block; streams too) with these JSON arguments
    # when the request offers tools and its last turn is not already a tool's result (then: the usual text)
    tool_call: str | None = None
    tool_arguments: str = '{"location": "Paris"}'

    def __post_init__(self) -> None:
        if self.split not in _SPLIT_MODES:
            raise ValueError(f"split must be one of {_SPLIT_MODES}, got {self.split!r}")
        if self.status != 200 and not 400 <= self.status <= 599:
            raise ValueError("status must be 200 or an HTTP error status (400-599)")
        if self.latency_ms < 0 or self.chunk_delay_ms < 0 or self.chunks < 0:
            raise ValueError("latency_ms, chunk_delay_ms and chunks must be >= 0")
        if self.first_event_delay_ms < 0:
            raise ValueError("first_event_delay_ms must be >= 0")
        if self.retry_after is not None and self.retry_after < 0:
            raise ValueError("retry_after must be >= 0")
        if self.disconnect_after_chunks is not None and self.disconnect_after_chunks < 0:
            raise ValueError("disconnect_after_chunks must be >= 0")


@dataclass(slots=True)
class FakeStats:
    """Counters since the last reset; :attr:`FakeUpstream.stats` hands out copies.

    ``disconnects`` counts requests whose client went away before the response
    was complete; ``completed`` counts responses fully handed to the transport.
    A connection cut by ``disconnect_after_chunks`` counts as neither.
    """

    requests: int = 0
    by_path: dict[str, int] = field(default_factory=dict)
    in_flight: int = 0
    max_in_flight: int = 0
    disconnects: int = 0
    completed: int = 0
    last_headers: dict[str, str] = field(default_factory=dict)
    last_body: Any = None

    def to_json(self) -> dict[str, Any]:
        """The counters as a JSON-ready dict (the ``GET /_fake/stats`` body)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def reply_pieces(n: int) -> list[str]:
    """The ``n`` content deltas of a reply; joined they form :func:`reply_text`."""
    return [(" " if i else "") + _WORDS[i % len(_WORDS)] for i in range(n)]


def reply_text(n: int) -> str:
    """The full reply text for ``n`` pieces."""
    return "".join(reply_pieces(n))


def _text_chars(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        return sum(
            len(part["text"]) for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return 0


def prompt_tokens_for(messages: Any, system: Any = None) -> int:
    """Deterministic prompt token count: message text characters // 4 + 1."""
    chars = _text_chars(system)
    if isinstance(messages, list):
        chars += sum(_text_chars(m.get("content")) for m in messages if isinstance(m, dict))
    return chars // 4 + 1


def wants_tool_call(behavior: FakeBehavior, body: Mapping[str, Any]) -> bool:
    """Whether this request is answered with a call of ``behavior.tool_call``: tools are offered and the
    last turn is not a tool's result (an OpenAI ``tool`` message, an Anthropic ``tool_result`` block)."""
    if behavior.tool_call is None or not body.get("tools"):
        return False
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages and isinstance(messages[-1], dict) else {}
    if last.get("role") == "tool":
        return False
    content = last.get("content")
    return not (isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def _embedding_tokens(item: Any) -> int:
    if isinstance(item, str):
        return len(item) // 4 + 1
    if isinstance(item, list):
        return len(item)
    return 1


def fake_embedding(item: str | list[int], dims: int = DEFAULT_EMBEDDING_DIMS) -> list[float]:
    """A unit-length vector determined only by ``item`` and ``dims``.

    Values are rounded to float32 so the ``float`` and ``base64`` encodings agree.
    """
    seed = item if isinstance(item, str) else orjson.dumps(item).decode()
    rng = random.Random(f"{dims}:{seed}")
    raw = [rng.uniform(-1.0, 1.0) for _ in range(dims)]
    norm = math.sqrt(sum(v * v for v in raw)) or 1.0
    packed = struct.pack(f"<{dims}f", *(v / norm for v in raw))
    return list(struct.unpack(f"<{dims}f", packed))


_OPENAI_ERRORS: dict[int, tuple[str, str | None, str]] = {
    400: ("invalid_request_error", None, "Fake upstream rejected the request."),
    401: ("invalid_request_error", "invalid_api_key", "Incorrect API key provided."),
    403: ("invalid_request_error", "unsupported_country_region_territory", "Forbidden."),
    404: ("invalid_request_error", "model_not_found", "The model does not exist."),
    429: ("requests", "rate_limit_exceeded", "Rate limit reached for requests."),
    500: ("server_error", None, "The server had an error while processing your request."),
    503: ("server_error", None, "The engine is currently overloaded, please try again later."),
}
_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _openai_error(status: int, message: str | None = None) -> bytes:
    kind, code, default = _OPENAI_ERRORS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None, f"HTTP {status}")
    )
    error = {"message": message or default, "type": kind, "param": None, "code": code}
    return orjson.dumps({"error": error})


def _anthropic_error(status: int, message: str | None = None) -> bytes:
    kind = _ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message or f"HTTP {status}"}})


def _sse(payload: Any, event: str | None = None) -> bytes:
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + orjson.dumps(payload) + b"\n\n"


def _reply_size(behavior: FakeBehavior, body: Mapping[str, Any], *limits: str) -> tuple[int, bool]:
    """Pieces to send and whether the request's token limit cut the reply short."""
    n = behavior.chunks
    for key in limits:
        cap = body.get(key)
        if isinstance(cap, int) and not isinstance(cap, bool) and 0 <= cap < n:
            return cap, True
    return n, False


def _choices(body: Mapping[str, Any]) -> int:
    """The request's ``n`` (choices to generate), 1 when absent or not an integer from 1 to 128."""
    n = body.get("n")
    return n if type(n) is int and 1 <= n <= 128 else 1


_ID_PREFIX = b'data: {"id":"'


class _Templates:
    """Per-shape precomputed stream events, so the hot path mostly concatenates bytes."""

    def __init__(self) -> None:
        self._chat: dict[tuple[str, int, str, bool, int], list[bytes]] = {}
        self._anthropic: dict[tuple[int, str], list[bytes]] = {}

    def chat(self, model: str, n: int, finish: str, with_usage: bool, *, choices: int = 1) -> list[bytes]:
        """Event tails after ``_ID_PREFIX + id``: a role event per choice, then each of the ``n`` pieces
        for every choice in turn (as OpenAI interleaves them), then a finish event per choice."""
        key = (model, n, finish, with_usage, choices)
        cached = self._chat.get(key)
        if cached is not None:
            return cached
        base: dict[str, Any] = {
            "id": "",
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": model,
            "system_fingerprint": _FINGERPRINT,
        }
        extra = {"usage": None} if with_usage else {}

        def tail(index: int, delta: dict[str, Any], reason: str | None) -> bytes:
            choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": reason}
            dumped = orjson.dumps({**base, "choices": [choice], **extra})
            return dumped[len(_ID_PREFIX) - len(b"data: ") :] + b"\n\n"

        indexes = range(choices)
        events = [tail(i, {"role": "assistant", "content": ""}, None) for i in indexes]
        events += [tail(i, {"content": piece}, None) for piece in reply_pieces(n) for i in indexes]
        events += [tail(i, {}, finish) for i in indexes]
        return self._store(self._chat, key, events)

    def anthropic(self, n: int, stop_reason: str) -> list[bytes]:
        """Events after message_start: block start, ping, n deltas, block stop, message_delta, stop."""
        key = (n, stop_reason)
        cached = self._anthropic.get(key)
        if cached is not None:
            return cached
        start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
        events = [_sse(start, "content_block_start"), _sse({"type": "ping"}, "ping")]
        events += [
            _sse(
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}},
                "content_block_delta",
            )
            for piece in reply_pieces(n)
        ]
        events.append(_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": n},
        }
        events.append(_sse(delta, "message_delta"))
        events.append(_sse({"type": "message_stop"}, "message_stop"))
        return self._store(self._anthropic, key, events)

    @staticmethod
    def _store(cache: dict[Any, list[bytes]], key: Any, events: list[bytes]) -> list[bytes]:
        if len(cache) >= _CACHE_MAX:
            cache.clear()
        cache[key] = events
        return events


_MODELS_BODY = orjson.dumps(
    {
        "object": "list",
        "data": [{"id": m, "object": "model", "created": CREATED, "owned_by": "hearth-fake"} for m in MODELS],
    }
)

_Handler = Callable[[web.Request, FakeBehavior, Any, int], Awaitable[tuple[web.StreamResponse, bool]]]


class FakeUpstream:
    """The fake provider server; see the module docstring for its contract.

    Run it on the caller's loop (``await start()`` / ``async with``) or on its own
    loop in a daemon thread (``start_in_thread()`` / ``with``) so that a busy test
    loop or a server under test cannot starve it. Control methods are thread-safe.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, **behavior_defaults: Any) -> None:
        self.host = host
        self._requested_port = port
        self._initial = FakeBehavior(**behavior_defaults)
        self._defaults = self._initial
        self._script: deque[FakeBehavior] = deque()
        self._lock = threading.Lock()
        self._stats = FakeStats()
        self._templates = _Templates()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._closing: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    # -- addresses ---------------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (the ephemeral one chosen by the OS when created with 0)."""
        if self._port is None:
            raise RuntimeError("FakeUpstream is not started")
        return self._port

    @property
    def root_url(self) -> str:
        """``http://host:port`` without the ``/v1`` suffix (for the control routes)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, ``http://host:port/v1``."""
        return self.root_url + "/v1"

    # -- control -------------------------------------------------------------------

    @property
    def stats(self) -> FakeStats:
        """A consistent snapshot of the counters (it does not update afterwards)."""
        with self._lock:
            s = self._stats
            return dataclasses.replace(s, by_path=dict(s.by_path), last_headers=dict(s.last_headers))

    @property
    def defaults(self) -> FakeBehavior:
        """The behaviour used when the script queue is empty."""
        return self._defaults

    def reset(self, *, defaults: bool = False) -> None:
        """Zero the counters and drop the script; with ``defaults`` also restore the
        constructor defaults. Requests still in flight stay counted in ``in_flight``."""
        with self._lock:
            in_flight = self._stats.in_flight
            self._stats = FakeStats(in_flight=in_flight, max_in_flight=in_flight)
            self._script.clear()
            if defaults:
                self._defaults = self._initial

    def set_defaults(self, **changes: Any) -> FakeBehavior:
        """Change the given fields of the default behaviour; returns the new defaults."""
        with self._lock:
            self._defaults = dataclasses.replace(self._defaults, **changes)
            return self._defaults

    def script(self, *behaviors: FakeBehavior | Mapping[str, Any]) -> None:
        """Make the next ``len(behaviors)`` API requests use these behaviours, in
        arrival order, then fall back to the defaults. Replaces any earlier script.
        A mapping is applied as changes over the defaults current at this call."""
        with self._lock:
            resolved = [
                b if isinstance(b, FakeBehavior) else dataclasses.replace(self._defaults, **b) for b in behaviors
            ]
            self._script = deque(resolved)

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Listen on the running loop."""
        if self._runner is not None:
            raise RuntimeError("FakeUpstream already started")
        self._closing = asyncio.Event()
        app = web.Application(client_max_size=64 << 20)
        app.on_response_prepare.append(_add_behavior_headers)
        app.router.add_post("/v1/chat/completions", self._route(self._chat))
        app.router.add_post("/v1/embeddings", self._route(self._embeddings))
        app.router.add_get("/v1/models", self._route(self._models))
        app.router.add_post("/v1/messages", self._route(self._messages))
        app.router.add_post("/v1/images/generations", self._route(self._images))
        app.router.add_post("/v1/messages/count_tokens", self._route(self._count_tokens))
        app.router.add_get("/_fake/stats", self._http_stats)
        app.router.add_get("/_fake/defaults", self._http_get_defaults)
        app.router.add_post("/_fake/defaults", self._http_set_defaults)
        app.router.add_post("/_fake/script", self._http_script)
        app.router.add_post("/_fake/reset", self._http_reset)
        runner = web.AppRunner(app, access_log=None, handler_cancellation=True, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._requested_port, backlog=2048)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        self._port = int(runner.addresses[0][1])

    async def stop(self) -> None:
        """Stop listening, release hung requests and close connections."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        if self._closing is not None:
            self._closing.set()
        await runner.cleanup()

    def start_in_thread(self) -> None:
        """Serve from a new event loop in a daemon thread; returns once listening."""
        if self._thread is not None:
            raise RuntimeError("FakeUpstream already running in a thread")
        loop = _new_event_loop()
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:
                failure.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        thread = threading.Thread(target=serve, name="fake-upstream", daemon=True)
        thread.start()
        ready.wait()
        if failure:
            thread.join()
            raise failure[0]
        self._thread, self._thread_loop = thread, loop

    def stop_thread(self, timeout: float = 10.0) -> None:
        """Stop a server started with :meth:`start_in_thread` and join its thread."""
        thread, loop = self._thread, self._thread_loop
        if thread is None or loop is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            self._thread = self._thread_loop = None

    def __enter__(self) -> Self:
        self.start_in_thread()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop_thread()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    # -- request plumbing --------------------------------------------------------------

    def _route(self, handler: _Handler) -> Callable[[web.Request], Any]:
        async def route(request: web.Request) -> web.StreamResponse:
            return await self._serve(request, handler)

        return route

    async def _serve(self, request: web.Request, handler: _Handler) -> web.StreamResponse:
        """Count, pick a behaviour, apply the generic knobs, then run ``handler``.

        The behaviour is taken from the script before any await so that scripted
        behaviours follow request arrival order.
        """
        with self._lock:
            stats = self._stats
            stats.requests += 1
            seq = stats.requests
            stats.by_path[request.path] = stats.by_path.get(request.path, 0) + 1
            stats.in_flight += 1
            if stats.in_flight > stats.max_in_flight:
                stats.max_in_flight = stats.in_flight
            behavior = self._script.popleft() if self._script else self._defaults
        if behavior.response_headers:
            request[_BEHAVIOR_HEADERS] = behavior.response_headers
        anthropic = request.path.startswith("/v1/messages")
        finished = False
        try:
            body: Any = None
            raw = await request.read() if request.body_exists else b""
            bad_json = False
            if raw:
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    bad_json = True
            with self._lock:
                self._stats.last_headers = {str(k): v for k, v in request.headers.items()}
                self._stats.last_body = body
            if behavior.latency_ms:
                await asyncio.sleep(behavior.latency_ms / 1000)
            if behavior.hang:
                assert self._closing is not None
                await self._closing.wait()
                return web.Response(status=503, body=b"", headers=_JSON_HEADERS)
            if behavior.status != 200:
                finished = True
                return _error_response(behavior, anthropic)
            if behavior.malformed and not (isinstance(body, dict) and body.get("stream")):
                finished = True
                return web.Response(body=_GARBAGE_BODY, headers=_JSON_HEADERS)
            if bad_json or (request.method == "POST" and not isinstance(body, dict)):
                finished = True
                err = _anthropic_error if anthropic else _openai_error
                return web.Response(status=400, body=err(400, "Body must be a JSON object."), headers=_JSON_HEADERS)
            response, finished = await handler(request, behavior, body, seq)
            return response
        except asyncio.CancelledError:
            self._count_disconnect()
            raise
        except ConnectionError:
            self._count_disconnect()
            return web.Response(status=499)
        finally:
            with self._lock:
                self._stats.in_flight -= 1
                if finished:
                    self._stats.completed += 1

    def _count_disconnect(self) -> None:
        if self._closing is not None and self._closing.is_set():
            return
        with self._lock:
            self._stats.disconnects += 1

    async def _write_events(
        self, request: web.Request, behavior: FakeBehavior, events: list[bytes], cut_at: int | None, *, seq: int
    ) -> tuple[web.StreamResponse, bool]:
        """Stream ``events``; with ``cut_at`` close the connection after that many.

        Returns the response and whether it completed (False when cut).
        """
        response = web.StreamResponse(status=200, headers=_SSE_HEADERS)
        await response.prepare(request)
        if behavior.first_event_delay_ms:
            await asyncio.sleep(behavior.first_event_delay_ms / 1000)
        to_send = events if cut_at is None else events[:cut_at]
        delay = behavior.chunk_delay_ms / 1000
        for i, write in enumerate(_writes(to_send, behavior.split, seq)):
            if delay and i:
                await asyncio.sleep(delay)
            for piece in write:
                await response.write(piece)
        if cut_at is not None:
            transport = request.transport
            if transport is None or transport.is_closing():
                raise ConnectionResetError("client went away before the cut")
            transport.close()
            return response, False
        await response.write_eof()
        return response, True

    # -- API routes ---------------------------------------------------------------------

    async def _chat(
        self, request: web.Request, behavior: FakeBehavior, body: dict[str, Any], seq: int
    ) -> tuple[web.StreamResponse, bool]:
        model = str(body.get("model") or MODELS[0])
        n, capped = _reply_size(behavior, body, "max_completion_tokens", "max_tokens")
        choices = _choices(body)
        finish = "length" if capped else "stop"
        prompt = prompt_tokens_for(body.get("messages")) + behavior.extra_prompt_tokens
        usage = {"prompt_tokens": prompt, "completion_tokens": n * choices, "total_tokens": prompt + n * choices}
        chat_id = f"chatcmpl-fake-{seq}"
        if wants_tool_call(behavior, body):
            return await self._chat_tool_call(request, behavior, body, seq, model=model)
        if not body.get("stream"):
            text = reply_text(n) if behavior.content is None else behavior.content
            message = {"role": "assistant", "content": text, "refusal": None}
            payload = {
                "id": chat_id,
                "object": "chat.completion",
                "created": CREATED,
                "model": model,
                "system_fingerprint": _FINGERPRINT,
                "choices": [{"index": i, "message": message, "logprobs": None, "finish_reason": finish}
                            for i in range(choices)],
                **({"usage": usage} if behavior.usage_in_reply else {}),
            }
            return web.Response(body=orjson.dumps(payload), headers=_JSON_HEADERS), True
        options = body.get("stream_options")
        with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
        head = _ID_PREFIX + chat_id.encode()
        events = [head + tail for tail in self._templates.chat(model, n, finish, with_usage, choices=choices)]
        if with_usage and behavior.usage_in_stream:
            final = {
                "id": chat_id,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "system_fingerprint": _FINGERPRINT,
                "choices": [],
                "usage": usage,
            }
            events.append(b"data: " + orjson.dumps(final) + b"\n\n")
        events.append(_DONE)
        return await self._stream(request, behavior, events, choices, n=n * choices, seq=seq)

    async def _messages(
        self, request: web.Request, behavior: FakeBehavior, body: dict[str, Any], seq: int
    ) -> tuple[web.StreamResponse, bool]:
        model = str(body.get("model") or MODELS[2])
        n, capped = _reply_size(behavior, body, "max_tokens")
        stop_reason = "max_tokens" if capped else "end_turn"
        prompt = prompt_tokens_for(body.get("messages"), body.get("system"))
        msg_id = f"msg_fake_{seq}"
        if wants_tool_call(behavior, body):
            return await self._messages_tool_call(request, behavior, body, seq, model=model)
        message: dict[str, Any] = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "output_tokens": 1},
        }
        if not body.get("stream"):
            message["content"] = [{"type": "text", "text": reply_text(n)}]
            message["stop_reason"] = stop_reason
            message["usage"] = {"input_tokens": prompt, "output_tokens": n}
            return web.Response(body=orjson.dumps(message), headers=_JSON_HEADERS), True
        start = _sse({"type": "message_start", "message": message}, "message_start")
        events = [start, *self._templates.anthropic(n, stop_reason)]
        return await self._stream(request, behavior, events, 3, n=n, seq=seq)

    async def _count_tokens(
        self, request: web.Request, behavior: FakeBehavior, body: dict[str, Any], seq: int
    ) -> tuple[web.StreamResponse, bool]:
        """Anthropic's ``/v1/messages/count_tokens``: the prompt tokens its answer would report."""
        count = {"input_tokens": prompt_tokens_for(body.get("messages"), body.get("system"))}
        return web.Response(body=orjson.dumps(count), headers=_JSON_HEADERS), True

    async def _chat_tool_call(
        self, request: web.Request, behavior: FakeBehavior, body: dict[str, Any], seq: int, *, model: str
    ) -> tuple[web.StreamResponse, bool]:
        """A chat answer calling ``behavior.tool_call`` (a stream sends the arguments in two pieces)."""
        prompt = prompt_tokens_for(body.get("messages")) + behavior.extra_prompt_tokens
        args = behavior.tool_arguments
        n = len(args) // 4 + 1
        usage = {"prompt_tokens": prompt, "completion_tokens": n, "total_tokens": prompt + n}
        call = {"id": f"call_fake_{seq}", "type": "function", "function": {"name": behavior.tool_call,
                                                                          "arguments": args}}
        head = {"id": f"chatcmpl-fake-{seq}", "created": CREATED, "model": model, "system_fingerprint": _FINGERPRINT}
        if not body.get("stream"):
            message = {"role": "assistant", "content": None, "tool_calls": [call], "refusal": None}
            payload = {**head, "object": "chat.completion", "usage": usage,
                       "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls"}]}
            return web.Response(body=orjson.dumps(payload), headers=_JSON_HEADERS), True
        options = body.get("stream_options")
        with_usage = isinstance(options, dict) and bool(options.get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return _sse({**head, "object": "chat.completion.chunk", "choices": [choice],
                         **({"usage": None} if with_usage else {})})

        half = len(args) // 2
        opening = {"index": 0, **call, "function": {"name": behavior.tool_call, "arguments": ""}}
        events = [chunk({"role": "assistant", "content": None, "tool_calls": [opening]}),
                  *(chunk({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
                    for piece in (args[:half], args[half:])),
                  chunk({}, "tool_calls")]
        if with_usage and behavior.usage_in_stream:
            events.append(_sse({**head, "object": "chat.completion.chunk", "choices": [], "usage": usage}))
        events.append(_DONE)
        return await self._write_events(request, behavior, events, None, seq=seq)

    async def _messages_tool_call(
        self, request: web.Request, behavior: FakeBehavior, body: dict[str, Any], seq: int, *, model: str
    ) -> tuple[web.StreamResponse, bool]:
        """An Anthropic answer with one ``tool_use`` block (a stream sends the input in two pieces)."""
        prompt = prompt_tokens_for(body.get("messages"), body.get("system"))
        args = behavior.tool_arguments
        n = len(args) // 4 + 1
        block = {"type": "tool_use", "id": f"toolu_fake_{seq}", "name": behavior.tool_call}
        message: dict[str, Any] = {"id": f"msg_fake_{seq}", "type": "message", "role": "assistant", "model": model,
                                   "content": [{**block, "input": orjson.loads(args)}], "stop_reason": "tool_use",
                                   "stop_sequence": None, "usage": {"input_tokens": prompt, "output_tokens": n}}
        if not body.get("stream"):
            return web.Response(body=orjson.dumps(message), headers=_JSON_HEADERS), True
        start = {**message, "content": [], "stop_reason": None, "usage": {"input_tokens": prompt, "output_tokens": 1}}
        half = len(args) // 2
        events = [_sse({"type": "message_start", "message": start}, "message_start"),
                  _sse({"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}},
                       "content_block_start"),
                  *(_sse({"type": "content_block_delta", "index": 0,
                          "delta": {"type": "input_json_delta", "partial_json": piece}}, "content_block_delta")
                    for piece in (args[:half], args[half:])),
                  _sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
                  _sse({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                        "usage": {"output_tokens": n}}, "message_delta"),
                  _sse({"type": "message_stop"}, "message_stop")]
        return await self._write_events(request, behavior, events, None, seq=seq)

    async def _stream(
        self,
        request: web.Request,
        behavior: FakeBehavior,
        events: list[bytes],
        first_content: int,
        *, n: int,
        seq: int,
    ) -> tuple[web.StreamResponse, bool]:
        """Apply the stream knobs to events whose content events are
        ``events[first_content : first_content + n]``."""
        cut_at = None
        if behavior.disconnect_after_chunks is not None:
            cut_at = first_content + min(behavior.disconnect_after_chunks, n)
        if behavior.error_after_chunks is not None:  # the upstream's own error event, then nothing more
            events = [*events[:first_content + min(behavior.error_after_chunks, n)], _ERROR_EVENT]
        if behavior.malformed:
            at = first_content + min(1, n)
            events = [*events[:at], _GARBAGE_EVENT, *events[at:]]
            if cut_at is not None and cut_at >= at:
                cut_at += 1
        return await self._write_events(request, behavior, events, cut_at, seq=seq)

    async def _embeddings(
        self, request: web.Request, behavior: FakeBehavior, body: dict[str, Any], seq: int
    ) -> tuple[web.StreamResponse, bool]:
        raw_input = body.get("input")
        if isinstance(raw_input, str) or (isinstance(raw_input, list) and raw_input and isinstance(raw_input[0], int)):
            items: list[Any] = [raw_input]
        elif isinstance(raw_input, list) and raw_input:
            items = raw_input
        else:
            return _json_error(400, "'input' must be a non-empty string or array."), True
        dims = body.get("dimensions")
        if not isinstance(dims, int) or isinstance(dims, bool) or dims <= 0:
            dims = DEFAULT_EMBEDDING_DIMS
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, item in enumerate(items):
            vector = fake_embedding(item if isinstance(item, str | list) else str(item), dims)
            encoded: Any = vector
            if as_base64:
                encoded = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        tokens = sum(_embedding_tokens(item) for item in items)
        payload = {
            "object": "list",
            "data": data,
            "model": str(body.get("model") or MODELS[1]),
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return web.Response(body=orjson.dumps(payload), headers=_JSON_HEADERS), True

    async def _images(
        self, request: web.Request, behavior: FakeBehavior, body: dict[str, Any], seq: int
    ) -> tuple[web.StreamResponse, bool]:
        """``n`` labelled PNGs (``FAKE <seq>.<i>`` and the prompt's first words) of the requested size
        (default 64x64, kept small on purpose); ``b64_json`` unless ``response_format`` is ``url``, then
        URLs under ``/_fake/images/`` (not served: a gateway must not fetch them). Usage as gpt-image-1
        reports it: ``input_tokens`` = :func:`prompt_tokens_for` of the prompt."""
        prompt = body.get("prompt")
        n = body.get("n", 1)
        if not isinstance(prompt, str) or not prompt or not isinstance(n, int) or not 1 <= n <= 10:
            return _json_error(400, "'prompt' must be a non-empty string and 'n' from 1 to 10."), True
        width, height = 64, 64
        size = body.get("size")
        if isinstance(size, str) and size != "auto":
            w, _, h = size.partition("x")
            if not (w.isdigit() and h.isdigit() and 0 < int(w) <= 4096 and 0 < int(h) <= 4096):
                return _json_error(400, f"Invalid size {size!r}."), True
            width, height = int(w), int(h)
        words = prompt.split()[:3]
        data: list[dict[str, Any]] = []
        for i in range(n if behavior.image_count is None else behavior.image_count):
            if body.get("response_format") == "url":
                data.append({"url": f"{self.root_url}/_fake/images/{seq}-{i}.png", "revised_prompt": None})
                continue
            png = label_png([f"FAKE {seq}.{i + 1}", *words], width=width, height=height)
            data.append({"b64_json": base64.b64encode(png).decode(), "revised_prompt": None})
        tokens = prompt_tokens_for([{"content": prompt}])
        payload = {"created": CREATED, "data": data,
                   "usage": {"input_tokens": tokens, "output_tokens": 0, "total_tokens": tokens,
                             "input_tokens_details": {"text_tokens": tokens, "image_tokens": 0}}}
        return web.Response(body=orjson.dumps(payload), headers=_JSON_HEADERS), True

    async def _models(
        self, request: web.Request, behavior: FakeBehavior, body: Any, seq: int
    ) -> tuple[web.StreamResponse, bool]:
        return web.Response(body=_MODELS_BODY, headers=_JSON_HEADERS), True

    # -- control routes ---------------------------------------------------------------

    async def _http_stats(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(self.stats.to_json()), headers=_JSON_HEADERS)

    async def _http_get_defaults(self, request: web.Request) -> web.Response:
        return web.Response(body=orjson.dumps(dataclasses.asdict(self._defaults)), headers=_JSON_HEADERS)

    async def _http_set_defaults(self, request: web.Request) -> web.Response:
        try:
            changes = orjson.loads(await request.read())
            if not isinstance(changes, dict):
                raise TypeError("expected a JSON object of FakeBehavior fields")
            updated = self.set_defaults(**changes)
        except (ValueError, TypeError) as exc:
            return _json_error(400, str(exc))
        return web.Response(body=orjson.dumps(dataclasses.asdict(updated)), headers=_JSON_HEADERS)

    async def _http_script(self, request: web.Request) -> web.Response:
        try:
            entries = orjson.loads(await request.read())
            if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
                raise TypeError("expected a JSON list of objects of FakeBehavior fields")
            self.script(*entries)
        except (ValueError, TypeError) as exc:
            return _json_error(400, str(exc))
        return web.Response(body=orjson.dumps({"queued": len(entries)}), headers=_JSON_HEADERS)

    async def _http_reset(self, request: web.Request) -> web.Response:
        raw = await request.read()
        try:
            options = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError as exc:
            return _json_error(400, str(exc))
        self.reset(defaults=isinstance(options, dict) and bool(options.get("defaults")))
        return web.Response(body=b'{"reset":true}', headers=_JSON_HEADERS)


_BEHAVIOR_HEADERS = web.RequestKey("fake_response_headers", dict)


async def _add_behavior_headers(request: web.Request, response: web.StreamResponse) -> None:
    extra = request.get(_BEHAVIOR_HEADERS)
    if extra:
        response.headers.update(extra)


def _json_error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=_openai_error(status, message), headers=_JSON_HEADERS)


def _error_response(behavior: FakeBehavior, anthropic: bool) -> web.Response:
    status = behavior.status
    body = _anthropic_error(status) if anthropic else _openai_error(status)
    headers = dict(_JSON_HEADERS)
    if behavior.retry_after is not None:
        headers["Retry-After"] = str(math.ceil(behavior.retry_after))
        headers["retry-after-ms"] = str(round(behavior.retry_after * 1000))
    return web.Response(status=status, body=body, headers=headers)


def _writes(events: list[bytes], split: SplitMode, seq: int) -> Iterable[list[bytes]]:
    """Group events into writes: each yielded list is one logical write step whose
    pieces are sent back to back (several pieces only in ``"bytes"`` mode)."""
    if split == "none":
        return ([event] for event in events)
    if split == "coalesce":
        return ([b"".join(events[i : i + _COALESCE])] for i in range(0, len(events), _COALESCE))
    rng = random.Random(seq)
    return (_cut(event, rng) for event in events)


def _cut(event: bytes, rng: random.Random) -> list[bytes]:
    """Split one event at two random positions plus one inside its first
    multi-byte UTF-8 character, if it has one."""
    if len(event) < 2:
        return [event]
    points = {rng.randrange(1, len(event)) for _ in range(2)}
    multibyte = _MULTIBYTE_LEAD.search(event)
    if multibyte is not None:
        points.add(multibyte.start() + 1)
    bounds = [0, *sorted(points), len(event)]
    return [event[a:b] for a, b in itertools.pairwise(bounds)]


def _new_event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def run(host: str, port: int, **behavior_defaults: Any) -> None:
    """Serve until SIGINT/SIGTERM (blocking); uses uvloop when it is installed."""

    async def main() -> None:
        upstream = FakeUpstream(host, port, **behavior_defaults)
        await upstream.start()
        print(f"fake upstream listening on {upstream.base_url}", file=sys.stderr, flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await upstream.stop()

    with contextlib.suppress(KeyboardInterrupt), asyncio.Runner(loop_factory=_new_event_loop) as runner:
        runner.run(main())
