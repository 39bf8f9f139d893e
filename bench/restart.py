"""How long `make run` takes to serve again when nothing changed (docs/performance.md).

Runs ``scripts/run.sh`` (embedded mode) on a SQLite database of its own, once to install, migrate
and seed, then ``--restarts`` times more, stopping it each time; each restart is timed from the
command's start to the first answer of ``/accounts/login/``. Beside each restart, in the same
sitting and interleaved, the floor a restart cannot go below: uvicorn alone on the same database
(``python -m uvicorn chat_platform.asgi:application``), timed the same way. Prints both medians and
their ratio; the goal is a restart serving in 10 s or less.

    .venv/bin/python bench/restart.py [--restarts 3]

It writes ``.env`` in the checkout if there is none, as ``make run`` does.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from _ports import free_port  # BENCH_PORTS: the ports a shared machine allows

ROOT = Path(__file__).resolve().parents[1]
GOAL_SECONDS = 10.0


def _serve_time(command: list[str], env: dict[str, str], log: Path, timeout: float) -> float:
    """Seconds from starting ``command`` to the first answer of its login page; then stops it
    (its whole process group)."""
    started = time.monotonic()
    with open(log, "ab") as out:
        process = subprocess.Popen(  # noqa: S603
            command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{env['PORT']}/accounts/login/"
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"{command[0]} exited: see {log}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            if time.monotonic() - started > timeout:
                raise SystemExit(f"{command} did not serve within {timeout:.0f} s: see {log}")
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--restarts", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-restart-"))
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.update(DATABASE_URL=f"sqlite:///{work / 'db.sqlite3'}", LOG_LEVEL="WARNING", DEBUG="true")
    log = work / "run.log"

    def run_sh() -> float:
        port = {"PORT": str(free_port()), "DEMO_MCP_PORT": str(free_port())}
        return _serve_time(["bash", "scripts/run.sh"], {**env, **port}, log, timeout=900)

    def uvicorn_alone() -> float:
        command = [sys.executable, "-m", "uvicorn", "chat_platform.asgi:application"]
        port = str(free_port())
        return _serve_time([*command, "--port", port], {**env, "PORT": port}, log, timeout=300)

    first = run_sh()
    print(f"first start (install if needed, migrate, seed): {first:.1f} s")
    restarts, floors = [], []
    for n in range(args.restarts):
        restarts.append(run_sh())
        floors.append(uvicorn_alone())
        print(f"  restart {n + 1}: make run {restarts[-1]:.2f} s, uvicorn alone {floors[-1]:.2f} s")
    restart, floor = statistics.median(restarts), statistics.median(floors)
    print(
        f"restart with nothing changed: median {restart:.2f} s "
        f"(uvicorn alone on the same database: {floor:.2f} s; {restart / floor:.2f}x); "
        f"goal <= {GOAL_SECONDS:.0f} s: {'met' if restart <= GOAL_SECONDS else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
