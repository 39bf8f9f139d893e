"""Embedded mode end to end: no REDIS_URL, SQLite, in-process tasks, built-in models.

Runs the same commands the README's run command runs (migrate, seed_demo, the ASGI server) in a
clean environment and completes turns over REST and a real websocket.
"""

import asyncio
import json

import httpx
import pytest
import websockets

from tests.integration.processes import process_env, sqlite_copy, web_server

pytestmark = pytest.mark.crossprocess


@pytest.fixture
def embedded_env(tmp_path_factory, tmp_path):
    """Embedded mode on a copy of the migrated, ``seed_demo``'d SQLite template."""
    return process_env(
        REDIS_URL=None,
        SECRET_KEY=None,
        DEBUG="true",
        DATABASE_URL=sqlite_copy(tmp_path_factory, tmp_path / "embedded.sqlite3", seed=True),
    )


def test_embedded_turns_complete(embedded_env, tmp_path):
    with web_server(embedded_env, tmp_path / "web.log") as base:
        token = httpx.post(
            f"{base}/api/v1/auth/token/", json={"username": "demo", "password": "demo"}
        ).json()["token"]
        headers = {"Authorization": f"Token {token}"}
        bots = httpx.get(f"{base}/api/v1/bots/", headers=headers).json()
        assert [b["model"] for b in bots] == ["builtin/recall", "builtin/recall"]
        session = httpx.post(
            f"{base}/api/v1/sessions/", json={"bot": bots[0]["id"]}, headers=headers
        ).json()

        first = httpx.post(
            f"{base}/api/v1/sessions/{session['id']}/messages/",
            json={"content": "Our office wifi password is BlueHeron-42.", "wait": True},
            headers=headers,
            timeout=60,
        )
        assert first.status_code == 201
        assert first.json()["assistant_message"]["status"] == "complete"

        async def ws_turn() -> list[dict]:
            url = base.replace("http", "ws") + f"/ws/sessions/{session['id']}/"
            frames = []
            async with websockets.connect(
                url, additional_headers={"Authorization": f"Token {token}"}
            ) as ws:
                await ws.send(
                    json.dumps({"type": "message.send", "content": "What is the wifi password?"})
                )
                while True:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
                    frames.append(frame)
                    if frame["type"] == "message.completed" and frame["message"]["role"] == (
                        "assistant"
                    ):
                        return frames

        frames = asyncio.run(ws_turn())
        final = frames[-1]["message"]
        assert "BlueHeron-42" in final["content"]
        deltas = [f["delta"] for f in frames if f["type"] == "message.delta"]
        assert "".join(deltas) == final["content"]
        history = httpx.get(
            f"{base}/api/v1/sessions/{session['id']}/messages/", headers=headers
        ).json()
        assert [(m["seq"], m["role"], m["status"]) for m in history] == [
            (1, "user", "complete"),
            (2, "assistant", "complete"),
            (3, "user", "complete"),
            (4, "assistant", "complete"),
        ]
