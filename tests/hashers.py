"""The tests' password hasher (``tests/settings.py``): the project's own PBKDF2, same algorithm
name and hash format, at a thousand rounds instead of the project's million (docs/testing.md
"Passwords")."""

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000
