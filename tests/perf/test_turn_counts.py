"""The hot path guarded by counts, not timings (issue 36, item 5).

One turn of each kind, run in this process, with the exact number of SQL statements it makes
(the web part: the request or the socket's send; the worker part: ``turns.turn.turn_run``; the
other tasks it queues, which tests run inline but a deployment runs as task bodies of their own
on a worker, each apart by task name: the written messages' embedding),
the Redis commands the platform sends (the channel layer is the in-memory one here, so these are
its own: the REST waiters' pub/sub, the reply-finished wake-up) and the frames it sends, by type.
Zulip's query-count tests are the model: a change that adds a statement, a Redis command or a
frame to a turn changes one of these numbers, in the same commit, with its reason.

Each test first runs a turn of the same kind on another session (per-process caches: compiled
statements, settings, the prompt version), then counts a turn on a fresh session. Nothing here
depends on timing: deltas are sent one per chunk (``CHAT_STREAM_FLUSH_SECONDS = 0``), the
partial-text checkpoint is off (its interval is an hour), and the statements of the liveness
watcher's thread (heartbeats, on a clock) are left out.
"""

import asyncio
import json
import threading
from collections import Counter
from dataclasses import dataclass, field

import celery
import pytest
import redis
import redis.client
from channels.testing import WebsocketCommunicator
from django.core.exceptions import EmptyResultSet
from django.db.backends import utils as db_utils
from django.db.models.sql.compiler import SQLCompiler
from rest_framework.authtoken.models import Token

from bots import consumers
from bots.models import ChatSession, Message
from chat_platform import realtime as transport
from chat_platform.asgi import application
from tests.factories import BotFactory, SessionFactory
from tests.fakeopenai import Reply
from turns import stream as turn_stream
from turns import turn

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inmemory_channel_layer", "eager_tasks"),
]

CHUNKS = ["One ", "two ", "three."]
EMBED = "memory.tasks.messages_embed"


@dataclass
class Counts:
    """What one turn did, as counted by ``counting``."""

    sql: dict[str, list[str]] = field(default_factory=lambda: {"web": [], "worker": []})
    tasks: dict[str, list[str]] = field(default_factory=dict)  # by task name
    redis: list[str] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)
    # The statements Django's query builder compiled (not once per process, chat_platform/
    # compiled.py, nor hand-written): the web's and the worker's part, as ``sql``.
    built: dict[str, list[str]] = field(default_factory=lambda: {"web": [], "worker": []})
    on: bool = False
    turns_ended: int = 0  # turn_run calls that returned (a websocket turn ends after its frame)

    def summary(self) -> dict:
        return {
            "sql_web": len(self.sql["web"]),
            "sql_worker": len(self.sql["worker"]),
            "sql_tasks": {name: len(statements) for name, statements in self.tasks.items()},
            "redis": len(self.redis),
            "frames": dict(Counter(self.frames)),
        }


@pytest.fixture
def counting(monkeypatch, settings):
    """Counts every SQL statement (any connection, any thread but the liveness watcher's),
    Redis command and frame while ``counts.on``; a statement made inside ``turn_run`` is the
    worker part's, one made in another task's body (run inline by ``eager_tasks``) that task's."""
    settings.CHAT_STREAM_FLUSH_SECONDS = 0.0
    monkeypatch.setattr(turn_stream, "CHECKPOINT_SECONDS", 3600)
    counts = Counts()
    local = threading.local()

    real_execute = db_utils.CursorWrapper._execute_with_wrappers

    def execute(self, sql, params, many, executor):
        if counts.on and threading.current_thread().name != "turn-watcher":
            task = getattr(local, "task", None)
            if task is not None:
                counts.tasks.setdefault(task, []).append(sql)
            else:
                counts.sql["worker" if getattr(local, "in_turn", False) else "web"].append(sql)
        return real_execute(self, sql, params, many, executor)

    monkeypatch.setattr(db_utils.CursorWrapper, "_execute_with_wrappers", execute)

    real_as_sql = SQLCompiler.as_sql

    def as_sql(self, *args, **kwargs):
        depth = getattr(local, "compiling", 0)
        local.compiling = depth + 1
        watched = threading.current_thread().name != "turn-watcher"
        counted = counts.on and watched and depth == 0 and getattr(local, "task", None) is None
        part = "worker" if getattr(local, "in_turn", False) else "web"
        try:
            sql, params = real_as_sql(self, *args, **kwargs)
        except EmptyResultSet:
            # Built and compiled all the same, though no statement is sent (``pk__in=[]``).
            if counted:
                counts.built[part].append("<matches nothing>")
            raise
        finally:
            local.compiling = depth
        if counted:
            counts.built[part].append(sql)
        return sql, params

    monkeypatch.setattr(SQLCompiler, "as_sql", as_sql)

    real_turn = turn.turn_run

    def turn_run(**kwargs):
        local.in_turn = True
        try:
            return real_turn(**kwargs)
        finally:
            local.in_turn = False
            counts.turns_ended += 1

    monkeypatch.setattr(turn, "turn_run", turn_run)

    real_apply = celery.Task.apply

    def apply(self, *args, **kwargs):
        if self.name == "bots.tasks.turn_run":  # the turn itself: counted as the worker part
            return real_apply(self, *args, **kwargs)
        outer = getattr(local, "task", None)
        local.task = self.name
        try:
            return real_apply(self, *args, **kwargs)
        finally:
            local.task = outer

    monkeypatch.setattr(celery.Task, "apply", apply)

    def counted(real, name_of):
        def wrapper(self, *args, **kwargs):
            if counts.on:
                counts.redis.extend(name_of(self, args))
            return real(self, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(
        redis.Redis,
        "execute_command",
        counted(redis.Redis.execute_command, lambda _, args: [str(args[0])]),
    )
    monkeypatch.setattr(
        redis.client.PubSub,
        "execute_command",
        counted(redis.client.PubSub.execute_command, lambda _, args: [str(args[0])]),
    )
    monkeypatch.setattr(
        redis.client.Pipeline,
        "execute",
        counted(
            redis.client.Pipeline.execute,
            lambda pipe, _: [str(c[0][0]) for c in pipe.command_stack],
        ),
    )

    real_frames = transport.send_frames

    def send_frames(session_id, frames, **kwargs):
        if counts.on:
            counts.frames.extend(f["type"] for f in frames)
        return real_frames(session_id, frames, **kwargs)

    monkeypatch.setattr(transport, "send_frames", send_frames)
    return counts


def _script(fake_openai, times: int = 2) -> None:
    for _ in range(times):
        fake_openai.script(Reply(text="".join(CHUNKS), chunks=CHUNKS))


def _rest_turn(owner_client, session: ChatSession, content: str = "Hello") -> dict:
    response = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": content, "wait": True},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return response.json()


def test_a_rest_wait_turn(owner, owner_client, fake_bot, fake_openai, counting):
    _script(fake_openai)
    _rest_turn(owner_client, SessionFactory(user=owner, bot=fake_bot))  # warm the process
    session = SessionFactory(user=owner, bot=fake_bot)

    counting.on = True
    body = _rest_turn(owner_client, session)
    counting.on = False

    assert body["assistant_message"]["content"] == "One two three."
    # web: the send's 9 statements (the Retry check reads the chat's last question; the view's
    # access check reads the session once for the send too, was 11; the question and its
    # pending reply are one INSERT, bots.fast_paths.exchange_insert, was 10); worker: the
    # turn's 15 (claim, quota, context, admission, finish, index, record, gauge, compaction
    # check; the index's read of the rows to embed goes with its read of the messages when both
    # are indexed now, was 16); the task it queues, the written messages' embedding with
    # builtin/embed, 3 of its own (session and bot, pending rows with their texts, the vectors'
    # UPDATE; the texts were a read of their own, was 4; a batch shorter than a full one is not
    # followed by a read of what is left, was 5): a task
    # body apart, on a worker of its own in a deployment. Redis: the send's heavy-request slot
    # (EVALSHA, ZREM), the reply-finished PUBLISH, the compaction lease's EXISTS, the waiter's
    # SUBSCRIBE. -1 web: the chat's first send reads no last question to retry (there is none:
    # turns/services/retry.py; was 9).
    assert counting.summary() == {
        "sql_web": 8,
        "sql_worker": 15,
        "sql_tasks": {EMBED: 3},
        "redis": 5,
        "frames": {
            "message.created": 2,
            "message.delta": 3,
            "message.completed": 1,
            "context.updated": 1,
        },
    }


def test_a_rest_wait_turn_builds_few_reads_each_time(
    owner, owner_client, fake_bot, fake_openai, counting
):
    """The reads of a turn that Django's query builder compiles each time (``SQLCompiler.as_sql``
    outside a compilation), rather than once per process (chat_platform/compiled.py) or by
    hand: a change that builds one more on the hot path changes these numbers
    (docs/performance.md, "A turn's CPU, fourth pass")."""
    _script(fake_openai)
    _rest_turn(owner_client, SessionFactory(user=owner, bot=fake_bot))  # warm the process
    session = SessionFactory(user=owner, bot=fake_bot)

    counting.on = True
    _rest_turn(owner_client, session)
    counting.on = False

    # web: none (the token with its user, the session with its bot and the finished reply with
    # its bot are compiled once per process, were built on every request, 3; the Retry check's
    # read of the chat's last question too, was built on every send). Worker: none (a context
    # without summaries built their read, ``pk__in=[]``, which Django compiles before finding it
    # matches nothing, was 1: docs/performance.md "A turn's CPU, eighth pass"). Built once
    # per process: the history with its text, the index's read of the question and reply, the
    # gauge's session totals and compaction state (were built every turn, 4), the hand-over's
    # read of the session's next reply, the claim's statement and its "no earlier reply
    # unfinished" subquery (docs/performance.md, "A turn's CPU, fifth pass").
    assert {part: len(sqls) for part, sqls in counting.built.items()} == {"web": 0, "worker": 0}


async def _ws_turn(session_id: int, token: str) -> list[dict]:
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session_id}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    connected, _ = await communicator.connect(timeout=10)
    assert connected
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "Hi"}))
    frames = []
    while True:
        frame = json.loads(await communicator.receive_from(timeout=30))
        frames.append(frame)
        if frame["type"] == "message.completed" and frame["message"]["role"] == "assistant":
            break
    # the turn's last frames (the context gauge) follow its message.completed
    await communicator.disconnect()
    return frames


async def _sends_done() -> None:
    """Until every socket's send has returned: the turn (run inline here, on the send's commit)
    ends before the send's own last statement, which a CI run under load counted after the
    window had closed (9 web statements, not 10)."""
    while consumers._DRAINS:
        await asyncio.sleep(0.01)


async def test_a_one_bot_websocket_turn(owner, fake_bot, fake_openai, counting):
    from channels.db import database_sync_to_async

    token = (await database_sync_to_async(Token.objects.get_or_create)(user=owner))[0].key
    make = database_sync_to_async(lambda: SessionFactory(user=owner, bot=fake_bot).pk)
    _script(fake_openai)
    await _ws_turn(await make(), token)
    while counting.turns_ended == 0:  # the warm turn's bookkeeping, outside the count
        await asyncio.sleep(0.01)
    await _sends_done()
    session_id = await make()

    ended = counting.turns_ended
    counting.on = True
    frames = await _ws_turn(session_id, token)
    while counting.turns_ended == ended:  # its bookkeeping after message.completed
        await asyncio.sleep(0.01)
    await _sends_done()
    counting.on = False

    assert frames[-1]["message"]["content"] == "One two three."
    # Redis: the reply-finished PUBLISH, the compaction lease's EXISTS (no waiter). SQL: the
    # worker's and the task's as the REST turn's; the web's include the check that the socket's
    # token still signs its user in (chat_platform.realtime_auth.credential_valid), read with the
    # send's chat and its bot in one statement (bots.queries.token_user_and_session, was two:
    # 10); the question and its pending reply are one INSERT (was 11); the chat's first send
    # reads no last question to retry (was 9).
    assert counting.summary() == {
        "sql_web": 8,
        "sql_worker": 15,
        "sql_tasks": {EMBED: 3},
        "redis": 2,
        "frames": {
            "message.created": 2,
            "message.delta": 3,
            "message.completed": 1,
            "context.updated": 1,
        },
    }


async def test_a_one_bot_websocket_turn_builds_few_reads_each_time(
    owner, fake_bot, fake_openai, counting
):
    """As the REST turn's: the reads Django's query builder compiles each time. Web: none (the
    handshake's token with its user is compiled once per process as the API's, was built on
    every socket, 1; docs/performance.md "A turn's CPU, sixth pass")."""
    from channels.db import database_sync_to_async

    token = (await database_sync_to_async(Token.objects.get_or_create)(user=owner))[0].key
    make = database_sync_to_async(lambda: SessionFactory(user=owner, bot=fake_bot).pk)
    _script(fake_openai)
    await _ws_turn(await make(), token)
    while counting.turns_ended == 0:
        await asyncio.sleep(0.01)
    await _sends_done()
    session_id = await make()

    ended = counting.turns_ended
    counting.on = True
    await _ws_turn(session_id, token)
    while counting.turns_ended == ended:
        await asyncio.sleep(0.01)
    await _sends_done()
    counting.on = False

    assert {part: len(sqls) for part, sqls in counting.built.items()} == {"web": 0, "worker": 0}


def _room(owner, owner_client, fake_openai) -> ChatSession:
    from tests.conftest import FAKE_KEY_ENV

    bots = [
        BotFactory(
            owner=owner,
            name=name,
            model="openai/fake-model",
            api_base=fake_openai.url,
            api_key_env=FAKE_KEY_ENV,
        )
        for name in ("Planner", "Critic")
    ]
    made = owner_client.post("/api/v1/sessions/", {"bot": bots[0].pk}, format="json")
    session_id = made.json()["id"]
    added = owner_client.post(
        f"/api/v1/sessions/{session_id}/participants/", {"bot": bots[1].pk}, format="json"
    )
    assert added.status_code == 201, added.json()
    return ChatSession.objects.get(pk=session_id)


def test_a_room_hand_over(owner, owner_client, fake_bot, fake_openai, counting):
    """Planner answers and mentions Critic, who answers: two turns, one REST ``wait``."""
    for _ in range(2):
        fake_openai.script(
            Reply(text="Over to you, @critic.", chunks=["Over to you, ", "@critic."])
        )
        fake_openai.script(Reply(text="Done here.", chunks=["Done ", "here."]))
    _rest_turn(owner_client, _room(owner, owner_client, fake_openai))
    session = _room(owner, owner_client, fake_openai)

    counting.on = True
    _rest_turn(owner_client, session)
    counting.on = False

    assert [m.status for m in Message.objects.filter(session=session).order_by("seq")] == [
        "complete",
        "complete",
        "complete",
    ]
    # two turns (Planner's, then Critic's, handed the floor in Planner's notifier); web: the
    # view reads the session once for the send too (was 15); +1 worker: Planner's reply names
    # @critic, so the room reads what was said before it to tell a mention from an echo
    # (turns/finished.py, docs/rooms.md); one
    # embedding task run for the three written messages. Critic's turn indexes its reply
    # beside a question indexed already, so its index reads the rows to embed (Planner's does
    # not: 46 -> 45). +1 web, +1 worker: a seat with no row yet (the send's check of
    # Planner's, Critic's first turn) reads the other bots' recall and tool rounds, which it is
    # never shown, in a statement of its own; a seat with its row reads them with it
    # (compaction/seats.py: they counted in its pressure before). -1 web: the question and
    # Planner's pending reply are one INSERT (was 15). -1 web: the room's first send reads no
    # last question to retry (was 14).
    assert counting.summary() == {
        "sql_web": 13,
        "sql_worker": 46,
        "sql_tasks": {EMBED: 3},
        "redis": 7,
        "frames": {
            "message.created": 3,
            "message.delta": 4,
            "message.completed": 2,
            "context.updated": 2,
        },
    }


def test_a_turn_with_a_recall(owner, owner_client, fake_bot, fake_openai, counting):
    """One recall round (``search_records``), then the answer."""
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "search_records", "arguments": json.dumps({"query": "tea"})},
    }
    for _ in range(2):
        fake_openai.script(Reply(text="", tool_calls=[call]))
        fake_openai.script(Reply(text="".join(CHUNKS), chunks=CHUNKS))
    _rest_turn(owner_client, SessionFactory(user=owner, bot=fake_bot))
    session = SessionFactory(user=owner, bot=fake_bot)

    counting.on = True
    _rest_turn(owner_client, session)
    counting.on = False

    assert [m.role for m in Message.objects.filter(session=session).order_by("seq")] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    # the recall round: the tool call and its result stored and announced (2 message.created);
    # web as the REST turn's (was 11: the session read twice; 10: two INSERTs for the pair).
    # Worker 29, was 32: the round's totals ride on the seqs' UPDATE, its call and result are
    # one INSERT, and the reply's new seq is not read back (docs/performance.md, "The tool
    # task, seventh pass"). Web 8: the chat's first send reads no last question to retry (was 9).
    assert counting.summary() == {
        "sql_web": 8,
        "sql_worker": 29,
        "sql_tasks": {EMBED: 3},
        "redis": 5,
        "frames": {
            "message.created": 4,
            "recall": 1,
            "message.delta": 3,
            "message.completed": 1,
            "context.updated": 1,
        },
    }


async def _v1_streamed(client, bot_slug: str, key: str) -> str:
    response = await client.post(
        "/v1/chat/completions",
        {"model": bot_slug, "messages": [{"role": "user", "content": "Hi"}], "stream": True},
        content_type="application/json",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert response.status_code == 200
    return b"".join([chunk async for chunk in response.streaming_content]).decode()


async def test_a_v1_streamed_turn(owner, fake_bot, fake_openai, counting):
    """``/v1/chat/completions`` with ``stream: true``: the call's messages stored in a new
    session, the reply streamed from the session's frames as OpenAI chunks."""
    from channels.db import database_sync_to_async
    from django.test import AsyncClient

    from openai_api.keys import key_create

    _, key = await database_sync_to_async(key_create)(user=owner, name="counts")
    slug = await database_sync_to_async(lambda: type(fake_bot).objects.get(pk=fake_bot.pk).slug)()
    _script(fake_openai)
    client = AsyncClient()
    await _v1_streamed(client, slug, key)  # warm the process

    counting.on = True
    body = await _v1_streamed(client, slug, key)
    counting.on = False

    assert body.endswith("data: [DONE]\n\n")
    assert '"content": "three."' in body.replace('":"', '": "')
    # web, 25: the key, its user, the bot, the quota; a failed opening of the same message to
    # run again (openai_api/identity.py, +1: a retried first call made a new chat per try),
    # else the new session and its API session; the send (session, quota again, the chat's
    # last message unless the chat is new (a new chat here: 24, was 25), two savepoints, seqs,
    # the pair written in one INSERT (was two: 26),
    # title, gauge, the API turn, dispatched_at); the finished reply read when its last frame
    # came, its API turn and the call's chain written. worker, 18: the REST turn's 15, +1 the
    # API turn's options, +2 the chain read and written at the finish. The embedding task's 4,
    # apart. Redis: the reply-finished PUBLISH, the compaction lease's EXISTS (no
    # heavy-request slot on /v1, no REST waiter).
    assert counting.summary() == {
        "sql_web": 24,
        "sql_worker": 18,
        "sql_tasks": {EMBED: 3},
        "redis": 2,
        "frames": {
            "message.created": 2,
            "message.delta": 3,
            "message.completed": 1,
            "context.updated": 1,
        },
    }
