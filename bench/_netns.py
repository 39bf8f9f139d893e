"""Hosts on one machine for bench/multihost.py: Linux network namespaces (iproute2), each with
its own address on one bridge, and its own disk.

    root namespace   cpmh-br 10.77.0.1/24  (the bench itself: the clients, the checks)
      cpmh-data      10.77.0.10            PostgreSQL, Redis, the fake provider
      cpmh-web1/2    10.77.0.11 / .12      uvicorn
      cpmh-worker1/2 10.77.0.21 / .22      scripts/worker.sh (+ beat on worker1)

Each host is a namespace ``cpmh-<name>`` joined to the bridge by a veth pair (``cpmh-<name>`` on
the bridge side, ``eth0`` inside). A process runs on a host through ``wrap(host)``: ``ip netns
exec`` (which gives the process a mount namespace of its own), then, inside it, the host's own
directory bind-mounted over ``/tmp`` (its only writable disk: HOME, TMPDIR, the beat schedule)
and the code and the virtualenv bind-mounted read-only (the same image on every host). So
nothing one host writes to disk can be read by another: what they share goes through
PostgreSQL and Redis.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and iproute2. ``cleanup()`` is idempotent and also
removes what a run killed with SIGKILL left behind (its processes, found by ``ip netns pids``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PREFIX = "cpmh"
BRIDGE = f"{PREFIX}-br"
SUBNET = "10.77.0"
GATEWAY = f"{SUBNET}.1"
# name -> last octet of its address
HOSTS = {"data": 10, "web1": 11, "web2": 12, "worker1": 21, "worker2": 22}


@dataclass(frozen=True)
class Host:
    name: str
    addr: str
    disk: Path  # the host's own directory: its /tmp

    @property
    def ns(self) -> str:
        return f"{PREFIX}-{self.name}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(  # noqa: S603
        ["ip", *args],  # noqa: S607
        check=check,
        capture_output=True,
        text=True,
    )


def _namespaces() -> list[str]:
    listed = _ip("netns", "list", check=False).stdout.split("\n")
    return [line.split()[0] for line in listed if line.startswith(f"{PREFIX}-")]


def _links() -> list[str]:
    out = _ip("-o", "link", "show", check=False).stdout.splitlines()
    names = [line.split(":")[1].strip().split("@")[0] for line in out if ":" in line]
    return [n for n in names if n.startswith(f"{PREFIX}-")]


def leftovers() -> dict[str, list[str]]:
    """What of this bench exists now (namespaces, links): all empty after ``cleanup()``."""
    return {"namespaces": _namespaces(), "links": _links()}


def cleanup() -> dict[str, int]:
    """Kill every process left in the bench's namespaces, then delete the veths, the
    namespaces and the bridge. Returns how many of each it removed."""
    removed = {"processes": 0, "namespaces": 0, "links": 0}
    for ns in _namespaces():
        pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        removed["processes"] += len(pids)
    # Deleting one end of a veth pair deletes both; the bridge goes last.
    for link in sorted(_links(), key=lambda n: n == BRIDGE):
        if _ip("link", "del", link, check=False).returncode == 0:
            removed["links"] += 1
    for ns in _namespaces():
        if _ip("netns", "del", ns, check=False).returncode == 0:
            removed["namespaces"] += 1
    deadline = time.monotonic() + 10  # a namespace's devices go away asynchronously
    while any(leftovers().values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return removed


def _add_host(host: Host) -> None:
    veth, ns = host.ns, host.ns
    _ip("netns", "add", ns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", f"{PREFIX}-p{HOSTS[host.name]}")
    _ip("link", "set", veth, "master", BRIDGE, "up")
    _ip("link", "set", f"{PREFIX}-p{HOSTS[host.name]}", "netns", ns)
    _ip("-n", ns, "link", "set", f"{PREFIX}-p{HOSTS[host.name]}", "name", "eth0")
    _ip("-n", ns, "addr", "add", f"{host.addr}/24", "dev", "eth0")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "link", "set", "lo", "up")
    _ip("-n", ns, "route", "add", "default", "via", GATEWAY)


@contextlib.contextmanager
def network(rundir: Path) -> Iterator[dict[str, Host]]:
    """The bridge and one namespace per host of ``HOSTS``; everything removed on exit."""
    hosts = {
        name: Host(name, f"{SUBNET}.{octet}", rundir / "hosts" / name)
        for name, octet in HOSTS.items()
    }
    try:
        _ip("link", "add", BRIDGE, "type", "bridge")
        _ip("addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
        _ip("link", "set", BRIDGE, "up")
        for host in hosts.values():
            host.disk.mkdir(parents=True, exist_ok=True)
            _add_host(host)
        yield hosts
    finally:
        cleanup()


def wrap(host: Host, readonly: list[Path]) -> tuple[str, ...]:
    """The argv prefix that runs a command on ``host`` (see the module's docstring)."""
    mounts = []
    for path in readonly:
        mounts += [f"mount --bind {path} {path}", f"mount -o remount,bind,ro {path} {path}"]
    mounts.append(f"mount --bind {host.disk} /tmp")
    script = " && ".join([*mounts, "mkdir -p /tmp/home", 'exec "$@"'])
    return ("ip", "netns", "exec", host.ns, "sh", "-c", script, "sh")


def disk_files(host: Host) -> list[str]:
    """The files a host wrote to its disk (paths relative to it)."""
    return sorted(str(p.relative_to(host.disk)) for p in host.disk.rglob("*") if p.is_file())
