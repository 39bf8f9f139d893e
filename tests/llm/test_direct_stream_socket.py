"""The direct road's body read off the connection (``chat_platform.llm.sse_body``), against a
real socket: each HTTP framing h11 knows, split into network reads at awkward places, read as
httpx read it (the same answer, errors and timeouts by either way of reading), with httpcore's
per-chunk read gone and the connection back in the pool (docs/performance.md "A turn's CPU,
seventh pass")."""

import json
import socket
import threading
import time

import httpcore
import pytest

from chat_platform.llm import gateway, openai_compat, sse_body
from chat_platform.llm.gateway import ModelCallFailed, ModelConfig

MESSAGES = [{"role": "user", "content": "Say hello."}]
USAGE = {"prompt_tokens": 4, "completion_tokens": 3}


@pytest.fixture(autouse=True)
def _settings(settings, monkeypatch):
    settings.LLM_DIRECT_OPENAI_COMPATIBLE = True
    settings.LLM_MAX_RETRIES = 1
    settings.LLM_RETRY_BACKOFF_SECONDS = 0.01
    # a pool of this test's own: a connection kept by another test's server is not this one's
    monkeypatch.setattr(openai_compat, "_client", None)


def _event(content: str | None = None, finish: str | None = None, usage: dict | None = None):
    if usage is not None:
        return f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode()
    delta = {"content": content} if content is not None else {}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    # UTF-8 as it is, as some servers send it: U+2028 unescaped
    return f"data: {json.dumps({'choices': [choice]}, ensure_ascii=False)}\n\n".encode()


EVENTS = [
    b": keep-alive\r\n\r\n",
    _event("Hel"),
    _event("lo \u2028there"),  # U+2028 inside the JSON, unescaped, as some servers send it
    _event(", friend", "stop"),
    _event(usage=USAGE),
    b"data: [DONE]\n\n",
]
TEXT = "Hello \u2028there, friend"


def _framed(framing: str) -> tuple[bytes, list[bytes]]:
    """(the response head, the body's network pieces), cut inside a size line, inside an
    event, between a chunk's data and its CRLF."""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
    if framing == "chunked":
        body = b"".join(b"%x;note=1\r\n%s\r\n" % (len(e), e) for e in EVENTS)
        body += b"0\r\nx-trailer: yes\r\n\r\n"
        head += b"transfer-encoding: chunked\r\n\r\n"
    elif framing == "length":
        body = b"".join(EVENTS)
        head += b"content-length: %d\r\n\r\n" % len(body)
    else:  # until the server closes
        body = b"".join(EVENTS)
        head = head.replace(b"HTTP/1.1", b"HTTP/1.0") + b"\r\n"
    cuts = sorted({2, 7, len(body) // 2, body.index(b"lo ") + 1, len(body) - 4})
    edges = [0, *cuts, len(body)]
    return head, [body[a:b] for a, b in zip(edges, edges[1:], strict=False)]


class Server:
    """Answers each request on a connection with the next scripted (head, pieces, stall): the
    pieces a few ms apart (each its own network read), ``stall`` seconds before the second
    when it is set (and the connection closed after the pieces then, as after HTTP/1.0's);
    counts the connections."""

    def __init__(self) -> None:
        self.answers: list[tuple[bytes, list[bytes], float]] = []
        self.connections = 0
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}/v1"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as reader:
            while self.answers:
                length = 0
                while (line := reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                if not line:
                    return
                reader.read(length)
                head, pieces, stall = self.answers.pop(0)
                conn.sendall(head)
                for index, piece in enumerate(pieces):
                    time.sleep(stall if index == 1 and stall else 0.005)
                    conn.sendall(piece)
                if b"HTTP/1.0" in head or stall:
                    return

    def close(self) -> None:
        self._sock.close()


@pytest.fixture
def server():
    running = Server()
    yield running
    running.close()


@pytest.fixture(params=["lean", "httpx"])
def road(request, monkeypatch):
    """Each behaviour on both ways of reading the body: off the connection, and through
    httpx's iterators (``sse_body._lean`` declining)."""
    if request.param == "httpx":
        monkeypatch.setattr(sse_body, "_lean", lambda response: None)
    return request.param


def _config(server: Server, timeout: float = 10.0) -> ModelConfig:
    return ModelConfig(
        model="openai/fake-model", api_base=server.url, api_base_trusted=True, timeout=timeout
    )


@pytest.mark.parametrize("framing", ["chunked", "length", "close"])
def test_each_framing_is_read_whole_by_either_road(server, road, framing):
    head, pieces = _framed(framing)
    server.answers += [(head, pieces, 0.0)] * 2

    for _ in range(2):
        stream = gateway.stream(_config(server), MESSAGES)
        assert "".join(stream) == TEXT
        completion = stream.completion
        assert (completion.finish_reason, completion.prompt_tokens) == ("stop", 4)
        assert completion.completion_tokens == 3
    # kept alive and reused unless the server closes after each answer (HTTP/1.0)
    assert server.connections == (2 if framing == "close" else 1)


def test_the_body_is_not_read_through_httpcore_chunk_by_chunk(server, monkeypatch):
    """httpcore read one h11 event a network read (a chunk of the answer, ~200 µs of CPU each at
    a turn's pace); now only the answer's head is read through it, the body off the socket."""
    head, pieces = _framed("chunked")
    server.answers += [(head, pieces, 0.0)] * 2
    reads = []
    real = httpcore.HTTP11Connection._receive_event

    def counted(self, *args, **kwargs):
        event = real(self, *args, **kwargs)
        reads.append(type(event).__name__)
        return event

    monkeypatch.setattr(httpcore.HTTP11Connection, "_receive_event", counted)

    for _ in range(2):
        assert "".join(gateway.stream(_config(server), MESSAGES)) == TEXT

    # the head of each answer; was Response, then Data for each of the 6 pieces and EndOfMessage
    assert reads == ["Response", "Response"]
    assert server.connections == 1


def _cut_after_hel() -> tuple[bytes, list[bytes]]:
    """A chunked answer in two pieces: up to the middle of the second text event, the rest."""
    head, pieces = _framed("chunked")
    body = b"".join(pieces)
    cut = body.index(b"lo ")
    return head, [body[:cut], body[cut:]]


def test_a_body_cut_short_fails_as_it_did(server, road):
    head, pieces = _cut_after_hel()
    server.answers.append((head, pieces[:1], 0.01))  # closed after the first piece

    stream = gateway.stream(_config(server), MESSAGES)
    seen = []
    with pytest.raises(ModelCallFailed) as caught:
        for delta in stream:
            seen.append(delta)
    assert seen == ["Hel"]  # shown text is never retried
    assert str(caught.value) == (
        "openai/fake-model: could not reach the provider (peer closed connection without "
        "sending complete message body (incomplete chunked read))"
    )
    assert (caught.value.transient, caught.value.attempts) == (True, 1)


def test_a_stalled_body_times_out_as_it_did(server, road):
    head, pieces = _cut_after_hel()
    server.answers.append((head, pieces, 2.0))  # silent for 2 s before the second piece

    stream = gateway.stream(_config(server, timeout=0.5), MESSAGES)
    seen = []
    with pytest.raises(ModelCallFailed) as caught:
        for delta in stream:
            seen.append(delta)
    assert seen == ["Hel"]
    assert str(caught.value) == "openai/fake-model: timed out after 0.5 s"
    assert caught.value.transient is True


class _Pieces:
    """A network stream that returns its pieces one read at a time, then the end."""

    def __init__(self, pieces):
        self._pieces = list(pieces)

    def read(self, size, timeout=None):
        return self._pieces.pop(0) if self._pieces else b""


def test_a_long_body_is_not_held_whole_in_h11s_buffer():
    """A stream that never ends (keep-alive comments a provider sends for as long as it likes,
    which no output cap counts) is parsed by h11 as it goes past ``DRAIN_BYTES``, so its buffer
    stays bounded; the body's end is still h11's to confirm."""
    import h11

    state = h11.Connection(our_role=h11.CLIENT)
    state.send(h11.Request(method="POST", target="/", headers=[("host", "x")]))
    state.send(h11.EndOfMessage())
    state.receive_data(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    assert type(state.next_event()) is h11.Response
    comment = b": keep-alive" + b"." * 4000 + b"\n\n"
    chunk = b"%x\r\n%s\r\n" % (len(comment), comment)
    pieces = [chunk * 16] * 200 + [b"%x\r\n%s\r\n0\r\n\r\n" % (len(EVENTS[1]), EVENTS[1])]
    buffered = []
    body = b""
    for part in sse_body._read(_Pieces(pieces), state, sse_body._Chunked(), None):
        body += part
        buffered.append(len(state.trailing_data[0]))
    assert len(body) == 200 * 16 * len(comment) + len(EVENTS[1])  # ~12.8 MB, read whole
    assert max(buffered) <= sse_body.DRAIN_BYTES + len(chunk * 16)
    assert state.their_state is h11.DONE
