"""Reading an import file as a stream: ``ijson`` events, built into one top-level item at a time.

A file is never held whole: a JSON array at the top (ChatGPT's ``conversations.json``) yields
one conversation at a time; an object at the top (the lossless format) yields its scalar and
object values whole and its list values one item at a time, so a session of a million messages
is read message by message. Nesting deeper than ``max_depth`` is refused at the point it
happens (a hostile ``[[[[…`` never builds anything), and so is a file that is not JSON or ends
early, with the byte offset it got to.
"""

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, Any

import ijson

from chat_platform.errors import ValidationFailed

READ_CHUNK = 64 * 1024
_OPEN = ("start_map", "start_array")
_CLOSE = ("end_map", "end_array")


def refused(message: str, **details: Any) -> ValidationFailed:
    """The one error of a bad file: ``validation_error`` naming what was wrong, under ``file``."""
    return ValidationFailed(message, details={"file": [message], **details})


class CountingReader:
    """A binary file that counts what has been read of it (for the progress bar) and calls
    ``on_progress(bytes_read)`` at most every ``every`` bytes."""

    def __init__(
        self,
        raw: IO[bytes],
        *,
        on_progress: Callable[[int], None] | None = None,
        every: int = 1024 * 1024,
    ) -> None:
        self.raw = raw
        self.done = 0
        self._on_progress = on_progress
        self._every = every
        self._next = every

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.done += len(data)
        if self._on_progress is not None and self.done >= self._next:
            self._next = self.done + self._every
            self._on_progress(self.done)
        return data


@dataclass(frozen=True)
class Item:
    """One top-level piece: ``key`` (None in a top-level array), the value, and whether it is
    an element of a list (``index`` its position) or a key's whole value."""

    key: str | None
    value: Any
    index: int | None = None


def top_level_kind(reader: CountingReader) -> tuple[str, Iterator[tuple[str, str, Any]]]:
    """``("object" | "array", the events)``: what the file holds at the top."""
    events = ijson.parse(reader, buf_size=READ_CHUNK, use_float=True)
    first = _next_event(events, reader)
    if first is None:
        raise refused("The file is empty.")
    _, event, _ = first
    if event == "start_map":
        return "object", events
    if event == "start_array":
        return "array", events
    raise refused("The file holds a single JSON value, not a chat export (an object or a list).")


def _next_event(events: Iterator[tuple[str, str, Any]], reader: CountingReader) -> Any:
    try:
        return next(events, None)
    except ijson.JSONError as exc:
        raise _not_json(exc, reader) from None


def _not_json(exc: Exception, reader: CountingReader) -> ValidationFailed:
    if reader.done == 0:
        return refused("The file is empty.")
    if isinstance(exc, ijson.IncompleteJSONError) and "premature" in str(exc).lower():
        return refused(
            f"The file ends early, after {reader.done:,} bytes: it is truncated or not finished.",
            offset=reader.done,
        )
    return refused(
        f"The file is not valid JSON (stopped within the first {reader.done:,} bytes: "
        f"{str(exc).splitlines()[0].strip()}).",
        offset=reader.done,
    )


def items(
    kind: str,
    events: Iterator[tuple[str, str, Any]],
    reader: CountingReader,
    *,
    max_depth: int,
    keep: frozenset[str] | None = None,
) -> Iterator[Item]:
    """The file's top-level pieces in order (after ``top_level_kind``). ``keep``: of an item
    that is an object, only these keys are built; the others' values stream past unbuilt (their
    nesting is still checked)."""
    depth = 1  # inside the top-level object or array
    key: str | None = None
    in_list = False
    index = 0
    builder: ijson.ObjectBuilder | None = None
    build_depth = 0
    skipping = False
    while True:
        step = _next_event(events, reader)
        if step is None:
            return
        prefix, event, value = step
        if event in _OPEN:
            depth += 1
            if depth > max_depth:
                where = (prefix[:60] + "…") if len(prefix) > 60 else (prefix or "the top")
                raise refused(
                    f"The file nests deeper than {max_depth} levels (at {where}).",
                    max_depth=max_depth,
                )
        elif event in _CLOSE:
            depth -= 1
        if builder is not None:
            if skipping:  # inside a value of a key not kept: until it ends
                skipping = depth != build_depth + 1
                continue
            at_key = event == "map_key" and depth == build_depth + 1
            if keep is not None and at_key and value not in keep:
                skipping = True
                continue
            builder.event(event, value)
            if depth == build_depth:
                yield Item(key, builder.value, index if in_list else None)
                builder = None
                if in_list:
                    index += 1
            continue
        if depth == 0:  # the end of the top-level object or array: nothing may follow
            if _next_event(events, reader) is not None:
                raise refused("The file has more data after its end.")
            return
        list_level = 1 if kind == "array" else 2
        if kind == "object" and depth == 1 and event == "map_key":
            key, in_list, index = value, False, 0
            continue
        if kind == "object" and depth == 2 and event == "start_array" and not in_list:
            in_list = True
            continue
        if kind == "object" and depth == 1 and event == "end_array" and in_list:
            in_list = False
            continue
        if kind == "array":
            in_list = True
        at_item = in_list and depth == list_level + (1 if event in _OPEN else 0)
        at_value = not in_list and kind == "object" and depth == 1 + (1 if event in _OPEN else 0)
        if event in _OPEN and (at_item or at_value):
            builder = ijson.ObjectBuilder()
            builder.event(event, value)
            build_depth = depth - 1
            continue
        if event not in _OPEN and event not in _CLOSE:  # a scalar item or value
            yield Item(key, value, index if in_list else None)
            if in_list:
                index += 1
