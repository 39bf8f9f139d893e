"""The tests' quick password hasher (docs/testing.md "Passwords") makes hashes the platform's
own hasher checks, and checks the platform's."""

import importlib

from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher, check_password, make_password


def test_the_tests_hash_quickly_in_the_platforms_format():
    assert settings.PASSWORD_HASHERS == ["tests.hashers.QuickPBKDF2PasswordHasher"]
    algorithm, rounds, _salt, _digest = make_password("pw-123456").split("$")
    assert (algorithm, rounds) == ("pbkdf2_sha256", "1000")


def test_the_platforms_hasher_and_the_quick_one_check_each_others_hashes():
    platform = importlib.import_module("chat_platform.settings")
    assert not hasattr(platform, "PASSWORD_HASHERS")  # Django's default: PBKDF2 first
    platforms = PBKDF2PasswordHasher()
    assert platforms.iterations >= 1_000_000
    quick_hash = make_password("pw-123456")
    assert platforms.verify("pw-123456", quick_hash)
    assert not platforms.verify("wrong", quick_hash)
    # a hash of the platform's records its rounds, which the quick hasher reads back (a few
    # here: a million would take the 0.2 s this hasher saves)
    platform_hash = platforms.encode("pw-123456", platforms.salt(), iterations=3)
    assert check_password("pw-123456", platform_hash)
    assert not check_password("wrong", platform_hash)
