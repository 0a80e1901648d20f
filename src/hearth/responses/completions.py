"""Legacy ``POST /v1/completions`` for old clients: a prompt becomes one user message, the chat answer a
``text_completion``.

Only what maps onto a chat call is accepted: one prompt (a string, or an array of exactly one string),
``n`` 1. ``echo``, ``logprobs``, ``suffix``, ``best_of`` > 1 and token-array prompts are refused with 400
naming the parameter. ``max_tokens`` is passed as given: unlike OpenAI's legacy default of 16 tokens,
a request without it is limited like a chat call (by the scene's cap, if any). A stream's chunks are
``text_completion`` objects (``choices[].text``), then the usage chunk if ``stream_options.include_usage``
asked for it, then ``[DONE]``; an error mid-stream is relayed as the chat route sends it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Final

import orjson

from hearth.errors import HearthError
from hearth.gateway.relay import RelayStream
from hearth.wire.sse import SSEParser

__all__ = ["CompletionStream", "completion_chat_body", "text_completion"]

# passed to the chat body as they are; the chat validation checks them
_SAME: Final = ("model", "max_tokens", "temperature", "top_p", "stream", "stream_options", "stop",
                "presence_penalty", "frequency_penalty", "logit_bias", "user", "seed", "n")


def _unsupported(param: str, what: str) -> HearthError:
    return HearthError("invalid_request", f"{what} is not supported by this server.", param=param)


def completion_chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """The chat body of a legacy completion request (checked further by the chat validation, whose parameter
    names are the same); 400 ``invalid_request`` naming the parameter."""
    for key, value in body.items():
        if key == "prompt" or key in _SAME or value is None:
            continue
        if (key == "echo" and value is False) or (key == "best_of" and value == 1):
            continue
        if key in ("echo", "logprobs", "suffix", "best_of"):
            raise _unsupported(key, f"`{key}`")
        raise HearthError("invalid_request", f"Unknown parameter: '{key}'.", param=key)
    prompt = body.get("prompt")
    if type(prompt) is list and len(prompt) == 1:
        prompt = prompt[0]
    if type(prompt) is not str:
        raise HearthError("invalid_request", "`prompt` must be a string (or an array of one string).", param="prompt")
    if body.get("n") not in (None, 1):
        raise _unsupported("n", "`n` other than 1")
    chat = {k: body[k] for k in _SAME if body.get(k) is not None}
    chat["messages"] = [{"role": "user", "content": prompt}]
    return chat


def text_completion(completion: dict[str, Any]) -> dict[str, Any]:
    """A non-stream chat completion as a ``text_completion``."""
    choices = []
    for i, choice in enumerate(completion.get("choices") or ()):
        message = choice.get("message") or {}
        choices.append({"text": message.get("content") or "", "index": choice.get("index", i), "logprobs": None,
                        "finish_reason": choice.get("finish_reason")})
    answer: dict[str, Any] = {"id": _completion_id(completion.get("id")), "object": "text_completion",
                              "created": completion.get("created"), "model": completion.get("model"),
                              "choices": choices}
    if completion.get("system_fingerprint") is not None:
        answer["system_fingerprint"] = completion["system_fingerprint"]
    if completion.get("usage") is not None:
        answer["usage"] = completion["usage"]
    return answer


def _completion_id(chat_id: Any) -> str:
    text = str(chat_id or "")
    return "cmpl-" + text.removeprefix("chatcmpl-")


def _chunk(chunk: dict[str, Any]) -> dict[str, Any] | None:
    """A chat chunk as a ``text_completion`` chunk; None for one that carries nothing (the role chunk)."""
    choices = []
    for i, choice in enumerate(chunk.get("choices") or ()):
        text = (choice.get("delta") or {}).get("content") or ""
        if text or choice.get("finish_reason") is not None:
            choices.append({"text": text, "index": choice.get("index", i), "logprobs": None,
                            "finish_reason": choice.get("finish_reason")})
    if not choices and chunk.get("usage") is None:
        return None
    out: dict[str, Any] = {"id": _completion_id(chunk.get("id")), "object": "text_completion",
                           "created": chunk.get("created"), "model": chunk.get("model"), "choices": choices}
    if chunk.get("usage") is not None:
        out["usage"] = chunk["usage"]
    return out


class CompletionStream:
    """A :class:`~hearth.api.event_stream.FrameSource`: the relay's chat chunks re-told as text completions;
    ``[DONE]`` and error events pass through unchanged. The relay owns the call and is always closed."""

    def __init__(self, relay: RelayStream) -> None:
        self._relay = relay

    def client_left(self, code: str) -> None:
        self._relay.client_left(code)

    def shutdown_frame(self) -> bytes:
        return self._relay.shutdown_frame()

    async def close(self) -> None:
        await self._relay.close()

    async def frames(self) -> AsyncIterator[bytes]:
        parser = SSEParser()
        async for frame in self._relay.frames():
            out: list[bytes] = []
            for event in parser.feed(frame):
                data = event.data
                if data != b"[DONE]":
                    try:
                        chunk = orjson.loads(data)
                    except orjson.JSONDecodeError:
                        chunk = None  # relayed as it came, like the chat route does
                    if isinstance(chunk, dict) and "error" not in chunk:
                        translated = _chunk(chunk)
                        if translated is None:
                            continue
                        data = orjson.dumps(translated)
                out += (b"data: ", data, b"\n\n")
            if out:
                yield b"".join(out)
