"""The console's signed session cookie and its CSRF tokens — pure functions, no HTTP.

A session is a small JSON object (session id, user, role, expiry, credential fingerprint) followed by its
HMAC-SHA256, keyed with a key derived from the master key (never the master key itself: the same bytes
then encrypt nothing and sign nothing else). Nothing secret is inside: the cookie only proves that this
server signed it in for that user until ``exp``. The fingerprint binds a session to the credential it was
opened with, so rotating the admin token or a user's password ends that credential's sessions at once.

CSRF tokens are derived from the session id (synchronizer tokens without server state): a page renders
``csrf_token(key, sid)`` into every form, and a POST whose token differs is refused. The login form,
before any session, is tied the same way to a random pre-login nonce held in its own cookie.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass
from typing import Final

import orjson

COOKIE: Final = "hearth_console"
LOGIN_COOKIE: Final = "hearth_console_login"
MAX_COOKIE_BYTES: Final = 1024
_KEY_LABEL: Final = b"hearth/console/session-key/v1"


def derive_key(master_key: bytes) -> bytes:
    """The session-signing key: HMAC(master key, a fixed label), a one-way derivation."""
    return hmac.new(master_key, _KEY_LABEL, hashlib.sha256).digest()


def fingerprint(key: bytes, credential: str) -> str:
    """A short keyed digest of the credential a session was opened with (the credential itself never leaves)."""
    return hmac.new(key, b"cred:" + credential.encode(), hashlib.sha256).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Session:
    sid: str
    user: str
    role: str
    expires_at: int
    credential: str  # fingerprint(key, credential used to sign in)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, b"session:" + body.encode(), hashlib.sha256).digest())


def new_session(key: bytes, *, user: str, role: str, credential: str, now: float, lifetime_s: float) -> Session:
    return Session(sid=os.urandom(16).hex(), user=user, role=role, expires_at=int(now + lifetime_s),
                   credential=fingerprint(key, credential))


def encode(key: bytes, session: Session) -> str:
    body = _b64(orjson.dumps({"sid": session.sid, "u": session.user, "r": session.role, "exp": session.expires_at,
                              "c": session.credential}))
    return f"{body}.{_mac(key, body)}"


def decode(key: bytes, cookie: str | None, *, now: float) -> Session | None:
    """The session in ``cookie`` if this key signed it and it has not expired; None otherwise (whatever is
    wrong with it: a forged, truncated, expired or oversized cookie is simply no session)."""
    if not cookie or len(cookie) > MAX_COOKIE_BYTES or cookie.count(".") != 1:
        return None
    body, mac = cookie.split(".")
    if not hmac.compare_digest(mac.encode(), _mac(key, body).encode()):
        return None
    try:
        data = orjson.loads(_unb64(body))
        session = Session(sid=str(data["sid"]), user=str(data["u"]), role=str(data["r"]), expires_at=int(data["exp"]),
                          credential=str(data["c"]))
    except (ValueError, KeyError, TypeError):
        return None
    return session if now < session.expires_at else None


def csrf_token(key: bytes, sid: str) -> str:
    return _b64(hmac.new(key, b"csrf:" + sid.encode(), hashlib.sha256).digest())


def login_token(key: bytes, nonce: str) -> str:
    return _b64(hmac.new(key, b"login:" + nonce.encode(), hashlib.sha256).digest())


def token_matches(expected: str, given: str | None) -> bool:
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())
