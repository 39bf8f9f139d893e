"""One redaction of every configured secret, for error texts, stored replies and log lines.

A provider that echoes the request's headers puts the key it was sent into its error message,
or into its reply. Redacting only the key of the current call misses the others (and a key
named through an environment variable the call did not use), so every text that leaves the
server or is stored passes ``redact``: the values of every environment variable whose name says
it is a secret (``*_KEY``, ``*_SECRET``, ``*_TOKEN``, ``*_PASSWORD``), of every allowed provider
key variable and of ``SECRET_KEY``, and the passwords inside ``*_URL`` variables, each replaced by
``***``. Values shorter than ``MIN_SECRET_LENGTH`` are left alone (they would mask ordinary words).

The environment is read at every call (tests and operators change it at run time), but the
secrets are worked out again only when something changed: a snapshot of the raw environment,
the settings' secret and listed names and the registered set (which and how many) are compared
with the last call's (~5 µs), against ~160 µs to work them out (several times a turn: every log
line passes here).
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any
from urllib.parse import urlsplit

MASK = "***"
MIN_SECRET_LENGTH = 8
_SECRET_NAME = re.compile(r"(?:KEY|SECRET|TOKEN|PASSWORD|PASSWD|CREDENTIALS?)$", re.IGNORECASE)


def _listed_names() -> set[str]:
    try:
        from django.conf import settings

        if not settings.configured:
            return set()
        return set(getattr(settings, "PROVIDER_KEY_ENV_ALLOWED", ()) or ())
    except Exception:  # settings unreadable (a bare script): the name rule still applies
        return set()


def _settings_secret() -> str:
    try:
        from django.conf import settings

        return str(getattr(settings, "SECRET_KEY", "") or "") if settings.configured else ""
    except Exception:
        return ""


# Secrets that live outside the environment (a provider connection's key, decrypted from the
# database): registered by whoever holds them (``register_secret``), masked like the others.
_registered: set[str] = set()
_registered_lock = threading.Lock()


def register_secret(value: str) -> None:
    """Mask ``value`` in every text that passes ``redact`` from now on, in this process."""
    if value and len(value) >= MIN_SECRET_LENGTH and value not in _registered:
        with _registered_lock:
            _registered.add(value)


_last: tuple[Any, tuple[str, ...]] | None = None


def secret_values() -> tuple[str, ...]:
    """Every configured secret, longest first (a secret containing another is masked whole)."""
    global _last
    listed = _listed_names()
    settings_secret = _settings_secret()
    raw = getattr(os.environ, "_data", None)  # the bytes os.environ wraps (POSIX)
    snapshot = tuple(raw.items()) if isinstance(raw, dict) else tuple(os.environ.items())
    key = (snapshot, frozenset(listed), settings_secret, id(_registered), len(_registered))
    last = _last
    if last is not None and last[0] == key:
        return last[1]
    values = _secret_values(listed, settings_secret)
    _last = (key, values)
    return values


def _secret_values(listed: set[str], settings_secret: str) -> tuple[str, ...]:
    values: set[str] = set(_registered)
    for name, value in os.environ.items():
        if name in listed or _SECRET_NAME.search(name):
            values.add(value)
        elif name.endswith("_URL") and "@" in value:
            try:
                password = urlsplit(value).password
            except ValueError:
                password = None
            if password:
                values.add(password)
    values.add(settings_secret)
    return tuple(sorted((v for v in values if len(v) >= MIN_SECRET_LENGTH), key=len, reverse=True))


def redact(text: str, secrets: tuple[str, ...] | None = None) -> str:
    for secret in secret_values() if secrets is None else secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


class StreamRedactor:
    """``redact`` over a stream of deltas: a secret split across deltas is masked too.

    ``feed`` returns what may be shown now; it holds back only a tail that could be the start of
    a secret (usually nothing, so deltas are not delayed), which ``flush`` releases at the end.
    """

    def __init__(self, secrets: tuple[str, ...] | None = None) -> None:
        self.secrets = secret_values() if secrets is None else secrets
        self._held = ""
        # For each secret, the lengths k of its prefixes, by the prefix's last character: a held
        # tail must end with the character the text ends with.
        self._prefix_ends: list[tuple[str, dict[str, list[int]]]] = []
        for secret in self.secrets:
            ends: dict[str, list[int]] = {}
            for k in range(len(secret) - 1, 0, -1):
                ends.setdefault(secret[k - 1], []).append(k)
            self._prefix_ends.append((secret, ends))

    def feed(self, delta: str) -> str:
        if not self.secrets:
            return delta
        text = redact(self._held + delta, self.secrets)
        hold = 0
        if text:
            last = text[-1]
            for secret, ends in self._prefix_ends:
                for k in ends.get(last, ()):
                    if k <= hold:
                        break
                    if k <= len(text) and text.endswith(secret[:k]):
                        hold = k
                        break
        self._held = text[len(text) - hold :] if hold else ""
        return text[: len(text) - hold] if hold else text

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held
