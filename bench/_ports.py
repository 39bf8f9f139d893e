"""A port for a server a bench starts: any the system gives, or one of ``BENCH_PORTS``
("8800-8899") on a machine shared by several benches, each given a range of its own."""

from __future__ import annotations

import os
import random
import socket


def free_port() -> int:
    """A port no one listens on now. Within ``BENCH_PORTS`` the search starts at a random place
    in the range, so two stacks starting together seldom pick the same."""
    first, _, last = os.environ.get("BENCH_PORTS", "").partition("-")
    if not first:
        candidates = [0]
    else:
        ports = list(range(int(first), int(last or first) + 1))
        start = random.randrange(len(ports))  # noqa: S311
        candidates = ports[start:] + ports[:start]
    for port in candidates:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise SystemExit(f"no free port in BENCH_PORTS={os.environ['BENCH_PORTS']}")
