"""Run one piece of heavy, hostile-input work (a PDF's text layer, an import file's parse) in a
child process with hard limits, so a "bomb" can only ever kill that child (docs/security.md,
"Heavy work").

The child is a fresh interpreter (``python chat_platform/sandbox.py <module:function>``: run by
path, so it imports neither Django nor Celery), never a fork of the caller: a fork of a worker
process running ``-P threads`` would copy locks other threads hold. Before the work starts the
child caps its own CPU time (``RLIMIT_CPU``) and address space; the parent kills it when the
wall-clock time runs out, or when its address space passes the memory limit (read from
``/proc`` a few times a second). The child's own cap (``RLIMIT_AS``) is a backstop half again
as large: a process that meets ``RLIMIT_AS`` itself may spin in ``malloc`` for as long as its CPU
limit allows (seen in one import of four run side by side), so the parent's kill is what stops
it, at once, and the backstop only bounds what it can take before then. The function receives
the input bytes and a JSON ``params`` object and returns a JSON-able value; it may raise
``Refused`` (a plain refusal the user reads). What comes back is JSON, never pickle: the child
handled hostile input.

The child's environment holds none of the server's secrets; a target that must write to the
database (an import, ``transfer/child.py``) receives its connection in ``params``, on stdin.
Progress lines (JSON objects with ``progress``) reach ``on_line`` while the child runs.
``run_limited`` raises ``LimitExceeded`` (``limit``: ``time`` | ``memory`` | ``cpu``) when a
limit stopped the child, ``Refused`` with the child's words when the work refused the input,
and ``SandboxFailed`` when the child died in another way.
"""

import contextlib
import json
import os
import queue
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
# The length of the JSON params that precede the input bytes on the child's stdin.
_HEADER = struct.Struct(">Q")
# All of the parent's environment the child gets: nothing secret.
_PASSED_ENV = frozenset({"PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR"})
# How often the parent reads the child's address space (seconds).
MEMORY_POLL_SECONDS = 0.05


class Refused(ValueError):
    """The work refused its input; ``str(exc)`` says why, for the user. In the child, any
    exception class with ``sandbox_refusal = True`` is such a refusal."""

    sandbox_refusal = True


class SandboxFailed(RuntimeError):
    """The child ended without an answer (a crash, a signal no limit explains)."""


class LimitExceeded(RuntimeError):
    def __init__(self, limit: str, message: str) -> None:
        super().__init__(message)
        self.limit = limit


@dataclass(frozen=True)
class Limits:
    seconds: float  # wall clock (the parent kills the child); CPU is capped at the same
    memory_bytes: int  # the child's whole address space (RLIMIT_AS)


def run_limited(
    *,
    target: str,
    data: bytes,
    params: dict[str, Any],
    limits: Limits,
    on_line: Callable[[dict[str, Any]], None] | None = None,
) -> Any:
    """``target`` (``"package.module:function"``) over ``data`` in a limited child process."""
    blob = json.dumps(params).encode()
    child = subprocess.Popen(  # noqa: S603 - our own interpreter and script, no shell
        [sys.executable, str(Path(__file__).resolve()), target],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=_ROOT,
        # Only what an interpreter needs: the child reads hostile input, so none of the
        # server's secrets (SECRET_KEY, provider keys, database URL) are in its environment.
        env={
            **{k: v for k, v in os.environ.items() if k in _PASSED_ENV},
            "SANDBOX_MEMORY_BYTES": str(limits.memory_bytes * 3 // 2),  # the backstop
            # A second over the wall clock: the parent's timeout is what normally stops it.
            "SANDBOX_CPU_SECONDS": str(_cpu_seconds(limits)),
        },
    )
    lines, err = _exchange(
        child, _HEADER.pack(len(blob)) + blob + data, limits=limits, on_line=on_line
    )
    answer: dict[str, Any] | None = None
    for value in lines:
        if isinstance(value, dict):
            answer = value
    if answer is not None and "ok" in answer:
        return answer["ok"]
    if answer is not None and answer.get("refused") is not None:
        raise Refused(str(answer["refused"]))
    if (answer is not None and answer.get("limit") == "memory") or b"MemoryError" in err:
        raise _over_memory(limits)
    if child.returncode in (-24, -9):  # SIGXCPU at the soft CPU limit, SIGKILL at the hard one
        raise LimitExceeded("cpu", f"over {_cpu_seconds(limits)} s of CPU time")
    tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
    raise SandboxFailed(f"the child process ended with status {child.returncode}: {tail[0]}")


def _over_memory(limits: Limits) -> LimitExceeded:
    return LimitExceeded("memory", f"over {limits.memory_bytes // (1024 * 1024):,} MB of memory")


def _address_space(pid: int) -> int | None:
    """The process's address space in bytes (``RLIMIT_AS``'s measure), None where ``/proc``
    does not tell (another system: the child's own cap is all there is)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as statm:
            return int(statm.read().split(maxsplit=1)[0]) * _PAGE_BYTES
    except (OSError, ValueError, IndexError):
        return None


_PAGE_BYTES = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _exchange(
    child: "subprocess.Popen[bytes]",
    payload: bytes,
    *,
    limits: Limits,
    on_line: Callable[[dict[str, Any]], None] | None,
) -> tuple[list[Any], bytes]:
    """Feed ``payload`` to the child and read its stdout line by line as it comes: a progress
    line (a JSON object with ``progress``) goes to ``on_line`` at once, in this thread; the
    other JSON lines are returned (the last object is the answer), with all of stderr. Past
    ``limits.seconds`` the child is killed: ``LimitExceeded("time")``; past the memory limit,
    ``LimitExceeded("memory")``."""
    seconds = limits.seconds
    assert child.stdin is not None and child.stdout is not None and child.stderr is not None
    stdin, stdout, stderr = child.stdin, child.stdout, child.stderr
    received: queue.Queue[bytes | None] = queue.Queue()
    err = bytearray()

    def feed() -> None:
        try:
            stdin.write(payload)
        except OSError:  # the child ended without reading it all
            pass
        finally:
            with contextlib.suppress(OSError):
                stdin.close()

    def read_out() -> None:
        for raw in stdout:
            received.put(raw)
        received.put(None)

    def read_err() -> None:
        err.extend(stderr.read())

    workers = [threading.Thread(target=t, daemon=True) for t in (feed, read_out, read_err)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + seconds
    lines: list[Any] = []
    try:
        while True:
            try:
                left = deadline - time.monotonic()
                raw = received.get(timeout=max(0.0, min(left, MEMORY_POLL_SECONDS)))
            except queue.Empty:
                size = _address_space(child.pid)
                if size is not None and size > limits.memory_bytes:
                    raise _over_memory(limits) from None
                if left <= MEMORY_POLL_SECONDS:
                    raise LimitExceeded("time", f"over {_seconds(seconds)} s") from None
                continue
            if raw is None:
                break
            try:
                value = json.loads(raw.decode("utf-8", "replace"))
            except ValueError:
                continue
            if isinstance(value, dict) and "progress" in value:
                if on_line is not None:
                    on_line(value)
            else:
                lines.append(value)
        child.wait(timeout=max(0.0, deadline - time.monotonic()))
    except (LimitExceeded, subprocess.TimeoutExpired) as exc:
        child.kill()
        child.wait()
        for worker in workers:
            worker.join()
        if isinstance(exc, LimitExceeded) and exc.limit == "memory":
            raise
        raise LimitExceeded("time", f"over {_seconds(seconds)} s") from None
    except BaseException:
        child.kill()
        child.wait()
        raise
    for worker in workers:
        worker.join()
    return lines, bytes(err)


def _seconds(value: float) -> str:
    return f"{value:g}"


def _cpu_seconds(limits: Limits) -> int:
    return int(limits.seconds) + 1


# --- the child ----------------------------------------------------------------------------------


def _child_main(target: str) -> None:  # pragma: no cover - runs in the child process
    import importlib
    import resource
    import signal

    memory = int(os.environ["SANDBOX_MEMORY_BYTES"])
    cpu = int(os.environ["SANDBOX_CPU_SECONDS"])
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    raw = sys.stdin.buffer.read()
    (size,) = _HEADER.unpack_from(raw)
    params = json.loads(raw[_HEADER.size : _HEADER.size + size])
    data = raw[_HEADER.size + size :]
    del raw
    sys.path.insert(0, str(_ROOT))
    module_name, function_name = target.split(":")
    function = getattr(importlib.import_module(module_name), function_name)
    try:
        result: dict[str, Any] = {"ok": function(data, params)}
    except MemoryError:
        result = {"limit": "memory"}
    except Exception as exc:
        # The work's own refusals (a class with ``sandbox_refusal = True``) are for the user;
        # anything else is a crash, reported on stderr.
        if not getattr(exc, "sandbox_refusal", False):
            raise
        result = {"refused": str(exc)}
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":  # pragma: no cover
    _child_main(sys.argv[1])
