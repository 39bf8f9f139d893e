"""``bench/turn_overhead.py --against REV``: this checkout and REV side by side, in one sitting.

REV gets a worktree and a virtualenv of its own, cached under ``.bench-cache/<sha>/`` (ignored by
git; a second run reuses both): ``python -m venv``, the shared environment's packages visible
through a ``.pth`` (so nothing is downloaded that this checkout already has), then
``pip install -e`` of REV (its own code, and any dependency it needs that is not there).

Each side is a child process running this checkout's bench code in ``--side`` mode over its own
tree (``BENCH_ROOT``): its own stack (fake provider, uvicorn, workers), its own PostgreSQL
database and its own private ``redis-server``, so the two never share a queue or a channel
layer. After both have warmed up, the parent asks them for one interleaved triple (direct call,
websocket turn, REST ``wait`` turn) at a time, alternating which side goes first, and prints
each side's figures and the ratios this/REV. Both stacks stay up for the whole sitting, the
idle one waiting (its processes idle, not gone).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _ports import free_port  # BENCH_PORTS: the ports a shared machine allows

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".bench-cache"
SAY = "@@side "  # a child's protocol lines on stdout start with this (the rest is its log)


def _run(argv: list[str], **kwargs: Any) -> None:
    subprocess.run(argv, check=True, **kwargs)


def prepare(rev: str) -> Path:
    """REV's worktree with a ``.venv`` of its own, built once and reused."""
    sha = subprocess.check_output(
        ["git", "-C", str(ROOT), "rev-parse", f"{rev}^{{commit}}"], text=True
    ).strip()
    tree = CACHE / sha[:12]
    if not (tree / ".git").exists():
        CACHE.mkdir(exist_ok=True)
        _run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), sha])
    virtualenv(tree, tree / ".venv", label=f"{rev} ({sha[:12]})")
    return tree


def virtualenv(tree: Path, venv: Path, *, label: str) -> Path:
    """A virtualenv at ``venv`` with ``tree`` installed editable (built once); its python.

    This checkout gets one too (``.bench-cache/this-venv``): the shared ``.venv`` holds an
    editable install of another checkout (/work/main), whose finder serves any module this tree
    lacks from there (Celery's autodiscovery then imports that checkout's ``tasks``)."""
    python = venv / "bin" / "python"
    if not (venv / "ready").exists():
        print(f"building a virtualenv of {label} in {venv}", flush=True)
        shutil.rmtree(venv, ignore_errors=True)
        base = getattr(sys, "_base_executable", sys.executable)
        _run([base, "-m", "venv", str(venv)])
        purelib = subprocess.check_output(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            text=True,
        ).strip()
        # This checkout's packages, after REV's own site-packages (what REV installs wins).
        Path(purelib, "zz_shared_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        # A new venv holds Python's bundled setuptools (65 on 3.11), older than the project's
        # build requires and without ``bdist_wheel`` unless ``wheel`` is there: its editable
        # build failed ("invalid command 'bdist_wheel'"). The venv gets its own, first.
        _run([*pip, "setuptools>=69", "wheel"])
        try:  # its setuptools builds it: no download when the dependencies are there
            _run([*pip, "--no-build-isolation", "-e", str(tree)])
        except subprocess.CalledProcessError:
            _run([*pip, "-e", str(tree)])
        celery = venv / "bin" / "celery"  # the worker fleet's (bench/_stack.py: beside python)
        if not celery.exists():
            celery.write_text(f"#!{python}\nfrom celery.__main__ import main\nmain()\n")
            celery.chmod(0o755)
        (venv / "ready").write_text(str(tree) + "\n")
    return python


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A ``redis-server`` of its own (no persistence), stopped on exit; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("private redis-server did not start")
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        proc.terminate()
        proc.wait(10)


class Side:
    """One child running ``turn_overhead.py --side`` over ``tree`` with ``python``."""

    def __init__(self, name: str, tree: Path, python: str, env: dict[str, str], args: Any):
        self.name = name
        self.log = open(CACHE / f"side-{name}.log", "w")  # noqa: SIM115 (closed in stop)
        argv = [python, str(Path(__file__).parent / "turn_overhead.py"), "--side"]
        argv += ["--pairs", str(args.pairs), "--warmup", str(args.warmup)]
        if args.embedding_model is not None:
            argv += ["--embedding-model", args.embedding_model]
        self.proc = subprocess.Popen(
            argv,
            cwd=tree,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            bufsize=1,
        )

    def read(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(SAY):
                return json.loads(line[len(SAY) :])
            self.log.write(line)
        raise RuntimeError(f"side {self.name} ended early (see {self.log.name})")

    def ask(self, command: dict) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.ask({"do": "end"})
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(60)
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.log.close()


def _database(name: str) -> str:
    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/chat_bench_stack")
    return base.rsplit("/", 1)[0] + "/" + name


def compare(args: Any) -> dict[str, list[dict]]:
    """Run both sides interleaved; returns each side's triples and its end report."""
    rev_tree = prepare(args.against)
    this_python = virtualenv(ROOT, CACHE / "this-venv", label="this checkout")
    sha = rev_tree.name
    # SIGTERM (timeout, kill) ends the sitting through the finally blocks: sides and Redis stop.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    stem = os.environ.get("DATABASE_URL", "x/chat_bench_stack").rsplit("/", 1)[1]
    results: dict[str, list[dict]] = {"this": [], "rev": []}
    with private_redis() as redis_this, private_redis() as redis_rev:
        sides = {}
        for name, tree, python, redis_url, db in (
            ("this", ROOT, str(this_python), redis_this, f"{stem}_bench_this"),
            ("rev", rev_tree, str(rev_tree / ".venv" / "bin" / "python"), redis_rev,
             f"{stem}_bench_{sha}"),
        ):  # fmt: skip
            env = dict(os.environ, PYTHONPATH=str(tree), BENCH_ROOT=str(tree))
            env.update(DATABASE_URL=_database(db), REDIS_URL=redis_url)
            sides[name] = Side(name, tree, python, env, args)
        try:
            for side in sides.values():
                results[side.name].append(side.read())  # ready: warmed, direct call's CPU
            for i in range(args.pairs):
                order = ["this", "rev"] if i % 2 == 0 else ["rev", "this"]
                for name in order:
                    results[name].append(sides[name].ask({"do": "triple", "i": i}))
            for side in sides.values():
                results[side.name].append(side.ask({"do": "cpu"}))
        finally:
            for side in sides.values():
                side.stop()
    return results


def _side_figures(rows: list[dict]) -> dict[str, float]:
    """One side's p50s (ms) from its ready row, its triples and its end row."""
    import _stack

    p = _stack.percentile
    ready, triples, end = rows[0], rows[1:-1], rows[-1]
    ws_added, rest_added, ttft_added, ws_same = [], [], [], []
    for t in triples:
        ttft, total = t["direct"]["result"]
        ws, rest = t["ws"]["result"], t["rest"]["result"]
        if ws["outcome"] == "completed":
            ws_added.append(ws["total"] - total)
            ttft_added.append(ws["ttft"] - ttft)
            if t["ws"]["provider"] is not None:
                ws_same.append(ws["total"] - t["ws"]["provider"])
        if rest["outcome"] == "completed":
            rest_added.append(rest["total"] - total)
    turns = 2 * len(triples)
    idle = ready.get("idle_cpu_per_second", 0.0) * end.get("seconds", 0.0) / turns
    return {
        "websocket added p50": p(ws_added, 50) * 1000,
        "websocket added p95": p(ws_added, 95) * 1000,
        "REST wait added p50": p(rest_added, 50) * 1000,
        "TTFT overhead p50": p(ttft_added, 50) * 1000,
        "ws turn - provider p50": p(ws_same, 50) * 1000,
        "worker CPU per turn": end["worker"] / turns * 1000,
        "web CPU per turn": end["web"] / turns * 1000,
        "web+worker CPU per turn": (end["worker"] + end["web"]) / turns * 1000,
        "direct call CPU": ready["direct_cpu"] * 1000,
        # The stack's idle CPU (measured before the sitting) over the sitting's seconds, per
        # turn: part of the lines above, spent whether a turn runs or not. An estimate: /proc
        # samples a mostly idle process's CPU by 10 ms ticks (docs/performance.md).
        "idle CPU in it, estimate": idle * 1000,
        "not completed": float(
            sum(t[k]["result"]["outcome"] != "completed" for t in triples for k in ("ws", "rest"))
        ),
    }


def report(args: Any, results: dict[str, list[dict]]) -> None:
    this, rev = _side_figures(results["this"]), _side_figures(results["rev"])
    load = os.getloadavg()
    print(
        f"turn_overhead --against {args.against}: {args.pairs} interleaved triples per side, "
        f"load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} (1/5/15 min)"
    )
    if args.embedding_model is not None:
        print(f"  the bench bot's embedding_model on both sides: {args.embedding_model!r}")
    print(f"  {'':<26}{'this':>10}{args.against:>12}{'this/rev':>10}")
    for key in this:
        if key == "not completed":
            print(f"  {key:<26}{this[key]:>8.0f}{rev[key]:>15.0f}")
            continue
        ratio = f"{this[key] / rev[key]:>8.2f}x" if rev[key] else "       -"
        print(f"  {key:<26}{this[key]:>8.1f} ms{rev[key]:>9.1f} ms{ratio}")
    if this["not completed"] or rev["not completed"]:
        raise SystemExit("turn_overhead --against: turns not completed")


# How long each side sits idle, after its warm-up, to measure what its stack costs doing
# nothing. Long: /proc counts a process's CPU in 10 ms ticks, one tick either way for each of
# the stack's ~7 processes.
IDLE_SECONDS = 20.0


def idle_cpu_per_second(stack: Any) -> float:
    """What ``stack`` spends doing nothing (uvicorn's ticks, the workers' polls), a second: the
    sitting's CPU figures include it for every second the other side runs."""
    cpu0, started = stack.worker.cpu() + stack.web.cpu(), time.monotonic()
    time.sleep(IDLE_SECONDS)
    return (stack.worker.cpu() + stack.web.cpu() - cpu0) / (time.monotonic() - started)


class SittingCpu:
    """A side's worker and web CPU, and the seconds, since the sitting began."""

    def __init__(self, stack: Any) -> None:
        self.stack = stack
        self.worker, self.web = stack.worker.cpu(), stack.web.cpu()
        self.started = time.monotonic()

    def so_far(self) -> dict[str, float]:
        return {
            "worker": self.stack.worker.cpu() - self.worker,
            "web": self.stack.web.cpu() - self.web,
            "seconds": time.monotonic() - self.started,
        }
