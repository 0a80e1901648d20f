"""Request signing: HMAC-SHA256 over the method, raw path+query, body hash, timestamp and nonce.

Internal callers may sign requests so that a captured request can neither be altered (the signature
covers method, target and body) nor replayed (the timestamp bounds its lifetime, the nonce makes it
single-use within that lifetime). The wire protocol is fixed by our requirements and documented for
callers in ``docs/signing.md``; the test vectors there are checked against this module by the tests.

Headers::

    X-Timestamp: unix seconds, decimal digits
    X-Nonce:     8-128 chars of [A-Za-z0-9_-], unique per request
    X-Signature: lowercase hex HMAC-SHA256(key, canonical)

    canonical = METHOD "\\n" path_with_query "\\n" sha256_hex(body) "\\n" timestamp "\\n" nonce

The canonical string is encoded as UTF-8 before it is MACed; in every valid request it is plain ASCII
(the target must be percent-encoded on the wire), so the encoding only matters for rejecting misuse.

Both sides live here: :func:`signed_headers` is the caller-side helper our users import, and
:func:`verify_request` is what Hearth runs on an incoming request. Verification order is part of the
contract: header syntax, then the timestamp window, then the signature, then (when the nonce store lost
its data) the ``not_before`` bound, and only then the nonce claim, so a forged or stale request can never
burn a genuine caller's nonce.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math
import re
import secrets
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal

__all__ = [
    "DEFAULT_WINDOW_S",
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "NONCE_STORE_RESET_MESSAGE",
    "SIGNATURE_ERROR_CODES",
    "SignatureError",
    "SignatureErrorCode",
    "canonical_string",
    "raw_path_with_query",
    "sha256_hex",
    "sign",
    "signed_headers",
    "verify_request",
]

HEADER_TIMESTAMP = "X-Timestamp"
HEADER_NONCE = "X-Nonce"
HEADER_SIGNATURE = "X-Signature"
DEFAULT_WINDOW_S = 300.0

SignatureErrorCode = Literal["signature_required", "timestamp_out_of_window", "signature_invalid", "nonce_replayed",
                             "nonce_store_reset"]
SIGNATURE_ERROR_CODES: tuple[SignatureErrorCode, ...] = (
    "signature_required",
    "timestamp_out_of_window",
    "signature_invalid",
    "nonce_replayed",
    "nonce_store_reset",
)
NONCE_STORE_RESET_MESSAGE = ("The replay-protection store was reset after this request was signed; "
                             "sign it again with a fresh timestamp.")

# Character classes are spelled out (not \d / \w) so that no Unicode digit or letter can slip through.
_TIMESTAMP_RE = re.compile(r"[0-9]{1,15}")  # 15 digits is ~31 million years; bounds int() work
_NONCE_RE = re.compile(r"[A-Za-z0-9_-]{8,128}")
_SIGNATURE_RE = re.compile(r"[0-9a-f]{64}")
# RFC 9110 token: the only characters an HTTP method may contain.
_METHOD_RE = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# What an HTTP request target may contain on the wire: visible ASCII, no spaces or controls.
_TARGET_RE = re.compile(r"/[\x21-\x7e]*")
# What the caller helper lets through: RFC 3986 path/query characters, which HTTP clients
# (httpx, requests, java.net.http) send unchanged. Anything else some client would re-encode.
_RFC3986_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/?%")
_BAD_PERCENT_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_URL_PREFIX_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")
_DETAIL_MAX = 512


class SignatureError(Exception):
    """A signed request was rejected; every code maps to HTTP 401.

    ``code`` is one of :data:`SIGNATURE_ERROR_CODES`:

    * ``signature_required`` - a signing header is missing, repeated or malformed;
    * ``timestamp_out_of_window`` - ``|now - X-Timestamp|`` exceeds the skew window;
    * ``signature_invalid`` - the signature does not match the request as Hearth received it;
    * ``nonce_replayed`` - the nonce was already used with this key within its retention time;
    * ``nonce_store_reset`` - the request was signed (``X-Timestamp``) before the nonce store last lost
      its data, so whether its nonce was already used cannot be known any more.

    ``message`` is for humans and ``details`` for the error envelope; neither ever contains the key
    or the expected signature (that would turn errors into a signing oracle). ``details`` only echoes
    what the caller sent, plus what Hearth computed from it that is not secret (the body hash), so a
    caller can diff it against their own canonical string.
    """

    status = 401

    def __init__(self, code: SignatureErrorCode, message: str, details: Mapping[str, Any] | None = None) -> None:
        if code not in SIGNATURE_ERROR_CODES:
            raise ValueError(f"unknown signature error code {code!r}")
        self.code: SignatureErrorCode = code
        self.message = message
        self.details: dict[str, Any] = dict(details or {})
        super().__init__(f"{code}: {message}")


def sha256_hex(data: bytes) -> str:
    """Lowercase hex SHA-256 of ``data``: the body hash of the canonical string."""
    return hashlib.sha256(data).hexdigest()


def _key_bytes(key: str | bytes) -> bytes:
    """A ``str`` key is used as its UTF-8 bytes. An empty key is a configuration error, not a caller error."""
    raw = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    if not raw:
        raise ValueError("the signing key is empty")
    return raw


def _body_bytes(body: bytes) -> bytes:
    if isinstance(body, str):
        # A str has no defined wire bytes; callers must sign exactly the bytes they send.
        raise TypeError("body must be the exact bytes sent on the wire, not str; encode it first")
    return bytes(body)


def canonical_string(method: str, path_with_query: str, body: bytes, timestamp: str, *, nonce: str) -> str:
    """Build the string that is MACed: the five fields joined by ``"\\n"``.

    ``method`` is upper-cased (it must be an HTTP token). ``path_with_query`` must be the request
    target exactly as sent on the wire: it starts with ``/``, is visible ASCII (percent-encoded), and
    carries ``?query`` only when the query is non-empty. ``timestamp`` and ``nonce`` must already have
    the header syntax. Raises ``ValueError`` for anything that cannot appear in a valid request, which
    also rules out a ``"\\n"`` inside a field shifting the field boundaries.
    """
    _check_method_and_target(method, path_with_query)
    if not _TIMESTAMP_RE.fullmatch(timestamp):
        raise ValueError("timestamp must be unix seconds as decimal digits")
    if not _NONCE_RE.fullmatch(nonce):
        raise ValueError("nonce must be 8-128 characters of [A-Za-z0-9_-]")
    return _joined(method, path_with_query, _body_bytes(body), timestamp=timestamp, nonce=nonce)


def _joined(method: str, path_with_query: str, body: bytes, *, timestamp: str, nonce: str) -> str:
    return "\n".join((method.upper(), path_with_query, sha256_hex(body), timestamp, nonce))


def _check_method_and_target(method: str, path_with_query: str) -> None:
    if not _METHOD_RE.fullmatch(method):
        raise ValueError(f"method {method!r} is not an HTTP method token")
    if not _TARGET_RE.fullmatch(path_with_query):
        raise ValueError(
            "path_with_query must start with '/' and contain only visible ASCII (percent-encode everything else)"
        )
    if path_with_query.endswith("?") and path_with_query.count("?") == 1:
        raise ValueError("path_with_query must not end with an empty '?': an empty query is omitted with its '?'")


def sign(key: str | bytes, method: str, path_with_query: str, body: bytes, *, timestamp: str, nonce: str) -> str:
    """Lowercase hex HMAC-SHA256 of the UTF-8 canonical string under ``key`` (``str`` keys as UTF-8)."""
    canonical = canonical_string(method, path_with_query, body, timestamp, nonce=nonce)
    return hmac.new(_key_bytes(key), canonical.encode("utf-8"), hashlib.sha256).hexdigest()


def _wire_path_with_query(url_or_path: str) -> str:
    """The request target an HTTP client will put on the wire for ``url_or_path``.

    Accepts ``scheme://host[:port]/path?query#fragment`` or ``/path?query``. The fragment is never
    sent, an empty query is omitted, and a URL without a path gets ``/``. Rather than guessing how a
    given client would re-encode unusual characters or normalise ``.``/``..`` segments, anything a
    client might change is refused with a ``ValueError`` naming the problem.
    """
    target = url_or_path.split("#", 1)[0]
    if not target.startswith("/"):
        match = _URL_PREFIX_RE.match(target)
        if match is None:
            raise ValueError(f"expected an absolute URL (https://host/path?query) or a path starting with '/': "
                             f"{url_or_path[:100]!r}")
        target = target[match.end():]
        if not target.startswith("/"):
            target = "/" + target
    bad = sorted({c for c in target if c not in _RFC3986_CHARS})
    if bad:
        raise ValueError(f"the URL must already be percent-encoded as it will be sent; "
                         f"percent-encode these characters: {''.join(bad)!r}")
    if _BAD_PERCENT_RE.search(target):
        raise ValueError("the URL contains a '%' that does not start a %XX escape; encode a literal '%' as %25")
    path, _, query = target.partition("?")
    if any(segment in (".", "..") for segment in path.split("/")):
        raise ValueError("the URL path contains '.' or '..' segments, which HTTP clients rewrite; resolve them first")
    return f"{path}?{query}" if query else path


def signed_headers(
    key: str | bytes,
    method: str,
    url_or_path: str,
    body: bytes = b"",
    *,
    timestamp: int | None = None,
    nonce: str | None = None,
) -> dict[str, str]:
    """Caller-side helper: the ``X-Timestamp``, ``X-Nonce`` and ``X-Signature`` headers for one request.

    ``url_or_path`` is the full URL you will request (or just ``/path?query``); it must already be
    percent-encoded exactly as it goes on the wire (see :func:`_wire_path_with_query` for what is
    refused). ``body`` must be the exact bytes you send - serialise JSON once and send those bytes.
    ``timestamp`` defaults to now and ``nonce`` to 32 random URL-safe characters; pass them only to
    reproduce a test vector. Call it once per request: a nonce is accepted only once.
    """
    if timestamp is None:
        timestamp = int(time.time())
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ValueError("timestamp must be a non-negative int of unix seconds")
    if nonce is None:
        nonce = secrets.token_urlsafe(24)  # 24 random bytes -> 32 chars of [A-Za-z0-9_-]
    ts = str(timestamp)
    signature = sign(key, method, _wire_path_with_query(url_or_path), body, timestamp=ts, nonce=nonce)
    return {HEADER_TIMESTAMP: ts, HEADER_NONCE: nonce, HEADER_SIGNATURE: signature}


_SIGNING_HEADERS = (HEADER_TIMESTAMP.lower(), HEADER_NONCE.lower(), HEADER_SIGNATURE.lower())


def _signing_values(headers: Mapping[str, str]) -> dict[str, list[object]]:
    """Every value of the three signing headers, by lower-case name, in one pass over ``items()``.

    Scans ``items()`` because starlette's ``Headers.items()`` yields every occurrence of a repeated
    header (so a request carrying two different ``X-Signature`` values is refused instead of having
    one silently picked) — and builds a new list of decoded pairs on each call, so it is read once."""
    found: dict[str, list[object]] = {}
    for key, value in headers.items():
        if isinstance(key, str):
            name = key.lower()
            if name in _SIGNING_HEADERS:
                found.setdefault(name, []).append(value)
    return found


def _header(found: dict[str, list[object]], name: str) -> str | None:
    """The single value of ``name`` (case-insensitive). Surrounding spaces/tabs are not part of an
    HTTP field value and are dropped."""
    values = found.get(name.lower())
    if not values:
        return None
    if len(values) > 1:
        raise SignatureError("signature_required", f"{name} must be sent exactly once", {"header": name})
    value = values[0]
    if not isinstance(value, str):
        raise SignatureError("signature_required", f"{name} is not a text header value", {"header": name})
    return value.strip(" \t")


def _required(found: dict[str, list[object]], name: str, pattern: re.Pattern[str], rule: str) -> str:
    value = _header(found, name)
    if value is None or value == "":
        raise SignatureError("signature_required", f"{name} header is missing", {"header": name})
    if not pattern.fullmatch(value):
        raise SignatureError("signature_required", f"{name} header is malformed: it must be {rule}", {"header": name})
    return value


def _nonce_key(key: bytes, nonce: str) -> str:
    """Nonces are scoped per signing key, so two callers picking the same nonce never collide."""
    return f"nonce:{_key_scope(key)}:{nonce}"


def hmac_sha256(key: bytes, message: bytes) -> bytes:
    """HMAC-SHA256 of ``message`` under ``key``, equal to ``hmac.digest(key, message, "sha256")``.

    Why not that call: OpenSSL 3 looks the algorithm up and keys a fresh HMAC context on every
    one-shot call, which in a busy server process (cold caches) cost ~13 µs of a signed call's
    event-loop time; here each key is keyed once (:func:`_keyed`) and each call copies its context."""
    mac = _keyed(key).copy()
    mac.update(message)
    return mac.digest()


@functools.lru_cache(maxsize=1024)
def _keyed(key: bytes) -> hmac.HMAC:
    """An HMAC-SHA256 context keyed with ``key``, one per key (held in memory, as the registry holds the keys)."""
    return hmac.new(key, digestmod="sha256")


@functools.lru_cache(maxsize=1024)
def _key_scope(key: bytes) -> str:
    return sha256_hex(key)[:16]


def _clip(value: str) -> str:
    return value if len(value) <= _DETAIL_MAX else value[:_DETAIL_MAX] + "..."


async def verify_request(
    *,
    key: str | bytes,
    method: str,
    path_with_query: str,
    body: bytes,
    headers: Mapping[str, str],
    claim_nonce: Callable[[str, float], Awaitable[bool]],
    window_s: float = DEFAULT_WINDOW_S,
    now: float | None = None,
    not_before: float | None = None,
) -> None:
    """Verify a signed request; return None if it is genuine and fresh, else raise :class:`SignatureError`.

    ``path_with_query`` must be the raw wire target (use :func:`raw_path_with_query` on the ASGI
    scope) and ``body`` the raw body bytes. ``headers`` may be any mapping; names match
    case-insensitively. Checks, in this order: headers present and well-formed
    (``signature_required``); ``|now - timestamp| <= window_s`` (``timestamp_out_of_window``); the
    HMAC via :func:`hmac.compare_digest` (``signature_invalid``); finally the nonce is claimed with
    ``claim_nonce(f"nonce:{sha256_hex(key)[:16]}:{nonce}", 2 * window_s)`` and a ``False`` answer
    means ``nonce_replayed``. Keeping the nonce for twice the window outlasts every timestamp that
    could still pass the window check. Just before the claim, a request whose ``X-Timestamp`` is older
    than ``not_before`` (unix seconds: when the nonce store last lost its data, None if never) is
    refused with ``nonce_store_reset``: its nonce may have been used before the loss, so it cannot be
    accepted once with certainty; a timestamp equal to or after ``not_before`` passes. Exceptions from
    ``claim_nonce`` (state backend down) propagate unchanged: the request must fail closed and the
    caller maps that to its own error.
    ``ValueError`` signals a server misconfiguration (empty key, non-positive window).
    """
    key_raw = _key_bytes(key)
    if not (math.isfinite(window_s) and window_s > 0):
        raise ValueError("window_s must be a positive finite number of seconds")

    found = _signing_values(headers)
    timestamp = _required(found, HEADER_TIMESTAMP, _TIMESTAMP_RE, "unix time in whole seconds as decimal digits")
    nonce = _required(found, HEADER_NONCE, _NONCE_RE, "8-128 characters of [A-Za-z0-9_-]")
    signature = _required(found, HEADER_SIGNATURE, _SIGNATURE_RE, "64 lowercase hex characters")

    current = time.time() if now is None else now
    skew = current - int(timestamp)
    if abs(skew) > window_s:
        hint = " (it looks like milliseconds; send seconds)" if int(timestamp) > 100_000_000_000 else ""
        raise SignatureError(
            "timestamp_out_of_window",
            f"X-Timestamp is {abs(skew):.0f} s {'behind' if skew > 0 else 'ahead of'} the server clock; "
            f"at most {window_s:g} s is allowed{hint}",
            {"timestamp": timestamp, "server_time": int(current), "window_s": window_s},
        )

    body_raw = _body_bytes(body)
    try:
        _check_method_and_target(method, path_with_query)  # timestamp and nonce: checked above
    except ValueError as exc:
        raise SignatureError("signature_invalid", f"the request cannot carry a valid signature: {exc}") from None
    canonical = _joined(method, path_with_query, body_raw, timestamp=timestamp, nonce=nonce)
    expected = hmac_sha256(key_raw, canonical.encode("utf-8"))  # the signature's syntax is checked above
    if not hmac.compare_digest(expected, bytes.fromhex(signature)):
        raise SignatureError(
            "signature_invalid",
            "X-Signature does not match the request as received; compare your canonical string with details",
            {
                "method": method.upper(),
                "path_with_query": _clip(path_with_query),
                "body_sha256": sha256_hex(body_raw),
                "timestamp": timestamp,
                "nonce": nonce,
            },
        )

    # Spelled "not >=" so that a NaN bound refuses (fails closed) instead of letting everything through.
    if not_before is not None and not int(timestamp) >= not_before:
        raise SignatureError("nonce_store_reset", NONCE_STORE_RESET_MESSAGE,
                             {"timestamp": timestamp, "not_before": not_before})

    if not await claim_nonce(_nonce_key(key_raw, nonce), 2 * window_s):
        raise SignatureError("nonce_replayed", "X-Nonce was already used; use a fresh nonce for every request",
                             {"nonce": nonce})


def raw_path_with_query(scope: Mapping[str, Any]) -> str:
    """The wire request target from an ASGI scope, as :func:`verify_request` expects it.

    Prefers ``scope["raw_path"]`` (bytes, decoded latin-1, so percent-encoding survives). Some servers
    have put the query into ``raw_path``; a literal ``?`` cannot be part of a raw path, so anything
    from it on is dropped and ``query_string`` is used. Without ``raw_path`` the decoded ``path`` is
    re-percent-encoded (UTF-8, upper-case hex) - exact for what mainstream clients send, but lossy
    for targets like ``%2F`` that decode to a reserved character. ``?`` plus the latin-1 decoded
    ``query_string`` is appended only when it is non-empty.
    """
    raw = scope.get("raw_path")
    if isinstance(raw, bytes | bytearray):
        path = bytes(raw).decode("latin-1").split("?", 1)[0]
    elif isinstance(raw, str):
        path = raw.split("?", 1)[0]
    else:
        path = urllib.parse.quote(str(scope.get("path") or "/"), safe="/!$&'()*+,;=:@~")
    query = scope.get("query_string") or b""
    query_text = bytes(query).decode("latin-1") if isinstance(query, bytes | bytearray) else str(query)
    return f"{path}?{query_text}" if query_text else path
