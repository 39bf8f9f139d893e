"""The settings of the test processes and of every process they start: the platform's own
(``chat_platform.settings``), with one change, the password hasher (docs/testing.md
"Passwords").

A sign-in checks its password by hashing it again, ~0.2 s of CPU at the project's million PBKDF2
rounds, and the suite signs in thousands of times: its test processes spent more CPU hashing
than on anything else they do. ``tests.hashers.QuickPBKDF2PasswordHasher`` is the same PBKDF2 at
a thousand rounds. A hash records its rounds, so a process on the project's settings (a test
that runs one on ``chat_platform.settings`` on purpose) still checks a password made here, and
this one checks theirs.

pytest-django exports ``DJANGO_SETTINGS_MODULE`` (``pyproject.toml``), so the servers, workers
and commands the tests start inherit this module unless a test names another."""

from chat_platform.settings import *  # noqa: F403

PASSWORD_HASHERS = ["tests.hashers.QuickPBKDF2PasswordHasher"]
