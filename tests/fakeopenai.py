"""A local, scriptable OpenAI-compatible HTTP server for tests (and for other processes).

Model calls in tests travel the real road — gateway -> litellm -> openai SDK -> HTTP — and end
here instead of on the internet. Use ``api_base=fake_openai.url`` with
``model="openai/fake-model"``.

    def test_reply(fake_openai):
        fake_openai.script(Reply(text="Hi!", chunks=["H", "i!"]), Reply(status=500))
        ...
        assert fake_openai.requests[0]["messages"][-1]["content"] == "hello"

Standalone (cross-process tests)::

    python -m tests.fakeopenai --port 8765 --text "Hello from fake."

prints ``FAKEOPENAI_URL=http://127.0.0.1:8765/v1`` on stdout once it is listening.
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import json
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

MODEL_ID = "fake-model"


@dataclass
class Reply:
    text: str = "Hello from fake."
    # How to split ``text`` into stream deltas; default: ~4-character chunks.
    chunks: list[str] | None = None
    finish_reason: str = "stop"
    # A non-200 status answers with an OpenAI-style error body carrying ``error_message``.
    status: int = 200
    error_message: str = "fake server error"
    # Seconds to wait before answering anything (a hung server).
    hang: float = 0.0
    # With ``hang``: answer as soon as this is set (a test lets the hung server go on cue).
    until: threading.Event | None = None
    delay_between_chunks: float = 0.0
    # After this many text deltas, wait ``stall`` seconds before sending the rest (a stream
    # that stops mid-way).
    stall_after: int | None = None
    stall: float = 0.0
    # OpenAI shape: [{"id", "type": "function", "function": {"name", "arguments"}}]
    tool_calls: list[dict] | None = None
    # Default: computed from lengths (prompt = characters of all message contents // 4).
    usage: dict | None = None
    # Answer ``redirect_status`` with this Location instead (a base that points elsewhere).
    redirect_to: str | None = None
    redirect_status: int = 307
    # Put the request's Authorization header into the answer: appended to ``error_message``
    # (status != 200) or to ``text`` (a provider that echoes what it was sent).
    echo_authorization: bool = False
    # Extra headers of an error answer (e.g. a 429's ``Retry-After``).
    error_headers: dict[str, str] | None = None
    # A provider that bends the format: these deltas as sent (streamed) instead of ``text`` and
    # ``tool_calls``; unstreamed, ``content`` is the first delta's (a list of parts, a number…)
    # and ``tool_calls`` as given.
    raw_deltas: list[dict] | None = None

    def deltas(self) -> list[str]:
        if self.chunks is not None:
            return list(self.chunks)
        return [self.text[i : i + 4] for i in range(0, len(self.text), 4)]


@dataclass
class Served:
    """What happened to one request (``FakeOpenAI.served``, in arrival order)."""

    path: str
    body: dict
    headers: dict[str, str]
    reply: Reply
    # True once the whole answer was written; False while serving or if the client went away.
    completed: bool = False
    # True when the client closed the connection before the answer was fully written.
    aborted: bool = False
    # The provider's own time for this request: from having read it to its last byte written
    # (bench/turn_overhead.py subtracts it from a turn's time). None while serving.
    started: float = field(default_factory=time.perf_counter)
    seconds: float | None = None
    # The address the request came from (bench/multihost.py tells its worker hosts apart by it).
    client: str = ""


@dataclass
class EmbeddingReply:
    """How ``/v1/embeddings`` answers one request (``FakeOpenAI.script_embeddings``); by
    default the deterministic vectors of ``fake_embedding``."""

    status: int = 200
    error_message: str = "fake embedding error"
    hang: float = 0.0
    # "nan": a vector holding NaN; "short": one vector fewer than inputs; "text": strings.
    garbage: str = ""


# Bag-of-concepts embeddings: a word of a concept adds 1 to that concept's dimension, any other
# word (not a stop word) 0.25 to one of HASHED_DIMENSIONS buckets (crc32). Synonyms of a concept
# land on the same dimension, so "injury" is near "ankle" although they share no letter: what a
# real embedding model does, made exact for tests.
CONCEPTS: dict[str, tuple[str, ...]] = {
    "injury": ("injury", "injured", "hurt", "ankle", "sprain", "sprained", "limping", "wrist"),
    "boat": ("boat", "sailing", "sail", "kayak", "canoe", "paddle", "paddled", "rowing"),
    "pet": ("pet", "pets", "dog", "puppy", "cat", "kitten", "adopted", "terrier"),
    "music": ("music", "instrument", "cello", "violin", "piano", "guitar", "band"),
    "food": ("food", "dinner", "cooked", "curry", "recipe", "baked", "restaurant"),
    "travel": ("trip", "travel", "flight", "flew", "holiday", "vacation", "abroad"),
}
HASHED_DIMENSIONS = 64
_FAKE_STOPWORDS = frozenset(
    """
    a an and are at be did do does for from got had has have he her his how i in is it my of
    on or our pick picked she so that the their they this to up was we were what when where
    which who why with you your
    """.split()  # noqa: SIM905 - a word list reads better as prose
)


def fake_embedding(text: str) -> list[float]:
    import re
    import zlib

    concept_of = {w: i for i, words in enumerate(CONCEPTS.values()) for w in words}
    vector = [0.0] * (len(CONCEPTS) + HASHED_DIMENSIONS)
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word in _FAKE_STOPWORDS:
            continue
        if word in concept_of:
            vector[concept_of[word]] += 1.0
        else:
            vector[len(CONCEPTS) + zlib.crc32(word.encode()) % HASHED_DIMENSIONS] += 0.25
    return vector


def _usage(body: dict, reply: Reply) -> dict:
    if reply.usage is not None:
        return dict(reply.usage)
    prompt_chars = 0
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            prompt_chars += len(content)
        elif isinstance(content, list):
            prompt_chars += sum(len(p.get("text") or "") for p in content if isinstance(p, dict))
    completion_chars = len(reply.text) + len(json.dumps(reply.tool_calls or []))
    prompt, completion = max(1, prompt_chars // 4), max(1, completion_chars // 4)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class FakeOpenAI:
    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        default: Reply | None = None,
        responder: Callable[[dict], Reply] | None = None,
        embedder: Callable[[list[str]], list[list[float]]] | None = None,
    ):
        self.default = default or Reply()
        # What /v1/embeddings answers with (a real model, for benchmarks); else fake_embedding.
        self.embedder = embedder
        # When the script is empty: answer from the request body (benchmarks), else ``default``.
        self.responder = responder
        self._lock = threading.Lock()
        self._queue: collections.deque[Reply] = collections.deque()
        self.served: list[Served] = []
        self._embedding_queue: collections.deque[EmbeddingReply] = collections.deque()
        # Every /v1/embeddings JSON body, in arrival order (not in ``served``/``requests``).
        self.embedding_requests: list[dict] = []
        self.embedding_headers: list[dict[str, str]] = []  # theirs, names lower-cased
        # When the embeddings script is empty: this answers (default: the fake vectors).
        self.embedding_default = EmbeddingReply()
        self.in_flight = 0
        self.max_concurrent = 0
        # Set when the server stops, so hung handlers give up instead of lingering.
        self.stopping = threading.Event()
        # Set whenever a client goes away mid-answer (see Served.aborted).
        self.client_went_away = threading.Event()
        self._httpd = ThreadingHTTPServer((host, port), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.fake = self  # type: ignore[attr-defined]
        self._thread: threading.Thread | None = None
        self._ids = 0

    # -- scripting ---------------------------------------------------------------------------
    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def script(self, *replies: Reply | str) -> None:
        """Queue replies, consumed one per chat request; when empty, ``default`` answers."""
        with self._lock:
            self._queue.extend(Reply(text=r) if isinstance(r, str) else r for r in replies)

    def script_embeddings(self, *replies: EmbeddingReply) -> None:
        """Queue embedding answers, one per /v1/embeddings request; then ``embedding_default``."""
        with self._lock:
            self._embedding_queue.extend(replies)

    def _embedding_reply(self, body: dict, headers: dict[str, str]) -> EmbeddingReply:
        with self._lock:
            self.embedding_requests.append(body)
            self.embedding_headers.append(headers)
            if self._embedding_queue:
                return self._embedding_queue.popleft()
            return copy.deepcopy(self.embedding_default)

    @property
    def requests(self) -> list[dict]:
        """Every received chat-completions JSON body, in arrival order."""
        with self._lock:
            return [s.body for s in self.served]

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers of every received chat request (names lower-cased), in arrival order."""
        with self._lock:
            return [s.headers for s in self.served]

    @property
    def aborted(self) -> int:
        with self._lock:
            return sum(1 for s in self.served if s.aborted)

    def wait_idle(self, timeout: float = 5.0) -> bool:
        """Wait until no request is being served (handlers finish just after clients do)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self.in_flight == 0:
                    return True
            time.sleep(0.01)
        return False

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> FakeOpenAI:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- used by the handler -----------------------------------------------------------------
    def _begin(self, path: str, body: dict, headers: dict[str, str]) -> Served:
        with self._lock:
            if self._queue:
                reply = self._queue.popleft()
            elif self.responder is not None:
                reply = self.responder(body)
            else:
                reply = copy.deepcopy(self.default)
            served = Served(path=path, body=body, headers=headers, reply=reply)
            self.served.append(served)
            self.in_flight += 1
            self.max_concurrent = max(self.max_concurrent, self.in_flight)
            self._ids += 1
            return served

    def _end(self, served: Served, *, completed: bool) -> None:
        with self._lock:
            self.in_flight -= 1
            served.seconds = time.perf_counter() - served.started
            served.completed = completed
            served.aborted = not completed
        if not completed:
            self.client_went_away.set()

    def _next_id(self) -> str:
        with self._lock:
            return f"chatcmpl-fake-{self._ids}"


class _Handler(BaseHTTPRequestHandler):
    server_version = "FakeOpenAI/1.0"

    @property
    def fake(self) -> FakeOpenAI:
        return self.server.fake  # type: ignore[attr-defined]

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - stdlib signature
        pass  # keep test output clean

    # -- routes ------------------------------------------------------------------------------
    def do_GET(self) -> None:
        path, _, query = self.path.partition("?")
        if path.rstrip("/").endswith("/served"):
            # For the benchmarks: the chat requests from ``since`` on, with the provider's time
            # for each and the content of its last message.
            since = int(query.partition("since=")[2] or 0)
            with self.fake._lock:
                rows = [
                    {
                        "seconds": s.seconds,
                        "completed": s.completed,
                        "last": (s.body.get("messages") or [{}])[-1].get("content"),
                        "client": s.client,
                    }
                    for s in self.fake.served[since:]
                ]
            self._json(200, {"served": rows, "count": since + len(rows)})
        elif self.path.rstrip("/").endswith("/models"):
            self._json(
                200,
                {
                    "object": "list",
                    "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "fake"}],
                },
            )
        else:
            self._json(404, _error_body(404, f"no route GET {self.path}"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/").endswith("/embeddings"):
            self._embeddings(raw)
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._json(404, _error_body(404, f"no route POST {self.path}"))
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, _error_body(400, "request body is not JSON"))
            return
        headers = {k.lower(): v for k, v in self.headers.items()}
        served = self.fake._begin(self.path, body, headers)
        served.client = self.client_address[0]
        completed = False
        try:
            completed = self._answer(body, served.reply)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            completed = False
        finally:
            self.fake._end(served, completed=completed)

    def _embeddings(self, raw: bytes) -> None:
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self._json(400, _error_body(400, "request body is not JSON"))
            return
        reply = self.fake._embedding_reply(body, {k.lower(): v for k, v in self.headers.items()})
        if reply.hang and self._pause(reply.hang):
            return
        if reply.status != 200:
            self._json(reply.status, _error_body(reply.status, reply.error_message))
            return
        inputs = body.get("input")
        inputs = [inputs] if isinstance(inputs, str) else list(inputs or [])
        texts = [str(text) for text in inputs]
        if self.fake.embedder is not None:
            vectors: list = [list(map(float, v)) for v in self.fake.embedder(texts)]
        else:
            vectors = [fake_embedding(text) for text in texts]
        if reply.garbage == "nan":
            vectors = [[float("nan")] * len(v) for v in vectors]
        elif reply.garbage == "short":
            vectors = vectors[:-1]
        elif reply.garbage == "text":
            vectors = [["not", "a", "number"] for _ in vectors]
        base64_wanted = body.get("encoding_format") == "base64" and not reply.garbage

        def encoded(vector: list) -> object:
            if not base64_wanted:
                return vector
            import base64
            import struct

            return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()

        data = [
            {"object": "embedding", "index": i, "embedding": encoded(v)}
            for i, v in enumerate(vectors)
        ]
        tokens = sum(len(str(t).split()) for t in inputs) or 1
        payload = {
            "object": "list",
            "data": data,
            "model": body.get("model") or MODEL_ID,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        # json.dumps writes NaN as a bare NaN token (not JSON), as a broken server might.
        self._json(200, payload)

    # -- answers -----------------------------------------------------------------------------
    def _answer(self, body: dict, reply: Reply) -> bool:
        if reply.hang and self._pause(reply.hang, until=reply.until):
            return False
        if reply.redirect_to is not None:
            self.send_response(reply.redirect_status)
            self.send_header("Location", reply.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True
        if reply.echo_authorization:
            echoed = f" [you sent: {self.headers.get('Authorization', '')}]"
            if reply.status != 200:
                reply = dataclasses.replace(reply, error_message=reply.error_message + echoed)
            else:
                reply = dataclasses.replace(reply, text=reply.text + echoed, chunks=None)
        if reply.status != 200:
            self._json(
                reply.status, _error_body(reply.status, reply.error_message), reply.error_headers
            )
            return True
        if body.get("stream"):
            return self._stream(body, reply)
        message: dict = {"role": "assistant", "content": reply.text or None}
        if reply.raw_deltas:
            message["content"] = reply.raw_deltas[0].get("content")
        if reply.tool_calls:
            message["tool_calls"] = reply.tool_calls
        self._json(
            200,
            {
                "id": self.fake._next_id(),
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model") or MODEL_ID,
                "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
                "usage": _usage(body, reply),
            },
        )
        return True

    def _stream(self, body: dict, reply: Reply) -> bool:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        base = {
            "id": self.fake._next_id(),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body.get("model") or MODEL_ID,
        }

        def chunk(delta: dict, finish_reason: str | None = None) -> dict:
            choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
            return {**base, "choices": [choice]}

        events: list[dict] = [chunk({"role": "assistant", "content": ""})]
        if reply.raw_deltas is not None:
            events += [chunk(delta) for delta in reply.raw_deltas]
            reply = dataclasses.replace(reply, text="", chunks=[], tool_calls=None)
        events += [chunk({"content": piece}) for piece in reply.deltas()]
        # Index of the event before which the stall happens (role chunk + stall_after deltas).
        stall_at = 1 + reply.stall_after if reply.stall_after is not None else None
        for index, call in enumerate(reply.tool_calls or []):
            function = call.get("function") or {}
            head = {
                "index": index,
                "id": call.get("id"),
                "type": "function",
                "function": {"name": function.get("name"), "arguments": ""},
            }
            events.append(chunk({"tool_calls": [head]}))
            arguments = function.get("arguments") or ""
            for i in range(0, len(arguments), 8):
                piece = {"index": index, "function": {"arguments": arguments[i : i + 8]}}
                events.append(chunk({"tool_calls": [piece]}))
        events.append(chunk({}, reply.finish_reason))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append({**base, "choices": [], "usage": _usage(body, reply)})

        for position, event in enumerate(_with_done(events)):
            if position and reply.delay_between_chunks and self._pause(reply.delay_between_chunks):
                return False
            if position == stall_at and self._pause(reply.stall):
                return False
            self.wfile.write(event)
            self.wfile.flush()
        return True

    def _pause(self, seconds: float, *, until: threading.Event | None = None) -> bool:
        """Wait ``seconds`` (or until ``until`` is set); True (give up) if the server stops or
        the client goes away."""
        end = time.monotonic() + seconds
        while (remaining := end - time.monotonic()) > 0 and not (until and until.is_set()):
            if self.fake.stopping.wait(min(0.05, remaining)) or self._client_gone():
                return True
        return False

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def _json(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


def _with_done(events: list[dict]) -> Iterator[bytes]:
    for event in events:
        yield f"data: {json.dumps(event)}\n\n".encode()
    yield b"data: [DONE]\n\n"


def _error_body(status: int, message: str) -> dict:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": str(status)}}


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started FakeOpenAI for one test (``.url`` is the api_base)."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a fixed OpenAI-compatible reply.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--text", default=Reply().text)
    parser.add_argument("--delay-between-chunks", type=float, default=0.0)
    args = parser.parse_args(argv)
    default = Reply(text=args.text, delay_between_chunks=args.delay_between_chunks)
    server = FakeOpenAI(host=args.host, port=args.port, default=default)
    print(f"FAKEOPENAI_URL={server.url}", flush=True)
    try:
        server._httpd.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    finally:
        server.stopping.set()
        server._httpd.server_close()


if __name__ == "__main__":
    main()


__all__ = ["EmbeddingReply", "FakeOpenAI", "Reply", "Served", "fake_embedding", "fake_openai"]
