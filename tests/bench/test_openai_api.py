"""Smoke test of bench/openai_api.py: it starts its stack, runs two calls per size through the
real SDK and prints its figures; exit 0 means no call failed, each size stayed in one session
and no request exceeded B. No timing is asserted."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.crossprocess


def test_the_bench_runs_in_smoke_mode():
    env = dict(os.environ)
    # Its own database beside the test database (the bench migrates and writes rows).
    base = env["DATABASE_URL"].rsplit("/", 1)
    env["DATABASE_URL"] = f"{base[0]}/{base[1]}_bench_openai"
    done = subprocess.run(  # noqa: S603
        [sys.executable, str(ROOT / "bench" / "openai_api.py"), "--smoke"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[1].split() == [
        "prior",
        "messages",
        "platform",
        "p50",
        "ms",
        "direct",
        "p50",
        "ms",
        "added",
        "p50",
        "ms",
    ]
    assert [line.split()[0] for line in lines[2:4]] == ["1", "10"]
    assert "FAULT" not in done.stdout
    assert lines[-1].startswith("sessions: 2 (one per size)")
