"""bench/multihost.py's hosts have no shared disk: a process run through ``_netns.wrap`` writes
its /tmp into its host's own directory and cannot write the code. The whole run (namespaces,
five hosts, two bursts) is a bench, `make multihost`, kept out of the suite; this checks the
mount part of the wrapper, in a mount namespace of its own (``unshare -m``, root only), with no
network namespace created."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import _netns  # noqa: E402


def _can_unshare_mounts() -> bool:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)  # noqa: S607
    return probe.returncode == 0  # (a container without CAP_SYS_ADMIN cannot)


pytestmark = pytest.mark.skipif(
    not _can_unshare_mounts(), reason="needs root allowed to unshare a mount namespace"
)


@pytest.fixture
def code():
    """A code tree outside /tmp (which the wrapper replaces)."""
    path = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="multihost-code-"))
    yield path
    shutil.rmtree(path)


def test_a_host_writes_its_own_disk_and_reads_the_code_only(tmp_path, code):
    host = _netns.Host("web1", "10.77.0.11", tmp_path / "web1")
    host.disk.mkdir()
    (code / "app.py").write_text("print('hi')\n")
    wrapped = _netns.wrap(host, [code])
    assert wrapped[:4] == ("ip", "netns", "exec", "cpmh-web1")
    probe = (
        "echo note > /tmp/note.txt; "
        f"cat {code}/app.py; "
        f"if echo x > {code}/written 2>/dev/null; then echo code-writable; fi"
    )
    # the wrapper without ``ip netns exec``: its mounts, in a mount namespace of their own
    done = subprocess.run(  # noqa: S603
        ["unshare", "-m", "--propagation", "private", *wrapped[4:], "sh", "-c", probe],  # noqa: S607
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["print('hi')"]
    assert sorted(_netns.disk_files(host)) == ["note.txt"]
    assert (host.disk / "home").is_dir()
    assert not (code / "written").exists()
