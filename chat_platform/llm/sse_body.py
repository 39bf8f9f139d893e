"""The bytes of a streamed answer on the direct road (``openai_compat.SSEStream``), and its lines.

A turn's reply arrives as some fifty small HTTP chunks, each read when it comes, ~10 ms apart.
Read through httpx (its line, text and byte iterators) over httpcore (its exception mapping and
tracing) over h11 (one parser event per chunk), each chunk cost ~200 µs of the worker's CPU, a
reply ~10 ms: the largest part of a plain turn's worker CPU after the embedding (docs/
performance.md "A turn's CPU, seventh pass"). So once httpx has sent the request, checked it
against the outbound policy and read the answer's status and headers, ``body_parts`` reads the
body off the connection's network stream itself and undoes its transfer framing here (chunked,
a Content-Length, or until the server closes: h11's three), one ``read`` per network read.

The connection stays httpcore's: the bytes read are handed to its h11 state as they come (a
buffer append), and when the body has ended h11 reads them all at once (its events for the
whole body, ~0.3 ms), so it ends in the state it would have reached itself and the connection
goes back to the pool (or is closed) exactly as before. h11 stays the judge of the framing: if
it does not find the body's end where this reader did, the call fails rather than reuse the
connection. Timeouts are the request's read timeout per read, and failures are httpx's
(``ReadTimeout``, ``ReadError``, ``RemoteProtocolError``), as the gateway classifies them.

Anything else (a compressed body, a status other than 200, a transport that is not httpcore's
HTTP/1.1 connection, such as the tests' mock transport) is read through ``iter_bytes`` as before.
The lines are split at CR, LF or CRLF only, as the SSE rules say (httpx's ``iter_lines`` also
split at U+2028, U+0085 and other Unicode line breaks, which a server may send unescaped
inside a JSON string).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import h11
import httpcore
import httpx

try:  # httpcore's stream over a socket (plain or TLS): read from its socket (_receiver)
    from httpcore._backends.sync import SyncStream as _PlainStream
except ImportError:  # another httpcore: its streams are read by their own read()
    _PlainStream = None  # type: ignore[assignment,misc]

# What one read asks of the network stream (httpcore's own size).
READ_BYTES = 64 * 1024
# Bytes handed to h11 past which it parses what it holds (and drops it), so a body that goes
# on and on (keep-alive comments no output cap counts) is never held whole; a reply's body is
# far less, and h11 reads it once at its end (``_settled``).
DRAIN_BYTES = 1024 * 1024
# A chunk's size line or a trailer line longer than this is not HTTP.
LINE_MAX_BYTES = 64 * 1024
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,20}")
_OWS = b" \t"


def _protocol_error(message: str) -> httpx.RemoteProtocolError:
    return httpx.RemoteProtocolError(message)


class _Chunked:
    """``Transfer-Encoding: chunked``: a size line (hex, extensions ignored), the data, CRLF;
    a zero size, trailer lines and a blank line end it."""

    def __init__(self) -> None:
        self.done = False
        self._held = b""  # bytes of a size, CRLF or trailer line not complete yet
        self._left = 0  # data bytes of the current chunk still to come
        self._crlf = False  # the CRLF after a chunk's data is next
        self._trailer = False  # after the zero-size chunk: trailer lines until a blank one

    def feed(self, data: bytes) -> list[bytes]:
        parts: list[bytes] = []
        if self._held:
            data = self._held + data
            self._held = b""
        at, end = 0, len(data)
        while at < end and not self.done:
            if self._left:
                take = min(self._left, end - at)
                parts.append(data[at : at + take])
                self._left -= take
                at += take
                if not self._left:
                    self._crlf = True
                continue
            if self._crlf:
                if end - at < 2:
                    break
                if data[at : at + 2] != b"\r\n":
                    raise _protocol_error("chunk data not followed by CRLF")
                self._crlf = False
                at += 2
                continue
            line_end = data.find(b"\r\n", at)
            if line_end < 0:
                break
            line = data[at:line_end]
            at = line_end + 2
            if self._trailer:
                if not line:
                    self.done = True
                continue
            size = line.split(b";", 1)[0].strip(_OWS)
            if not _CHUNK_SIZE.fullmatch(size):
                raise _protocol_error("illegal chunk header")
            self._left = int(size, 16)
            self._trailer = not self._left
        if not self.done and at < end:
            self._held = data[at:]
            if len(self._held) > LINE_MAX_BYTES and not self._left:
                raise _protocol_error("chunk header too long")
        return parts

    def eof(self) -> None:
        raise _protocol_error(
            "peer closed connection without sending complete message body (incomplete chunked read)"
        )


class _Length:
    """``Content-Length``: that many bytes."""

    def __init__(self, length: int) -> None:
        self._length = self._left = length
        self.done = not length

    def feed(self, data: bytes) -> list[bytes]:
        data = data[: self._left]
        self._left -= len(data)
        self.done = not self._left
        return [data] if data else []

    def eof(self) -> None:
        raise _protocol_error(
            "peer closed connection without sending complete message body "
            f"(received {self._length - self._left} bytes, expected {self._length})"
        )


class _UntilClose:
    """Neither: the body is everything until the server closes the connection."""

    done = False

    def feed(self, data: bytes) -> list[bytes]:
        return [data]

    def eof(self) -> None:
        self.done = True


def _framing(headers: httpx.Headers) -> _Chunked | _Length | _UntilClose | None:
    """h11's choice of framing for a response to a POST (h11 refused any other coding)."""
    if "transfer-encoding" in headers:
        return _Chunked()
    if "content-length" in headers:
        length = headers["content-length"]
        return _Length(int(length)) if length.isdigit() else None
    return _UntilClose()


def _lean(response: httpx.Response) -> tuple[Any, h11.Connection, Any] | None:
    """(the network stream, its h11 state, the framing) when this response's body can be read
    here: a 200 of httpcore's HTTP/1.1 connection whose body h11 has not started reading, not
    compressed. None: read it through httpx."""
    if response.status_code != 200:
        return None
    if response.headers.get("content-encoding", "identity").strip().lower() != "identity":
        return None
    try:
        # httpx's stream -> its transport's -> httpcore's pool's -> the HTTP/1.1 connection's
        stream: Any = response.stream
        connection = stream._stream._httpcore_stream._stream._connection
        state = connection._h11_state
        network = response.extensions["network_stream"]
    except (AttributeError, KeyError, TypeError):
        return None
    if not isinstance(state, h11.Connection) or state.their_state is not h11.SEND_BODY:
        return None
    framing = _framing(response.headers)
    return None if framing is None else (network, state, framing)


def body_parts(response: httpx.Response) -> Iterator[bytes]:
    """The response's body, in the pieces it arrives in (module doc)."""
    lean = _lean(response)
    if lean is None:
        return response.iter_bytes()
    network, state, framing = lean
    timeout = (response.request.extensions.get("timeout") or {}).get("read")
    return _read(network, state, framing, timeout)


def _read(
    network: Any, state: h11.Connection, framing: Any, timeout: float | None
) -> Iterator[bytes]:
    data, _ = state.trailing_data  # what arrived with the headers, still in h11's buffer
    receive = _receiver(network, timeout)
    unread, ended = len(data), False  # bytes h11 holds unparsed; h11 has seen the end
    while True:
        if data:
            yield from framing.feed(data)
        if unread > DRAIN_BYTES:
            # h11 and the framing have seen the same bytes: they end together or not at all.
            ended, unread = _drained(state), 0
            if ended is not framing.done:
                raise _protocol_error("the response body's end is unclear")
        if framing.done:
            break
        data = receive()
        state.receive_data(data)
        unread += len(data)
        if not data:
            framing.eof()
            break
    if not ended:
        _settled(state)


def _drained(state: h11.Connection) -> bool:
    """h11 parses the body it holds (``DRAIN_BYTES``); whether it found the body's end."""
    try:
        while True:
            event = state.next_event()
            if event is h11.NEED_DATA:
                return False
            if type(event) is h11.EndOfMessage:
                return True
            if type(event) is not h11.Data:
                break
    except h11.RemoteProtocolError as exc:
        raise _protocol_error(str(exc)) from exc
    raise _protocol_error("the response body's end is unclear")


def _receiver(network: Any, timeout: float | None) -> Callable[[], bytes]:
    """One read of the network stream, failing as httpx fails. httpcore's plain stream (a
    socket, TLS or not) is read from its socket, as its own ``read`` does, without its exception
    mapper around each read (a context manager a chunk); any other stream by its ``read``."""
    if _PlainStream is not None and type(network) is _PlainStream:
        sock = network.get_extra_info("socket")

        def receive() -> bytes:
            try:
                sock.settimeout(timeout)
                return sock.recv(READ_BYTES)
            except TimeoutError as exc:  # socket.timeout
                raise httpx.ReadTimeout(str(exc) or "timed out") from exc
            except OSError as exc:
                raise httpx.ReadError(str(exc)) from exc

        return receive

    def read() -> bytes:
        try:
            return network.read(READ_BYTES, timeout)
        except httpcore.TimeoutException as exc:
            raise httpx.ReadTimeout(str(exc)) from exc
        except httpcore.NetworkError as exc:
            raise httpx.ReadError(str(exc)) from exc

    return read


def _settled(state: h11.Connection) -> None:
    """h11 reads the body it was handed and must find its end where this reader did; then the
    connection is reused (or closed) as httpcore decides when the response is closed."""
    try:
        while True:
            event = state.next_event()
            if type(event) is h11.EndOfMessage:
                return
            if event is h11.NEED_DATA or type(event) is not h11.Data:
                break
    except h11.RemoteProtocolError as exc:
        raise _protocol_error(str(exc)) from exc
    raise _protocol_error("the response body's end is unclear")


def lines(parts: Iterator[bytes], encoding: str) -> Iterator[str]:
    """The body's lines, split at CRLF, LF or CR and decoded, as httpx's line decoder splits
    them (a CR ending a piece waits for the next: it may be a CRLF's first half), but at those
    three only; the last line too, ended or not."""
    held = b""  # the start of a line not ended yet
    cr = False  # the last piece ended with CR
    for part in parts:
        if cr:
            part = b"\r" + part
            cr = False
        if part.endswith(b"\r"):
            cr = True
            part = part[:-1]
        if not part:
            continue
        ended = part[-1] in b"\r\n"
        split = part.splitlines()
        if len(split) == 1 and not ended:
            held += split[0]
            continue
        if held:
            split[0] = held + split[0]
            held = b""
        if not ended:
            held = split.pop()
        for line in split:
            yield line.decode(encoding, "replace")
    if held or cr:
        yield held.decode(encoding, "replace")
