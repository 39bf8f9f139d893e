"""Connection keys encrypted at rest: Fernet (``cryptography``) under a key derived from
``CONNECTION_ENCRYPTION_KEY``.

The setting may be any string of at least 32 characters (a passphrase or a Fernet key); the
Fernet key is derived from it with HKDF-SHA256, so the setting itself is never the cipher key.
Several comma-separated values rotate keys: the first encrypts, all of them decrypt
(``MultiFernet``). Without the setting nothing can be encrypted (saving a key is refused);
start-up fails when encrypted keys exist but the setting is missing or none of its values opens
them (``connections.checks``).
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

from chat_platform import redaction

MIN_SECRET_CHARS = 32
_INFO = b"chat-platform provider connection keys v1"


class KeyUnavailable(Exception):
    """No usable CONNECTION_ENCRYPTION_KEY, or a stored key it cannot open. ``str()`` names the
    setting, never a value."""


def _secrets() -> list[str]:
    raw = getattr(settings, "CONNECTION_ENCRYPTION_KEY", "") or ""
    return [part.strip() for part in raw.split(",") if part.strip()]


def configured() -> bool:
    return bool(_secrets())


def store_refusal(what: str) -> str | None:
    """Why ``what`` (e.g. "a key") cannot be stored encrypted on this server, in words for the
    person saving it; None when it can. A value shorter than ``MIN_SECRET_CHARS`` is refused as
    the cipher refuses it, not only at the first encryption (which answered 500)."""
    secrets = _secrets()
    if not secrets:
        return f"CONNECTION_ENCRYPTION_KEY is not set on the server: {what} cannot be stored"
    if any(len(s) < MIN_SECRET_CHARS for s in secrets):
        return (
            f"CONNECTION_ENCRYPTION_KEY on the server is shorter than {MIN_SECRET_CHARS} "
            f"characters: {what} cannot be stored"
        )
    return None


def _fernet_key(secret: str) -> bytes:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(
        secret.encode("utf-8")
    )
    return base64.urlsafe_b64encode(derived)


def _cipher() -> MultiFernet:
    secrets = _secrets()
    if not secrets:
        raise KeyUnavailable(
            "CONNECTION_ENCRYPTION_KEY is not set: connection keys cannot be stored or read"
        )
    short = [s for s in secrets if len(s) < MIN_SECRET_CHARS]
    if short:
        raise KeyUnavailable(
            f"CONNECTION_ENCRYPTION_KEY must be at least {MIN_SECRET_CHARS} characters"
        )
    return MultiFernet([Fernet(_fernet_key(s)) for s in secrets])


def key_encrypt(plaintext: str) -> str:
    token = _cipher().encrypt(plaintext.encode("utf-8")).decode("ascii")
    redaction.register_secret(plaintext)
    return token


def key_decrypt(token: str) -> str:
    """The key; registered with ``redaction`` so no log line or error text can carry it."""
    try:
        plaintext = _cipher().decrypt(token.encode("ascii")).decode("utf-8")
    except (InvalidToken, UnicodeError, ValueError):
        raise KeyUnavailable(
            "a stored connection key cannot be decrypted with CONNECTION_ENCRYPTION_KEY "
            "(was the setting changed? keep the old value after a comma to rotate)"
        ) from None
    redaction.register_secret(plaintext)
    return plaintext
