"""The ``{name:anyname}`` path convertor: a registry name in an admin URL, matched whatever it holds.

Why: a route must *match* a bad name to refuse it with 400 ``invalid_request`` naming the field
(:func:`hearth.registry.names.check_name`). Starlette's ``path`` convertor (``.*``) does not match a
newline, so ``/callers/a%0Ab`` fell through to a bare 404, and its ``str`` convertor stops at ``/``,
so ``/endpoints/a%2Fb/enable`` (uvicorn decodes ``%2F``) became a 405 from another route. This one
matches every character, ``/`` and control characters included; the handler then checks the name.
"""

from __future__ import annotations

from typing import ClassVar

from starlette.convertors import Convertor, register_url_convertor

__all__ = ["AnyNameConvertor", "register_any_name"]


class AnyNameConvertor(Convertor[str]):
    regex: ClassVar[str] = "(?s:.+)"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return str(value)


def register_any_name() -> None:
    """Make ``{name:anyname}`` available to routes (idempotent; call before declaring them)."""
    register_url_convertor("anyname", AnyNameConvertor())
