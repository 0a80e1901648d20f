"""Console users' passwords: scrypt hashes (stdlib), and ``python -m hearth.console.passwords`` to make one.

A hash is ``scrypt$<n>$<r>$<p>$<salt b64>$<digest b64>``; only hashes are configured
(``HEARTH_CONSOLE_USERS``), never passwords.
"""

from __future__ import annotations

import base64
import getpass
import hashlib
import hmac
import os
import sys
from typing import Final

_N: Final = 2**14
_R: Final = 8
_P: Final = 1


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    salt = salt or os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    enc = base64.b64encode
    return f"scrypt${_N}${_R}${_P}${enc(salt).decode()}${enc(digest).decode()}"


def verify_password(password: str, encoded: str) -> bool:
    """True when ``password`` matches ``encoded``; a malformed hash matches nothing."""
    try:
        scheme, n, r, p, salt, digest = encoded.split("$")
        if scheme != "scrypt" or int(n) > 2**20:
            return False
        expected = base64.b64decode(digest)
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                             dklen=len(expected))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, expected)


def main() -> None:  # pragma: no cover - interactive
    password = getpass.getpass("console password: ")
    if len(password) < 8:
        sys.exit("a console password has at least 8 characters")
    if getpass.getpass("again: ") != password:
        sys.exit("the two entries differ")
    print(hash_password(password))


if __name__ == "__main__":  # pragma: no cover
    main()
