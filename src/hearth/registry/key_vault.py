"""Provider API keys at rest: AES-GCM under the master key, and the masked form shown to people.

The master key comes from ``HEARTH_MASTER_KEY`` (32 bytes, base64 or hex). For a zero-setup
development start, :func:`load_master_key` creates ``var/master.key`` (mode 0600) when no env key
is given and says so in the log; production deployments set the env variable.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Sequence
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

    Values are always encrypted under ``master_key``. ``previous_keys`` are only ever used to decrypt:
    a vault built with the new key and the old one as previous reads both during a master-key rotation
    (see :func:`hearth.registry.store.rotate_master_key`), and :meth:`rewrap` moves a value onto the
    current key.

    ``cryptography`` is imported on first use: a deployment without stored keys (the demo) never
    pays its ~5 MB of resident memory.
    """

    def __init__(self, master_key: bytes, previous_keys: Sequence[bytes] = ()) -> None:
        self._keys = (master_key, *previous_keys)
        self._ciphers: list[Any] | None = None

    def _aeads(self) -> list[Any]:
        if self._ciphers is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._ciphers = [AESGCM(key) for key in self._keys]
        return self._ciphers

    def encrypt(self, plaintext: str, context: str) -> str:
        nonce = os.urandom(12)
        sealed = self._aeads()[0].encrypt(nonce, plaintext.encode(), context.encode())
        return (_VERSION + b":" + base64.b64encode(nonce + sealed)).decode()

    def decrypt(self, token: str, context: str, *, subject: str | None = None) -> str:
        """The plaintext of ``token``; :class:`KeyVaultError` naming ``subject`` (else the context) if no
        key of this vault opens it. The message never contains the value or a key."""
        return self._open(token, context, subject)[0]

    def rewrap(self, token: str, context: str, *, subject: str | None = None) -> str | None:
        """``token`` re-encrypted under the current master key, or None if it already is under it."""
        plain, index = self._open(token, context, subject)
        return None if index == 0 else self.encrypt(plain, context)

    def _open(self, token: str, context: str, subject: str | None) -> tuple[str, int]:
        what = subject or repr(context)
        version, _, payload = token.encode().partition(b":")
        if version != _VERSION:
            raise KeyVaultError(f"cannot decrypt {what}: unknown key ciphertext version")
        from cryptography.exceptions import InvalidTag

        try:
            blob = base64.b64decode(payload, validate=True)
        except binascii.Error:
            blob = b""
        if len(blob) > 12:
            for index, aead in enumerate(self._aeads()):
                try:
                    plain: bytes = aead.decrypt(blob[:12], blob[12:], context.encode())
                except InvalidTag:
                    continue
                return plain.decode(), index
        raise KeyVaultError(
            f"cannot decrypt {what}: it was stored under another HEARTH_MASTER_KEY (or the data was tampered "
            f"with). Start with the master key it was stored under; to change master keys, see "
            f"`hearth rotate-master-key`.")


def mask_key(key: str | None) -> str | None:
    return None if not key else mask_secret(key)
