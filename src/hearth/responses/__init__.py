"""The OpenAI Responses API (``/v1/responses``) and legacy ``/v1/completions``: two more doors onto the gateway core.

Neither door calls a provider itself. Each translates its wire format to the core's chat body
(:mod:`hearth.responses.requests`, :mod:`hearth.responses.completions`), sends it through
:class:`~hearth.gateway.service.Gateway` — admission, budgets, routing, failover, request log and usage
events, exactly as ``/v1/chat/completions`` — and translates the chat answer back
(:mod:`hearth.responses.objects`, :mod:`hearth.responses.stream`). A stored response and the conversation
that led to it live in the ``responses`` table (:mod:`hearth.responses.store`), owned by the caller that
created it, so ``previous_response_id`` works across processes.
"""
