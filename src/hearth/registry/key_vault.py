"""Provider API keys at rest: AES-GCM under the master key, and the masked form shown to people.

The master key comes from ``HEARTH_MASTER_KEY`` (32 bytes, base64 or hex). For a zero-setup
development start, :func:`load_master_key` creates ``var/master.key`` (mode 0600) when no env key
is given and says so in the log; production deployments set the env variable.
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path
from typing import Any

from hearth.observability.logging import get_logger, mask_secret

_VERSION = b"v1"


class KeyVaultError(Exception):
    pass


def parse_master_key(text: str) -> bytes:
    raw = text.strip()
    for decode in (bytes.fromhex, base64.b64decode, base64.urlsafe_b64decode):
        try:
            key = decode(raw)
        except (ValueError, binascii.Error):
            continue
        if len(key) == 32:
            return key
    raise KeyVaultError("HEARTH_MASTER_KEY must be 32 bytes encoded as hex or base64")


def load_master_key(env_value: str | None, key_file: Path) -> bytes:
    if env_value:
        return parse_master_key(env_value)
    if key_file.exists():
        return parse_master_key(key_file.read_text())
    key_file.parent.mkdir(parents=True, exist_ok=True)
    key = os.urandom(32)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(key.hex())
    get_logger("hearth.key_vault").warning(
        "master_key_generated", path=str(key_file),
        hint="development only: set HEARTH_MASTER_KEY in production")
    return key


class KeyVault:
    """Encrypts provider keys; the associated data binds a ciphertext to its endpoint name.

    ``cryptography`` is imported on first use: a deployment without stored keys (the demo) never
    pays its ~5 MB of resident memory.
    """

    def __init__(self, master_key: bytes) -> None:
        self._master_key = master_key
        self._cipher: Any = None

    def _aead(self) -> Any:
        if self._cipher is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._cipher = AESGCM(self._master_key)
        return self._cipher

    def encrypt(self, plaintext: str, context: str) -> str:
        nonce = os.urandom(12)
        sealed = self._aead().encrypt(nonce, plaintext.encode(), context.encode())
        return (_VERSION + b":" + base64.b64encode(nonce + sealed)).decode()

    def decrypt(self, token: str, context: str) -> str:
        version, _, payload = token.encode().partition(b":")
        if version != _VERSION:
            raise KeyVaultError("unknown key ciphertext version")
        from cryptography.exceptions import InvalidTag

        blob = base64.b64decode(payload)
        try:
            plain: bytes = self._aead().decrypt(blob[:12], blob[12:], context.encode())
            return plain.decode()
        except InvalidTag as exc:
            raise KeyVaultError(
                f"cannot decrypt the key of {context!r}: wrong HEARTH_MASTER_KEY or tampered data") from exc


def mask_key(key: str | None) -> str | None:
    return None if not key else mask_secret(key)
