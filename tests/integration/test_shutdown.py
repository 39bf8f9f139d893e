"""The web server stops promptly on SIGTERM, whatever websockets it holds."""

import base64
import os
import shlex
import signal
import socket
import struct
import time

import pytest
import yaml
from django.conf import settings

from tests.integration.processes import (
    GRACEFUL_SHUTDOWN_SECONDS,
    ROOT,
    process_env,
    web_server_process,
)

pytestmark = [pytest.mark.crossprocess]


def _refused_handshake(base: str) -> socket.socket:
    """A websocket handshake without credentials that never answers the server's close."""
    host, port = base.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /ws/sessions/1/ HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    received = b""
    while b"\r\n\r\n" not in received or len(received.split(b"\r\n\r\n", 1)[1]) < 4:
        chunk = sock.recv(4096)
        assert chunk, received
        received += chunk
    head, frame = received.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 101 ")
    # An unmasked close frame carrying 4401 (not signed in).
    assert frame[:2] == b"\x88\x02"
    assert struct.unpack("!H", frame[2:4])[0] == 4401
    return sock


def test_sigterm_after_a_refused_websocket_exits_promptly(django_db_setup, tmp_path):
    db = settings.DATABASES["default"]
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = process_env(DATABASE_URL=url, DEBUG="false", LOG_JSON="true")
    log = tmp_path / "web.log"
    with web_server_process(env, log) as (base, process):
        # Real mode (Redis channel layer): the consumer holds a channel-layer receive.
        assert env["REDIS_URL"]
        sockets = [_refused_handshake(base) for _ in range(3)]
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        try:
            # Liveness bound, not a performance figure: without a graceful-shutdown bound the
            # server waited 20 s to minutes for the consumers' channel-layer receives.
            process.wait(timeout=GRACEFUL_SHUTDOWN_SECONDS + 5)
        except Exception:
            pytest.fail(f"uvicorn still running {time.monotonic() - started:.1f} s after SIGTERM")
        finally:
            for sock in sockets:
                sock.close()
    assert "Traceback" not in log.read_text()


def test_deploy_commands_bound_the_graceful_shutdown():
    expected = ["--timeout-graceful-shutdown", str(GRACEFUL_SHUTDOWN_SECONDS)]
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    web = compose["services"]["web"]["command"]
    assert web[:2] == ["uvicorn", "chat_platform.asgi:application"]
    assert web[web.index(expected[0]) : web.index(expected[0]) + 2] == expected
    makefile = (ROOT / "Makefile").read_text().splitlines()
    start = makefile.index(next(x for x in makefile if x.startswith("web:"))) + 1
    # the recipe's lines up to its blank line; the server is the one that runs uvicorn
    recipe = next(x for x in makefile[start:] if "uvicorn" in x)
    args = shlex.split(recipe)
    assert args[0].endswith("uvicorn")
    assert args[args.index(expected[0]) : args.index(expected[0]) + 2] == expected
