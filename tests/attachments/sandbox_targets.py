"""Functions the sandbox tests run in its child process (``chat_platform.sandbox``)."""

import os


def environment(data: bytes, params: dict[str, object]) -> list[str]:
    return sorted(os.environ)


def crash(data: bytes, params: dict[str, object]) -> None:
    raise RuntimeError("not a refusal")
