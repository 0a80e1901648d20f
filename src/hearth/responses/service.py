"""Responses API calls through the gateway core, and the stored responses they continue.

A create is: the earlier conversation (``previous_response_id``, the caller's own and live, else 404 naming
the parameter), the chat body of this turn on top of it, one :class:`~hearth.gateway.service.Gateway`
call (``complete`` or ``open_stream``: admission, budgets, routing, failover, request log and usage), the
answer as a Response object, and — unless ``store`` is false — the response row with the conversation
extended by this turn and its answer: written while the answer is sent (a stream's before its last event),
never making a later read, chain or delete miss it (:mod:`hearth.responses.store`).
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy.ext.asyncio import AsyncEngine

from hearth.errors import HearthError
from hearth.gateway.context import CallContext
from hearth.gateway.model_name import shown_model
from hearth.gateway.service import Gateway
from hearth.responses.objects import assistant_message, from_chat_completion, new_response_id
from hearth.responses.requests import ResponsesRequest
from hearth.responses.store import delete_response, load_response, pending_writes, save_response
from hearth.responses.stream import ResponsesStream

__all__ = ["ResponsesService"]


def _not_found(response_id: str, param: str | None = None) -> HearthError:
    what = "Previous response" if param == "previous_response_id" else "Response"
    return HearthError("not_found", f"{what} with id '{response_id}' not found.", param=param)


class ResponsesService:
    def __init__(self, engine: AsyncEngine, gateway: Gateway, *, retention_s: float) -> None:
        self.engine = engine
        self.gateway = gateway
        self.retention_s = retention_s

    async def history(self, caller: str, request: ResponsesRequest) -> list[dict[str, Any]]:
        """The conversation ``request`` continues, as chat messages (empty without ``previous_response_id``)."""
        if request.previous_response_id is None:
            return []
        stored = await load_response(self.engine, caller=caller, response_id=request.previous_response_id)
        if stored is None:
            raise _not_found(request.previous_response_id, "previous_response_id")
        return stored.conversation

    async def create(self, ctx: CallContext, request: ResponsesRequest,
                     history: list[dict[str, Any]]) -> dict[str, Any]:
        """The answer; a stored one is being written when this returns (pending until then: see the store)."""
        reply = await self.gateway.complete(ctx, request.chat_body(history))
        completion = orjson.loads(reply.body)
        response = from_chat_completion(completion, response_id=new_response_id(stored=request.store),
                                        model=self._model(ctx, completion.get("model")), echo=request.echo)
        if request.store:
            async def write() -> None:
                await self._save(ctx, request, history, response)

            pending_writes(self.engine).start(response["id"], write)
        return response

    async def open_stream(self, ctx: CallContext, request: ResponsesRequest,
                          history: list[dict[str, Any]]) -> ResponsesStream:
        body = {**request.chat_body(history), "stream": True, "stream_options": {"include_usage": True}}
        relay = await self.gateway.open_stream(ctx, body)

        async def save(response: dict[str, Any]) -> None:
            await self._save(ctx, request, history, response)

        return ResponsesStream(relay, response_id=new_response_id(stored=request.store), model=self._model(ctx, None),
                               echo=request.echo, save=save if request.store else None)

    async def retrieve(self, caller: str, response_id: str) -> dict[str, Any]:
        stored = await load_response(self.engine, caller=caller, response_id=response_id)
        if stored is None:
            raise _not_found(response_id)
        return stored.response

    async def delete(self, caller: str, response_id: str) -> dict[str, Any]:
        if not await delete_response(self.engine, caller=caller, response_id=response_id):
            raise _not_found(response_id)
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    def _model(self, ctx: CallContext, answered: Any) -> str:
        """The model the response shows: the public name, unless the model exposes the upstream's."""
        public = shown_model(self.gateway.registry, ctx.model, ctx.endpoint)
        if public is not None:
            return public
        if isinstance(answered, str) and answered:
            return answered
        return ctx.endpoint.upstream_model if ctx.endpoint is not None else ctx.model or ""

    async def _save(self, ctx: CallContext, request: ResponsesRequest, history: list[dict[str, Any]],
                    response: dict[str, Any]) -> None:
        assert ctx.caller is not None
        conversation = [*history, *request.turn, assistant_message(response["output"])]
        await save_response(self.engine, caller=ctx.caller.name, response=response, conversation=conversation,
                            retention_s=self.retention_s)
