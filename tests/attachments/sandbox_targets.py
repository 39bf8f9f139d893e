"""Functions the sandbox tests run in its child process (``chat_platform.sandbox``)."""

import os


def environment(data: bytes, params: dict[str, object]) -> list[str]:
    return sorted(os.environ)


def crash(data: bytes, params: dict[str, object]) -> None:
    raise RuntimeError("not a refusal")


def progress_then_wait(data: bytes, params: dict[str, object]) -> str:
    """Print a progress line, then wait for the file the parent's ``on_line`` creates: only a
    parent that relays progress while the child runs lets this finish."""
    import json
    import sys
    import time

    sys.stdout.write(json.dumps({"progress": "reading", "bytes_read": 1}) + "\n")
    sys.stdout.flush()
    path = str(params["path"])
    while not os.path.exists(path):
        time.sleep(0.01)
    return "seen"


def grow_then_stall(data: bytes, params: dict[str, object]) -> str:
    """Take memory 16 MB at a time until none is left, then stall without answering, as a child
    that met its address-space cap was seen to (spinning in ``malloc`` until its CPU limit)."""
    import time

    held = []
    try:
        while True:
            held.append(bytearray(16 * 1024 * 1024))
    except MemoryError:
        pass
    while True:
        time.sleep(1)
