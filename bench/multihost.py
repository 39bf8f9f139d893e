"""Past one machine, proven (issue 36, item 7): the stack as five hosts on this machine.

Linux network namespaces (bench/_netns.py), each with its own address on one bridge and its own
disk (a directory of its own as ``/tmp``, the code read-only):

    data     10.77.0.10  a private PostgreSQL 15 cluster (initdb, this run only), a private
                         redis-server (no persistence), the fake provider (bench/_fake_provider.py)
    web1/2   10.77.0.11/12  uvicorn (1 process each)
    worker1/2 10.77.0.21/22 scripts/worker.sh (1 process x 16 threads each); beat on worker1

The bench itself (root namespace, 10.77.0.1) is the clients and the checker. It runs:

1. files: an attachment uploaded through web1 and downloaded through web2; sent with a message
   through web2; the chat's export (JSON, Markdown, the zip of all chats) read through both web
   hosts, byte for byte; that export imported through web1 (an import job on a worker host) and
   its job and the imported chat read through web2.
2. burst: N websocket sessions (default 200), alternately on web1 and web2, all sending at once.
   Every turn must complete once: 0 failed, stuck, lost or duplicated.
3. kill: the same burst again; once a quarter of it has completed, every process of worker2 is
   killed (SIGKILL: a lost host). Every client must get its final frame; the turns worker2 was
   running must be ended ``interrupted`` by the watchdog (beat on worker1), the rest completed
   by worker1, and no reply left ``pending``/``streaming``.

Which worker host ran a turn is read at the provider: each prompt names its session, and the
provider records the address each request came from (``/served``'s ``client``). The watchdog runs
with short timings (``LIVENESS``) so a dead host's turns end within about 15 s. Exits non-zero on
any failed check. Every namespace, veth and process is removed on exit (Ctrl-C and SIGTERM
included), and at start whatever a killed earlier run left. Needs root and iproute2; PostgreSQL's
binaries from ``PG_BIN`` (default /usr/lib/postgresql/15/bin).

    sudo make multihost            # or: .venv/bin/python bench/multihost.py [--burst 200] [--keep]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _netns  # noqa: E402
import _stack  # noqa: E402
import concurrent_sessions as cs  # noqa: E402
from _multihost_checks import (  # noqa: E402
    Checks,
    burst_turns,
    file_checks,
    kill_burst_report,
    make_turns,
)

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
DB_NAME = "chat_multihost"
PG_PORT, REDIS_PORT, PROVIDER_PORT, WEB_PORT = 5432, 6379, 8900, 8000
# The watchdog's timings for this run (defaults 5 / 30 / 10 / 120 s, docs/operations.md): a dead
# host's streaming turns end within about timeout + interval.
LIVENESS = {
    "CHAT_HEARTBEAT_SECONDS": "2",
    "CHAT_HEARTBEAT_TIMEOUT_SECONDS": "12",
    "CHAT_WATCHDOG_SECONDS": "3",
    "CHAT_REDISPATCH_AFTER_SECONDS": "30",
}


class Cluster:
    """The hosts, their processes and addresses."""

    def __init__(self, hosts: dict[str, _netns.Host], logdir: Path) -> None:
        self.hosts = hosts
        self.logdir = logdir
        self.procs: list[_stack.Proc] = []
        self.by_name: dict[str, _stack.Proc] = {}
        self.web: dict[str, str] = {}
        self.provider_url = ""
        self.token = ""  # the bench user's API token, for the checks' REST reads
        code = Path(_stack.ROOT).resolve()
        venv = Path(sys.executable).parent.parent.resolve()
        self.readonly = [code] + ([venv] if not venv.is_relative_to(code) else [])

    def wrap(self, name: str) -> tuple[str, ...]:
        return _netns.wrap(self.hosts[name], self.readonly)

    def add(self, proc: _stack.Proc) -> _stack.Proc:
        if proc not in self.procs:
            self.procs.append(proc)
        self.by_name[proc.name] = proc
        return proc

    def stack(self, web: str = "web1") -> _stack.Stack:
        """A ``_stack.Stack`` view for concurrent_sessions' helpers (they read its ws_base)."""
        by = self.by_name
        return _stack.Stack(
            self.web[web], self.provider_url, by[web], by["worker1"], by["provider"], self.procs
        )

    def host_of(self, addr: str) -> str:
        return next((h.name for h in self.hosts.values() if h.addr == addr), addr or "?")


def _wait_port(host: str, port: int, proc: _stack.Proc, what: str) -> None:
    import socket

    def up() -> bool:
        try:
            with socket.create_connection((host, port), timeout=1):
                return True
        except OSError:
            return False

    _stack._wait_for(up, what, proc)


def start_data(cluster: Cluster, env: dict[str, str]) -> None:
    """PostgreSQL (a fresh cluster), Redis and the fake provider on the data host."""
    import subprocess

    data = cluster.hosts["data"]
    as_postgres = ("setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups")
    pgdata = data.disk / "pg"
    pgdata.mkdir(mode=0o700)
    shutil.chown(pgdata, "postgres", "postgres")
    subprocess.run(  # noqa: S603
        [*cluster.wrap("data"), *as_postgres, str(PG_BIN / "initdb"), "-D", "/tmp/pg"]
        + ["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
    )
    with open(pgdata / "pg_hba.conf", "a") as hba:
        hba.write(f"host all all {_netns.SUBNET}.0/24 trust\n")
    postgres = _stack._start(
        "postgres",
        [*as_postgres, str(PG_BIN / "postgres"), "-D", "/tmp/pg", "-p", str(PG_PORT)]
        + ["-c", f"listen_addresses={data.addr}", "-c", "unix_socket_directories=/tmp/pg"]
        + ["-c", "max_connections=150"],
        env,
        cluster.logdir,
        cluster.wrap("data"),
    )
    postgres.stop_signal = signal.SIGINT  # fast shutdown: do not wait for clients
    _wait_port(data.addr, PG_PORT, cluster.add(postgres), "postgres")
    redis = _stack._start(
        "redis",
        ["redis-server", "--bind", data.addr, "--port", str(REDIS_PORT), "--save", ""]
        + ["--appendonly", "no", "--dir", "/tmp", "--protected-mode", "no"],
        env,
        cluster.logdir,
        cluster.wrap("data"),
    )
    _wait_port(data.addr, REDIS_PORT, cluster.add(redis), "redis")
    procs: list[_stack.Proc] = []
    provider, cluster.provider_url = _stack._start_provider(
        env, cluster.logdir, procs, host=data.addr, port=PROVIDER_PORT, wrap=cluster.wrap("data")
    )
    cluster.add(provider)


def start_app(cluster: Cluster, env: dict[str, str]) -> None:
    """Two worker hosts (beat on worker1), then two web hosts."""
    for name in ("worker1", "worker2"):
        cluster.add(
            _stack._start_worker(
                env,
                cluster.logdir,
                [],
                worker_processes=1,
                worker_threads=16,
                name=name,
                wrap=cluster.wrap(name),
            )
        )
    celery = str(Path(sys.executable).parent / "celery")
    beat = _stack._start(
        "beat",
        [celery, "-A", "chat_platform", "-q", "worker", "-B", "-Q", "upkeep"]
        + ["-P", "threads", "-c", "2", "-n", "upkeep@%h", "-l", "INFO"]
        + ["--schedule", "/tmp/beat-schedule"],
        env,
        cluster.logdir,
        cluster.wrap("worker1"),
    )
    cluster.add(beat)
    for name in ("web1", "web2"):
        addr = cluster.hosts[name].addr
        web, cluster.web[name] = _stack._start_web(
            env,
            cluster.logdir,
            [],
            web_workers=1,
            host=addr,
            port=WEB_PORT,
            name=name,
            wrap=cluster.wrap(name),
        )
        cluster.add(web)
    for name in ("worker1", "worker2"):
        proc = cluster.by_name[name]
        _stack._wait_for(lambda p=proc: b"ready" in p.log.read_bytes(), name, proc)


def app_env(cluster: Cluster) -> dict[str, str]:
    data = cluster.hosts["data"].addr
    env = dict(os.environ)
    # Each process sizes its own pool as deployed (web 10, worker 2 x threads + 2).
    env.pop("DATABASE_POOL_MAX_SIZE", None)
    env.update(LIVENESS)
    env.update(
        DATABASE_URL=f"postgres://postgres@{data}:{PG_PORT}/{DB_NAME}",
        REDIS_URL=f"redis://{data}:{REDIS_PORT}/0",
        ALLOWED_HOSTS=",".join(cluster.hosts[n].addr for n in ("web1", "web2")),
        HOME="/tmp/home",
        TMPDIR="/tmp",
        LOG_JSON="true",
        LOG_LEVEL="INFO",
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def warm(cluster: Cluster, token: str, sids: list[int]) -> None:
    """A few turns through each web host, so that every process has taken one (imports)."""
    turns = [
        cs.Turn(sid, ws_base=cluster.web[("web1", "web2")[i % 2]].replace("http", "ws", 1))
        for i, sid in enumerate(sids)
    ]
    asyncio.run(cs.burst_turns(cluster.stack(), token, turns))
    if any(t.outcome != "completed" for t in turns):
        raise SystemExit(f"warm-up failed: {[(t.outcome, t.error) for t in turns]}")


def run(args: argparse.Namespace, rundir: Path) -> bool:
    logdir = rundir / "logs"
    logdir.mkdir(parents=True)
    checks = Checks()
    with _netns.network(rundir) as hosts:
        cluster = Cluster(hosts, logdir)
        try:
            data = hosts["data"].addr
            os.environ["DATABASE_URL"] = f"postgres://postgres@{data}:{PG_PORT}/{DB_NAME}"
            os.environ["REDIS_URL"] = f"redis://{data}:{REDIS_PORT}/0"
            start_data(cluster, app_env(cluster))
            _stack.django_setup()  # migrates the fresh cluster from the bench host
            start_app(cluster, app_env(cluster))
            print_topology(cluster)
            from django.db import connection

            fix = _stack.fixture(cluster.provider_url, "multihost")
            cluster.token = fix.token
            sids = _stack.sessions(fix, 2 * args.burst + 9)
            connection.close()
            warm(cluster, fix.token, sids[:8])
            file_checks(cluster, fix, sids[8], checks)
            burst = sids[9 : 9 + args.burst]
            turns, wall = burst_turns(cluster, fix.token, make_turns(cluster, burst))
            checks.burst(cluster, turns, wall)
            killed = sids[9 + args.burst :]
            kill_burst_report(cluster, fix.token, killed, checks)
            checks.disks(cluster)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop cleanup
            _close_django()
            for proc in reversed(cluster.procs):
                _stack._stop(proc)
    return checks.report()


def print_topology(cluster: Cluster) -> None:
    print("multihost: 5 hosts (network namespaces on one bridge, each its own disk)")
    roles = {
        "data": "PostgreSQL 15 (private cluster), Redis, fake provider",
        "web1": "uvicorn --workers 1",
        "web2": "uvicorn --workers 1",
        "worker1": "scripts/worker.sh 1 process x 16 threads, beat",
        "worker2": "scripts/worker.sh 1 process x 16 threads",
    }
    for name, host in cluster.hosts.items():
        print(f"  {name:8} {host.addr:11} {roles[name]}")
    print("  watchdog: " + ", ".join(f"{k}={v}" for k, v in LIVENESS.items()))


def _close_django() -> None:
    if "django" in sys.modules:
        from django.db import connections

        connections.close_all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--burst", type=int, default=200, help="sessions per burst")
    parser.add_argument("--keep", action="store_true", help="keep the hosts' disks and logs")
    args = parser.parse_args()
    if os.geteuid() != 0 or not shutil.which("ip"):
        raise SystemExit("multihost: needs root and iproute2 (ip netns)")
    if any(_netns.leftovers().values()):
        print(f"multihost: removed an earlier run's leftovers: {_netns.cleanup()}")
    # SIGTERM ends the run through the finally blocks, like Ctrl-C.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    rundir = Path(tempfile.mkdtemp(prefix="bench-multihost-"))
    rundir.chmod(0o755)
    ok = False
    try:
        ok = run(args, rundir)
    except KeyboardInterrupt:
        print("multihost: interrupted")
    finally:
        left = _netns.leftovers()
        print(f"cleanup: namespaces {len(left['namespaces'])}, links {len(left['links'])} left")
        if args.keep:
            print(f"  logs and disks kept in {rundir}")
        else:
            shutil.rmtree(rundir / "hosts", ignore_errors=True)
            print(f"  logs in {rundir / 'logs'}")
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
