"""Validating a parsed body against a pydantic model, with Hearth's 400 for whatever does not fit.

In the foundation because every face validates bodies the same way: the HTTP routers, and the task
engine when it accepts a payload that a worker will later read with the same model.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from hearth.errors import HearthError

M = TypeVar("M", bound=BaseModel)


def parse_model(model: type[M], body: dict[str, Any], what: str) -> M:
    """``body`` validated as ``model``; else 400 ``invalid_request`` listing every problem (``param``: the first)."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        problems = [{"loc": list(e["loc"]), "msg": e["msg"]} for e in exc.errors()]
        param = ".".join(map(str, problems[0]["loc"])) if problems else None
        raise HearthError("invalid_request", f"The {what} is invalid.", details={"errors": problems},
                          param=param) from exc
