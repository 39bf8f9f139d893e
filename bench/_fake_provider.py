"""The benchmarks' provider, in a process of its own: tests.fakeopenai streaming ``_stack.TEXT``
one word per chunk, ``_stack.CHUNK_DELAY`` s apart (usage chunk included when asked)."""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stack import CHUNK_DELAY, TEXT  # noqa: E402

from tests.fakeopenai import FakeOpenAI, Reply  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    words = TEXT.split(" ")
    chunks = [w + " " for w in words[:-1]] + [words[-1]]
    server = FakeOpenAI(
        host=args.host,
        port=args.port,
        default=Reply(text=TEXT, chunks=chunks, delay_between_chunks=CHUNK_DELAY),
    )
    # socketserver listens with a backlog of 5: a burst of 200 connects would be refused and
    # retried by the clients, which is not what a provider does.
    server._httpd.socket.listen(1024)
    try:
        server._httpd.serve_forever(poll_interval=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
        server._httpd.server_close()


if __name__ == "__main__":
    main()
