"""The same flows against real processes in both modes (docs/chat-turn.md "Embedded mode"):
embedded (uvicorn alone: no REDIS_URL, SQLite, tasks on the server's own task threads) and real
(uvicorn and a Celery worker on Redis and PostgreSQL). Regenerate and edit answer before their
reply has run and the reply then streams; ``/v1`` streams chunk by chunk; Retry re-runs the
failed reply without storing the question twice (sent again, or through Retry's endpoint); the
bot API shows ``slug``; a staff user saves a keyed provider connection (embedded: with the key
``make run``'s scripts/ensure_env.sh wrote; real: the operator's); the settings page makes and
revokes an API key. Bots talk to the local fake provider."""

import asyncio
import dataclasses
import json
import re
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest
import websockets
from django.conf import settings

from tests.conftest import FAKE_KEY, FAKE_KEY_ENV
from tests.fakeopenai import Reply
from tests.integration.processes import (
    celery_worker,
    manage,
    process_env,
    sqlite_copy,
    web_server,
)

# Real mode's processes share the test database (committed rows); embedded mode has its own file.
pytestmark = [pytest.mark.crossprocess, pytest.mark.django_db(transaction=True)]

PASSWORD = "a-long-test-password-1"
SLOW = [f"word{i} " for i in range(8)]
QUESTION = "What is the capital of Peru?"


def _slow(chunks: list[str] = SLOW) -> Reply:
    # Chunks far enough apart that a loaded machine still relays them as separate deltas (at
    # 0.15 s, one CI run under load batched 8 chunks into 2 frames): the counts below are of
    # frames, and the turn batches what arrives within CHAT_STREAM_FLUSH_SECONDS (0.05 s).
    return Reply(text="".join(chunks), chunks=chunks, delay_between_chunks=0.3)


@pytest.fixture(params=["embedded", "real"])
def platform(request, django_db_setup, tmp_path_factory, tmp_path, fake_openai, monkeypatch):
    """The web server's base URL, in the mode the test is parametrised with, with a superuser
    ``tester`` (a superuser may point a bot at the fake provider's local address)."""
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    common = {"PROVIDER_API_BASES": fake_openai.url, "LLM_MAX_RETRIES": "0"}
    if request.param == "embedded":
        env = process_env(
            REDIS_URL=None,
            DEBUG="true",
            DATABASE_URL=sqlite_copy(tmp_path_factory, tmp_path / "embedded.sqlite3"),
            CONNECTION_ENCRYPTION_KEY=_key_make_run_writes(tmp_path / ".env"),
            **common,
        )
    else:
        db = settings.DATABASES["default"]
        url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        env = process_env(
            DATABASE_URL=url,
            DEBUG="false",
            LOG_JSON="true",
            CONNECTION_ENCRYPTION_KEY="an-operators-connection-key-0123456789abcdef",
            **common,
        )
    manage(
        {**env, "DJANGO_SUPERUSER_PASSWORD": PASSWORD},
        "createsuperuser",
        "--noinput",
        "--username",
        "tester",
        "--email",
        "tester@example.com",
    )
    if request.param == "embedded":
        with web_server(env, tmp_path / "web.log") as base:
            yield base
    else:
        with (
            celery_worker(env, tmp_path / "worker.log"),
            web_server(env, tmp_path / "web.log") as base,
        ):
            yield base


def _key_make_run_writes(env_file) -> str:
    """The CONNECTION_ENCRYPTION_KEY `make run` writes into .env (scripts/ensure_env.sh), read
    back as the settings read it; the embedded server here gets it in its environment, since
    this checkout's own .env (beside manage.py) is not the test's to write."""
    script = settings.BASE_DIR / "scripts" / "ensure_env.sh"
    subprocess.run(["bash", str(script), str(env_file)], check=True, capture_output=True)  # noqa: S603, S607
    (line,) = [
        x for x in env_file.read_text().splitlines() if x.startswith("CONNECTION_ENCRYPTION_KEY=")
    ]
    return line.removeprefix("CONNECTION_ENCRYPTION_KEY=")


class Api:
    def __init__(self, base: str) -> None:
        self.base = base
        token = httpx.post(  # hashing the password can take over httpx's 5 s on a busy machine
            f"{base}/api/v1/auth/token/",
            json={"username": "tester", "password": PASSWORD},
            timeout=60,
        ).json()["token"]
        self.token = token
        self.headers = {"Authorization": f"Token {token}"}

    def post(self, path: str, body: dict | None = None) -> httpx.Response:
        return httpx.post(
            f"{self.base}/api/v1/{path}", json=body or {}, headers=self.headers, timeout=60
        )

    def messages(self, session_id: int) -> list[dict]:
        return httpx.get(
            f"{self.base}/api/v1/sessions/{session_id}/messages/", headers=self.headers
        ).json()

    def wait_finished(self, session_id: int, message_id: int, timeout: float = 60) -> dict:
        """The reply once it has left pending/streaming (polled over REST)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [m for m in self.messages(session_id) if m["id"] == message_id]
            if found and found[0]["status"] not in ("pending", "streaming"):
                return found[0]
            time.sleep(0.2)
        raise AssertionError(f"reply {message_id} did not finish in {timeout} s")

    def stream_kinds(
        self, session_id: int, reply_id: int, *, release: threading.Event | None = None
    ) -> list[str]:
        """The websocket's frame types for ``reply_id`` until it completes or fails; with
        ``release``: set once the socket is open (the held fake provider answers then)."""

        async def listen() -> list[str]:
            url = self.base.replace("http", "ws") + f"/ws/sessions/{session_id}/"
            kinds: list[str] = []
            async with websockets.connect(
                url, additional_headers={"Authorization": f"Token {self.token}"}
            ) as ws:
                if release is not None:
                    release.set()
                while True:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
                    message = frame.get("message") or {}
                    if reply_id in (frame.get("message_id"), message.get("id")):
                        kinds.append(frame["type"])
                        if frame["type"] in ("message.completed", "message.failed"):
                            return kinds

        return asyncio.run(listen())


def test_replies_stream_and_retry_never_duplicates(platform, fake_openai):
    api = Api(platform)
    bot = api.post(
        "bots/",
        {
            "name": "writer",
            "model": "openai/fake-model",
            "api_base": fake_openai.url,
            "api_key_env": FAKE_KEY_ENV,
            "system_prompt": "You are a test bot.",
        },
    ).json()
    session = api.post("sessions/", {"bot": bot["id"]}).json()["id"]
    gates = [threading.Event(), threading.Event()]
    fake_openai.script(
        Reply(text="First answer."),
        *[dataclasses.replace(_slow(), hang=60, until=g) for g in gates],
    )
    first = api.post(f"sessions/{session}/messages/", {"content": "hello", "wait": True}).json()
    assert first["assistant_message"]["content"] == "First answer."

    # Regenerate and edit: answered while the fake provider still holds the reply's answer
    # (the turn runs after the request, never inside it), which then streams delta by delta.
    for gate, (path, body) in zip(
        gates,
        (
            (f"messages/{first['assistant_message']['id']}/regenerate/", None),
            (f"messages/{first['user_message']['id']}/edit/", {"content": "hello again"}),
        ),
    ):
        response = api.post(path, body)
        assert (response.status_code, gate.is_set()) == (201, False)
        reply = response.json()["assistant_message"]
        assert reply["status"] == "pending"
        kinds = api.stream_kinds(response.json()["session"]["id"], reply["id"], release=gate)
        assert kinds[-1] == "message.completed"
        assert kinds.count("message.delta") >= 3

    # Retry of a failed reply: the same question, answered in place.
    fake_openai.script(Reply(status=400, error_message="bad request"), Reply(text="Lima."))
    failed = api.post(
        f"sessions/{session}/messages/", {"content": QUESTION, "client_id": str(uuid.uuid4())}
    ).json()
    assert api.wait_finished(session, failed["assistant_message"]["id"])["status"] == "failed"
    retried = api.post(
        f"sessions/{session}/messages/", {"content": QUESTION, "client_id": str(uuid.uuid4())}
    ).json()
    assert retried["user_message"]["id"] == failed["user_message"]["id"]
    assert retried["assistant_message"]["id"] == failed["assistant_message"]["id"]
    api.wait_finished(session, failed["assistant_message"]["id"])
    assert [(m["seq"], m["role"], m["content"], m["status"]) for m in api.messages(session)] == [
        (1, "user", "hello", "complete"),
        (2, "assistant", "First answer.", "complete"),
        (3, "user", QUESTION, "complete"),
        (4, "assistant", "Lima.", "complete"),
    ]
    assert fake_openai.requests[-1]["messages"] == [
        {"role": "system", "content": "You are a test bot."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": QUESTION},
    ]

    # A few chats at once (on SQLite too): every reply completes, none meets a locked database.
    sessions = [api.post("sessions/", {"bot": bot["id"]}).json()["id"] for _ in range(3)]
    fake_openai.script(*[_slow(["Same ", "answer ", "for ", "all."]) for _ in sessions])
    with ThreadPoolExecutor(len(sessions)) as pool:
        sent = list(
            pool.map(lambda s: api.post(f"sessions/{s}/messages/", {"content": "hi"}), sessions)
        )
    assert [r.status_code for r in sent] == [202, 202, 202]
    finished = [
        api.wait_finished(s, r.json()["assistant_message"]["id"]) for s, r in zip(sessions, sent)
    ]
    assert [(m["status"], m["content"]) for m in finished] == [
        ("complete", "Same answer for all.")
    ] * 3

    # /v1 with stream=True: the chunks come as the model writes them.
    key = api.post("api-keys/", {"name": "sdk"}).json()["key"]
    client = openai.OpenAI(base_url=f"{platform}/v1", api_key=key, max_retries=0, timeout=60)
    model = client.models.list().data[0].id
    chunks = [f"part{i} " for i in range(10)]
    fake_openai.script(Reply(text="".join(chunks), chunks=chunks, delay_between_chunks=0.2))
    events = list(
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Stream please"}], stream=True
        )
    )
    final = next(i for i, e in enumerate(events) if e.choices and e.choices[0].finish_reason)
    content = [e.choices[0].delta.content for e in events[:final] if e.choices[0].delta.content]
    assert "".join(content) == "".join(chunks)
    assert len(content) > 5


def _page_session(base: str) -> httpx.Client:
    """A browser-like client signed in through the login form (session cookie, CSRF token)."""
    client = httpx.Client(base_url=base, timeout=60, follow_redirects=True)
    login = client.get("/accounts/login/")
    client.post(
        "/accounts/login/",
        data={
            "username": "tester",
            "password": PASSWORD,
            "csrfmiddlewaretoken": _csrf(login.text),
        },
        headers={"Referer": f"{base}/accounts/login/"},
    )
    return client


def _csrf(html: str) -> str:
    return re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)[1]


def test_slug_keyed_connection_settings_keys_and_retry_in_both_modes(platform, fake_openai):
    """The rest of the experience checks (issue 32), in each mode against its real processes."""
    api = Api(platform)
    bot = api.post(
        "bots/",
        {
            "name": "Travel Writer",
            "model": "openai/fake-model",
            "api_base": fake_openai.url,
            "api_key_env": FAKE_KEY_ENV,
        },
    )
    assert (bot.status_code, bot.json()["slug"]) == (201, "travel-writer")
    renamed = httpx.patch(
        f"{platform}/api/v1/bots/{bot.json()['id']}/", json={"slug": "writer"}, headers=api.headers
    )
    assert renamed.json()["slug"] == "writer"

    # A staff user saves a provider connection with its key (stored encrypted, never answered).
    saved = api.post(
        "connections/",
        {"name": "Local", "kind": "openai", "base_url": fake_openai.url, "api_key": "sk-t-123"},
    )
    assert saved.status_code == 201, saved.text
    assert (saved.json()["has_key"], "api_key" in saved.json()) == (True, False)

    # The settings page makes a key (shown once) that works on /v1, then revokes it.
    page = _page_session(platform)
    try:
        settings_page = page.get("/settings/")
        assert settings_page.status_code == 200
        made = page.post(
            "/settings/api-keys/",
            data={
                "name": "my editor",
                "access": "full",
                "csrfmiddlewaretoken": _csrf(settings_page.text),
            },
            headers={"Referer": f"{platform}/settings/"},
        )
        assert made.status_code == 200, made.text[-2000:]
        raw = re.search(r"<code data-new-key>([^<]+)</code>", made.text)[1]
        prefix = raw.split(".", 1)[0]
        bearer = {"Authorization": f"Bearer {raw}"}
        assert httpx.get(f"{platform}/v1/models", headers=bearer, timeout=60).status_code == 200
        revoked = page.post(
            f"/settings/api-keys/{prefix}/revoke/",
            data={"csrfmiddlewaretoken": _csrf(made.text)},
            headers={"Referer": f"{platform}/settings/"},
        )
        assert revoked.status_code == 200
        assert f"Key {prefix} revoked: it no longer works." in revoked.text
        assert httpx.get(f"{platform}/v1/models", headers=bearer, timeout=60).status_code == 401
    finally:
        page.close()

    # Retry's endpoint (the chat's Retry button) re-runs the failed reply for the same question.
    session = api.post("sessions/", {"bot": bot.json()["id"]}).json()["id"]
    fake_openai.script(Reply(status=400, error_message="bad request"), Reply(text="Lima."))
    failed = api.post(f"sessions/{session}/messages/", {"content": QUESTION}).json()
    reply_id = failed["assistant_message"]["id"]
    assert api.wait_finished(session, reply_id)["status"] == "failed"
    retried = api.post(f"messages/{reply_id}/retry/")
    assert (retried.status_code, retried.json()["assistant_message"]["id"]) == (202, reply_id)
    api.wait_finished(session, reply_id)
    assert [(m["seq"], m["role"], m["content"], m["status"]) for m in api.messages(session)] == [
        (1, "user", QUESTION, "complete"),
        (2, "assistant", "Lima.", "complete"),
    ]
    sent = fake_openai.requests[-1]["messages"]
    assert [m for m in sent if m["role"] == "user"] == [{"role": "user", "content": QUESTION}]
