"""The checks of bench/multihost.py: files across web hosts, the bursts, the killed worker host.
Each check prints one line with its figures; ``Checks.report`` says whether all passed."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import subprocess
import time
import zipfile
from collections import Counter
from typing import TYPE_CHECKING

import _netns
import _stack
import concurrent_sessions as cs
import httpx

if TYPE_CHECKING:
    from multihost import Cluster

OUTCOMES = ("completed", "failed", "stuck", "lost", "duplicated")


class Checks:
    def __init__(self) -> None:
        self.results: list[tuple[str, bool]] = []

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.results.append((name, ok))
        print(f"  [{'ok' if ok else 'FAIL'}] {name}: {detail}", flush=True)

    def burst(self, cluster: Cluster, turns: list[cs.Turn], wall: float) -> None:
        counts = Counter(t.outcome for t in turns)
        webs = Counter(t.ws_base for t in turns)
        ran = worker_hosts(cluster, turns)
        totals = [t.total for t in turns if t.outcome == "completed"]
        self.check(
            f"burst of {len(turns)}",
            counts["completed"] == len(turns),
            f"{', '.join(f'{k} {counts[k]}' for k in OUTCOMES)} in {wall:.1f} s wall (turn p50 "
            f"{_stack.percentile(totals, 50):.2f} s, p95 {_stack.percentile(totals, 95):.2f} s); "
            f"sent through {_per_web(cluster, webs)}; run by "
            f"{', '.join(f'{h} {n}' for h, n in sorted(Counter(ran.values()).items()))}",
        )
        _errors(turns)

    def disks(self, cluster: Cluster) -> None:
        """What each web and worker host wrote to its own disk (the attachment and the exports
        are not there: they live in PostgreSQL)."""
        parts = []
        for name in ("web1", "web2", "worker1", "worker2"):
            # listed first: what is not a library's cache under home/
            files = sorted(_netns.disk_files(cluster.hosts[name]), key=lambda f: f[:5] == "home/")
            parts.append(f"{name} {len(files)}" + (f" ({', '.join(files[:3])})" if files else ""))
        print("  files on each host's own disk: " + "; ".join(parts))

    def report(self) -> bool:
        failed = [name for name, ok in self.results if not ok]
        print(
            f"multihost: {len(self.results) - len(failed)}/{len(self.results)} checks passed"
            + (f"; FAILED: {', '.join(failed)}" if failed else "")
        )
        return bool(self.results) and not failed


def _per_web(cluster: Cluster, webs: Counter) -> str:
    names = {base.replace("http", "ws", 1): name for name, base in cluster.web.items()}
    return ", ".join(f"{names.get(base, 'web1')} {n}" for base, n in sorted(webs.items()))


def _errors(turns: list[cs.Turn]) -> None:
    errors = Counter(
        f"{t.outcome}: {t.error or 'frames ' + ','.join(t.frames)}"[:160]
        for t in turns
        if t.outcome != "completed"
    )
    for key, n in errors.most_common(5):
        print(f"      {n} x {key}")


def prompt(sid: int) -> str:
    return f"{_stack.PROMPT} (session {sid})"


def served(cluster: Cluster) -> list[dict]:
    return httpx.get(cluster.provider_url + "/served", timeout=30).json()["served"]


def worker_hosts(cluster: Cluster, turns: list[cs.Turn]) -> dict[int, str]:
    """Session -> the worker host whose request reached the provider (the last one, if the
    turn was handed over again)."""
    by_prompt = {prompt(t.session_id): t.session_id for t in turns}
    ran: dict[int, str] = {}
    for row in served(cluster):
        if row["last"] in by_prompt:
            ran[by_prompt[row["last"]]] = cluster.host_of(row["client"])
    return ran


def make_turns(cluster: Cluster, sids: list[int]) -> list[cs.Turn]:
    """One turn per session, alternately through web1 and web2."""
    bases = [cluster.web[name].replace("http", "ws", 1) for name in ("web1", "web2")]
    return [cs.Turn(sid, ws_base=bases[i % 2], prompt=prompt(sid)) for i, sid in enumerate(sids)]


def burst_turns(
    cluster: Cluster, token: str, turns: list[cs.Turn], during=None
) -> tuple[list[cs.Turn], float]:
    """concurrent_sessions' burst of ``turns``; ``during`` runs beside it."""
    from django.db import connection

    _, wall = asyncio.run(cs.burst_turns(cluster.stack(), token, turns, during))
    time.sleep(0.3)
    cs.classify_stuck(turns)
    connection.close()
    return turns, wall


# --- files -----------------------------------------------------------------------------------


def file_checks(cluster: Cluster, fix: _stack.Fixture, sid: int, checks: Checks) -> None:
    w1, w2 = cluster.web["web1"], cluster.web["web2"]
    body = "".join(f"Line {i}: the multihost figure is {4711 + i}.\n" for i in range(200)).encode()
    auth = {"Authorization": f"Token {fix.token}"}
    with httpx.Client(timeout=120, headers=auth) as client:
        up = client.post(
            f"{w1}/api/v1/sessions/{sid}/attachments/",
            files={"file": ("figures.txt", body, "text/plain")},
        )
        attachment = up.json().get("id")
        down = client.get(f"{w2}/api/v1/attachments/{attachment}/")
        checks.check(
            "attachment across hosts",
            up.status_code == 201 and down.status_code == 200 and down.content == body,
            f"uploaded through web1 ({up.status_code}, {len(body)} bytes), downloaded through "
            f"web2 ({down.status_code}, {len(down.content)} bytes, identical "
            f"{down.content == body})",
        )
        sent = client.post(
            f"{w2}/api/v1/sessions/{sid}/messages/",
            json={"content": prompt(sid), "attachments": [attachment], "wait": True},
        )
        reply = (sent.json().get("assistant_message") or {}) if sent.is_success else {}
        checks.check(
            "attachment sent through the other host",
            sent.status_code == 201 and reply.get("status") == "complete",
            f"message with it sent through web2 (wait): {sent.status_code}, reply "
            f"{reply.get('status')}",
        )
        _export_checks(client, w1, w2, sid, checks)
        _import_check(client, cluster, fix, sid, checks)


def _export_checks(client: httpx.Client, w1: str, w2: str, sid: int, checks: Checks) -> None:
    same, sizes = [], []
    for fmt in ("json", "markdown"):
        one = client.get(f"{w1}/api/v1/sessions/{sid}/export/", params={"format": fmt})
        two = client.get(f"{w2}/api/v1/sessions/{sid}/export/", params={"format": fmt})
        same.append(one.status_code == two.status_code == 200 and one.content == two.content)
        sizes.append(f"{fmt} {len(one.content)}/{len(two.content)} bytes")
    zips = [_zip_members(client.get(f"{base}/api/v1/export/")) for base in (w1, w2)]
    same.append(bool(zips[0]) and zips[0] == zips[1])
    sizes.append(f"zip of all chats {len(zips[0])}/{len(zips[1])} files")
    checks.check(
        "exports across hosts",
        all(same),
        f"web1/web2: {', '.join(sizes)}; identical {same}",
    )


def _zip_members(answer: httpx.Response) -> dict[str, bytes]:
    if answer.status_code != 200:
        return {}
    with zipfile.ZipFile(io.BytesIO(answer.content)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _import_check(
    client: httpx.Client, cluster: Cluster, fix: _stack.Fixture, sid: int, checks: Checks
) -> None:
    """The JSON export imported through web1: stored in PostgreSQL, run on a worker host, its
    job and the imported chat read through web2."""
    w1, w2 = cluster.web["web1"], cluster.web["web2"]
    exported = client.get(f"{w1}/api/v1/sessions/{sid}/export/", params={"format": "json"})
    queued = client.post(
        f"{w1}/api/v1/import/",
        files={"file": ("chat.json", exported.content, "application/json")},
        data={"bot": str(fix.bot_id)},
    )
    job = queued.json()
    deadline = time.monotonic() + 120
    while job.get("status") in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.5)
        job = client.get(f"{w2}{job['status_url']}").json()
    imported = ((job.get("result") or {}).get("imported") or [{}])[0].get("session")
    again = client.get(f"{w2}/api/v1/sessions/{imported}/export/", params={"format": "json"})

    def texts(raw: bytes) -> list[tuple[str, str]]:
        return [(m["role"], m["content"]) for m in json.loads(raw)["messages"]]

    same = again.status_code == 200 and texts(again.content) == texts(exported.content)
    ran = [
        name
        for name in ("worker1", "worker2")
        if b"import_run" in cluster.by_name[name].log.read_bytes()
    ]
    checks.check(
        "import across hosts",
        queued.status_code == 202 and job.get("status") == "done" and same,
        f"posted through web1 ({queued.status_code}), run on {'/'.join(ran) or '?'}, job "
        f"{job.get('status')} read through web2; the imported chat's export through web2 "
        f"holds the same {len(texts(exported.content))} messages: {same}",
    )


# --- the killed worker host ------------------------------------------------------------------


def kill_host(name: str) -> int:
    """SIGKILL every process of a host (a lost machine: nothing shuts down cleanly)."""
    ns = f"{_netns.PREFIX}-{name}"
    pids = subprocess.run(  # noqa: S603
        ["ip", "netns", "pids", ns],  # noqa: S607
        capture_output=True,
        text=True,
        check=False,
    ).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)
    return len(pids)


def kill_burst_report(cluster: Cluster, token: str, sids: list[int], checks: Checks) -> None:
    killed: dict[str, float] = {}
    turns = make_turns(cluster, sids)
    in_flight = 0

    async def killer() -> None:
        """Once a quarter of the burst has completed and worker2 is streaming: it goes."""
        nonlocal in_flight
        addr = cluster.hosts["worker2"].addr
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and any(t.outcome == "stuck" for t in turns):
            if sum(t.outcome == "completed" for t in turns) >= len(turns) // 4:
                rows = await asyncio.to_thread(served, cluster)
                in_flight = sum(r["client"] == addr and r["seconds"] is None for r in rows)
                if in_flight:
                    break
            await asyncio.sleep(0.02)
        killed["in_flight"] = in_flight
        killed["completed"] = sum(t.outcome == "completed" for t in turns)
        killed["processes"] = kill_host("worker2")
        killed["at"] = time.time()

    _, wall = burst_turns(cluster, token, turns, killer)
    print(
        f"  worker2 killed after {killed.get('completed', 0):.0f} of {len(sids)} turns completed: "
        f"{killed.get('processes', 0):.0f} processes, {killed.get('in_flight', 0):.0f} of its "
        f"provider requests in flight"
    )
    _kill_checks(cluster, turns, wall, killed, checks)


def _replies(sids: list[int], within: float) -> dict[int, tuple[str, str, float]]:
    """Session -> (status, error_message, updated_at) of its reply, once none is unfinished
    (or ``within`` seconds have passed)."""
    from django.db import connection

    from bots.models import Message

    deadline = time.monotonic() + within
    while True:
        rows = {
            sid: (status, error, updated.timestamp())
            for sid, status, error, updated in Message.objects.filter(
                session_id__in=sids, role="assistant"
            ).values_list("session_id", "status", "error_message", "updated_at")
        }
        connection.close()
        unfinished = [r for r in rows.values() if r[0] in ("pending", "streaming")]
        if not unfinished or time.monotonic() > deadline:
            return rows
        time.sleep(1)


def _kill_checks(
    cluster: Cluster, turns: list[cs.Turn], wall: float, killed: dict, checks: Checks
) -> None:
    from turns.watchdog import DEAD_WORKER_TEXT

    replies = _replies([t.session_id for t in turns], within=120)
    statuses = Counter(r[0] for r in replies.values())
    ran = worker_hosts(cluster, turns)
    _clients_check(cluster, turns, wall, replies, ran, killed, checks)
    checks.check(
        "no reply left pending/streaming",
        statuses["pending"] + statuses["streaming"] == 0 and len(replies) == len(turns),
        "replies " + ", ".join(f"{k} {n}" for k, n in sorted(statuses.items())),
    )
    interrupted = {sid for sid, r in replies.items() if r[0] == "interrupted"}
    by_watchdog = {sid for sid in interrupted if replies[sid][1] == DEAD_WORKER_TEXT}
    # A turn worker2 had claimed but not yet sent to the provider left no row there.
    on_worker1 = {sid for sid in interrupted if ran.get(sid) == "worker1"}
    reached = sum(ran.get(sid) == "worker2" for sid in interrupted)
    failed_frames = {t.session_id for t in turns if t.outcome == "failed"}
    last = max((replies[sid][2] for sid in interrupted), default=killed.get("at", 0))
    completed_by = Counter(ran.get(s) or "?" for s, r in replies.items() if r[0] == "complete")
    checks.check(
        "worker2's turns ended by the watchdog",
        bool(interrupted)
        and interrupted == by_watchdog == failed_frames
        and not on_worker1
        and statuses["complete"] + len(interrupted) == len(turns),
        f"{len(interrupted)} interrupted ({reached} had reached the provider from worker2, "
        f"{len(interrupted) - reached - len(on_worker1)} not yet, {len(on_worker1)} from "
        f"worker1), all with the watchdog's dead-worker text {interrupted == by_watchdog}, each "
        f"client told by a message.failed frame {interrupted == failed_frames}; the last ended "
        f"{last - killed.get('at', last):.1f} s after the kill; completed by "
        + ", ".join(f"{h} {n}" for h, n in sorted(completed_by.items()))
        + f"; watchdog log lines on worker1: {_log_count(cluster, 'turn_interrupted_by_watchdog')}"
        f" interrupted, {_log_count(cluster, 'turns_redispatched')} hand-overs",
    )


def _clients_check(
    cluster: Cluster,
    turns: list[cs.Turn],
    wall: float,
    replies: dict[int, tuple[str, str, float]],
    ran: dict[int, str],
    killed: dict,
    checks: Checks,
) -> None:
    """Every client got its end. A reply worker2 stored ``complete`` just before it died may
    have lost its final frame with it (the frame leaves after the commit): the page's stale
    check (static/chat/controllers/session.js, 10 s without frames) then reads it over REST,
    which is what this does, through the web host the client did not use. Any other missing
    frame is lost."""
    counts = Counter(t.outcome for t in turns)
    recovered = 0
    for turn in turns:
        if turn.outcome not in ("lost", "stuck"):
            continue
        status, _, stamped = replies.get(turn.session_id, ("", "", 0.0))
        if (
            ran.get(turn.session_id) == "worker2"
            and status == "complete"
            and stamped <= killed.get("at", 0) + 1
            and _rest_text(cluster, turn) == _stack.TEXT
        ):
            recovered += 1
    frames_lost = counts["lost"] + counts["stuck"]
    checks.check(
        f"burst of {len(turns)} with worker2 killed: every client got its end",
        counts["duplicated"] == 0 and recovered == frames_lost,
        f"{', '.join(f'{k} {counts[k]}' for k in OUTCOMES)} in {wall:.1f} s wall (failed = a "
        f"message.failed frame for an interrupted reply); final frames lost with worker2 "
        f"{recovered} of {frames_lost} without one (stored complete before the kill, read "
        f"whole over REST as the page's stale check does)",
    )
    _errors([t for t in turns if t.outcome != "failed"])


def _rest_text(cluster: Cluster, turn: cs.Turn) -> str:
    """The reply's text over REST, through the web host the turn's socket did not use."""
    other = next(b for b in cluster.web.values() if b.replace("http", "ws", 1) != turn.ws_base)
    answer = httpx.get(
        f"{other}/api/v1/sessions/{turn.session_id}/messages/",
        headers={"Authorization": f"Token {cluster.token}"},
        timeout=30,
    )
    rows = answer.json() if answer.status_code == 200 else []
    rows = rows.get("results", rows) if isinstance(rows, dict) else rows
    done = [m for m in rows if m.get("role") == "assistant" and m.get("status") == "complete"]
    return done[-1]["content"] if done else ""


def _log_count(cluster: Cluster, event: str) -> int:
    return cluster.by_name["worker1"].log.read_text(errors="replace").count(f'"{event}"')
