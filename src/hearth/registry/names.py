"""What a registry name may be: the one rule for providers, quota groups, endpoints, models, scenes,
budgets and callers, in the YAML file, in the admin API's bodies and in its URL paths.

A name is 1–128 characters of ``A-Z a-z 0-9 . _ : -``, starting with a letter or digit, and never
contains ``..``. So a name is always safe as a URL path segment, a Redis key part, a log field and
a file name: no ``/``, no whitespace, no control characters, nothing that needs escaping.

Names that point *outside* the registry — an upstream model name, a price key (which may be an
upstream model, e.g. ``meta-llama/Llama-3.1-70B``) — are the provider's business and stay free-form,
but are bounded: 1–256 characters, no control characters, no leading or trailing whitespace.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import AfterValidator, Field

from hearth.errors import HearthError

__all__ = ["EXTERNAL_NAME_PATTERN", "NAME_PATTERN", "ExternalName", "RegistryName", "check_name", "is_external_name",
           "is_valid_name"]

NAME_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
EXTERNAL_NAME_PATTERN: Final = r"^[^\x00-\x20\x7f]([^\x00-\x1f\x7f]{0,254}[^\x00-\x20\x7f])?$"
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_EXTERNAL: Final = re.compile(EXTERNAL_NAME_PATTERN[1:-1])
_RULE: Final = "1-128 characters of A-Z a-z 0-9 . _ : -, starting with a letter or digit, without '..'"
_EXTERNAL_RULE: Final = "1-256 characters without control characters or surrounding whitespace"


def is_valid_name(value: Any) -> bool:
    return type(value) is str and _NAME.fullmatch(value) is not None and ".." not in value


def is_external_name(value: Any) -> bool:
    return type(value) is str and _EXTERNAL.fullmatch(value) is not None


def _registry_name(value: str) -> str:
    if ".." in value:
        raise ValueError(f"a name must not contain '..' ({_RULE})")
    return value


#: A registry entry's name, or a reference to one (pydantic type for the specs).
RegistryName = Annotated[str, Field(pattern=NAME_PATTERN), AfterValidator(_registry_name)]
#: A name outside the registry: an upstream model, a price key.
ExternalName = Annotated[str, Field(pattern=EXTERNAL_NAME_PATTERN)]


def check_name(value: str, field: str = "name", *, external: bool = False) -> str:
    """``value`` if it is a valid name, else 400 ``invalid_request`` naming ``field``."""
    if is_external_name(value) if external else is_valid_name(value):
        return value
    rule = _EXTERNAL_RULE if external else _RULE
    shown = value if len(value) <= 64 and value.isprintable() else repr(value[:64])
    raise HearthError("invalid_request", f"`{field}` {shown!s} is not a valid name: {rule}.", param=field,
                      details={"errors": [{"loc": [field], "msg": f"must be {rule}"}]})
