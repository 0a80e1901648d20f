"""The lines of a batch's output and error files, in OpenAI's format.

Every line is ``{"id": "batch_req_…", "custom_id": …, "response": {"status_code", "request_id", "body"} | null,
"error": {"code", "message"} | null}``: an answered request has a ``response`` (its body is what the synchronous
route would have answered, an error object for a 4xx/5xx); a request that was never sent (the window expired)
has only an ``error``. Lines with status 200 go to the output file, the others to the error file.
"""

from __future__ import annotations

from typing import Any

import orjson

from hearth.errors import HearthError
from hearth.ids import new_id


def request_id() -> str:
    return "batch_req_" + new_id()


def answered(req_id: str, custom_id: str, status: int, body: bytes | dict[str, Any]) -> str:
    """A request that got an answer; ``body`` as bytes (an upstream's JSON, kept as sent) or an object."""
    payload = orjson.Fragment(body) if isinstance(body, bytes) else body
    return orjson.dumps({"id": req_id, "custom_id": custom_id,
                         "response": {"status_code": status, "request_id": req_id, "body": payload},
                         "error": None}).decode()


def refused(req_id: str, custom_id: str, exc: HearthError) -> str:
    """A request Hearth answered with an error (its body refused, a limit, an upstream failure)."""
    return answered(req_id, custom_id, exc.status, exc.openai_body())


def not_sent(custom_id: str, code: str) -> str:
    """A request that was never executed (``batch_expired``)."""
    spec = HearthError(code)
    return orjson.dumps({"id": request_id(), "custom_id": custom_id, "response": None,
                         "error": {"code": code, "message": spec.message}}).decode()
