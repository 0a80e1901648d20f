"""Who may sign in to the console, and what each role may do.

Two kinds of credential: the admin token (user ``admin``, role admin) and the configured console users
(``console_users``: name, role, scrypt password hash). Roles are ordered — a viewer reads; an operator
also acts on tasks, review items and dead letters; an admin also changes the registry and prompts.
"""

from __future__ import annotations

import hmac
import re
from dataclasses import dataclass
from typing import Final

from hearth.console.passwords import verify_password
from hearth.registry.names import NAME_PATTERN
from hearth.settings import Settings

ROLES: Final = ("viewer", "operator", "admin")
ADMIN_USER: Final = "admin"
_NAME = re.compile(NAME_PATTERN)


@dataclass(frozen=True, slots=True)
class SignIn:
    user: str
    role: str
    credential: str  # what the session's fingerprint binds to (the token, or the password hash)


class ConsoleUsersInvalid(ValueError):
    pass


def configured_users(settings: Settings) -> dict[str, tuple[str, str]]:
    """``name -> (role, password_hash)``; a bad entry is a configuration error (raised, with the entry's index)."""
    out: dict[str, tuple[str, str]] = {}
    for i, entry in enumerate(settings.console_users):
        name, role, digest = entry.get("name", ""), entry.get("role", ""), entry.get("password_hash", "")
        if not _NAME.match(name) or role not in ROLES or not digest.startswith("scrypt$") or name in out:
            raise ConsoleUsersInvalid(f"console_users[{i}]: needs a unique `name` (a registry name), `role` "
                                      f"(one of {', '.join(ROLES)}) and a scrypt `password_hash`")
        out[name] = (role, digest)
    return out


def sign_in(settings: Settings, name: str, secret: str) -> SignIn | None:
    """The sign-in these credentials open, or None. A configured user's name is checked against its
    password only; ``admin`` (when no user has that name) against the admin token."""
    users = configured_users(settings)
    if name in users:
        role, digest = users[name]
        return SignIn(name, role, digest) if verify_password(secret, digest) else None
    token = settings.admin_token
    if name == ADMIN_USER and token and hmac.compare_digest(secret.encode(), token.encode()):
        return SignIn(ADMIN_USER, "admin", token)
    return None


def current_account(settings: Settings, user: str) -> tuple[str, str] | None:
    """``(role, credential)`` of ``user`` as configured now (None: no longer allowed in). A session is checked
    against it on every request: a rotated token or password ends older sessions, a changed role applies."""
    users = configured_users(settings)
    if user in users:
        return users[user]
    return ("admin", settings.admin_token) if user == ADMIN_USER and settings.admin_token else None


def role_at_least(role: str, needed: str) -> bool:
    return role in ROLES and ROLES.index(role) >= ROLES.index(needed)
