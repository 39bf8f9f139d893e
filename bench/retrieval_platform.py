"""The platform side of ``bench/memory_retrieval.py``: Django set up for the bench, the corpus fed
through the real send path, and each question asked through the real turn with a fake provider
that calls ``search_records`` with the question as written (what reached the model is read off
the provider's requests)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from retrieval_corpus import Corpus, Question, Turn  # noqa: E402

DATE_WINDOW_CHARS = 160
# A snapshot written by a fusion holds the summaries it merged.
FUSION_MARK = "[Summary of messages"
FAILURES: list[str] = []  # turns that did not complete (error code: message)
# The default configuration: a bot left at its defaults embeds with the built-in model.
DEFAULT_EMBEDDING = "builtin/embed"
SCALE_TITLE = "vector scale"


def setup(sqlite: bool) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("LOG_LEVEL", "ERROR")  # failed turns are counted and printed
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.pop("REDIS_URL", None)  # embedded: tasks run in-process, the lock is in-process
    if sqlite:
        path = Path(os.environ.get("BENCH_SQLITE_PATH", "/tmp/bench_memory_retrieval.sqlite3"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    else:
        os.environ.setdefault(
            "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/chat_bench_retrieval"
        )
    import django
    from _django import database_migrated

    django.setup()
    database_migrated()
    from chat_platform.celery_app import app as celery_app

    # Each turn ends before the next is sent, as the bench reads what it stored (embedded mode
    # would otherwise run it on a task thread and return at once: chat_platform/inprocess.py).
    celery_app.conf.task_always_eager = True


# --- text helpers ------------------------------------------------------------------------------


def normalise(text: str) -> str:
    return " ".join(text.replace("**", "").split())


def message_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return content or ""


def request_text(body: dict) -> str:
    return normalise("\n".join(message_text(m) for m in body.get("messages") or []))


def tool_text(body: dict) -> str:
    """The results of the request's last recall round: the ``tool`` messages after its last
    assistant message that called tools. Older rounds in the history the request carries (the
    feed's own recall) are not this question's result."""
    messages = body.get("messages") or []
    calls = [
        i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("tool_calls")
    ]
    start = calls[-1] + 1 if calls else len(messages)
    return normalise(
        "\n".join(message_text(m) for m in messages[start:] if m.get("role") == "tool")
    )


def dated_in(text: str, turn: Turn) -> bool:
    """The turn is in ``text`` with its date on the same line or just before it."""
    needle = normalise(turn.text)
    start = text.find(needle)
    while start >= 0:
        if turn.date in text[max(0, start - DATE_WINDOW_CHARS) : start]:
            return True
        start = text.find(needle, start + 1)
    return False


# --- the platform ------------------------------------------------------------------------------


@dataclass
class Asked:
    question: Question
    found: bool
    in_tool_result: bool
    date_found: bool
    without_recall: bool
    tool_tokens: int
    hits: list[str]
    tool_result: str
    latency_ms: float
    turn_ms: float
    # per evidence turn: where it was (found | excerpt-cut | record-not-hit | no-record | ...)
    evidence_state: dict[str, str] = field(default_factory=dict)


class Responder:
    """The fake provider's script: the first call of a question gets a ``search_records`` tool
    call with the question as its query; any later call gets a short answer."""

    def __init__(self) -> None:
        self.question = ""
        self.lock = threading.Lock()

    def __call__(self, body: dict):
        from tests.fakeopenai import Reply

        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "user" and body.get("tools"):
            call = {
                "id": "call_search",
                "type": "function",
                "function": {
                    "name": "search_records",
                    "arguments": json.dumps({"query": self.question}),
                },
            }
            return Reply(text="", tool_calls=[call], finish_reason="tool_calls")
        return Reply(text="Thanks, that helps.")


def say(user, session, content: str):  # noqa: ANN001
    from turns.services.send import session_message_send

    result = session_message_send(user=user, session_id=session.pk, content=content)
    reply = result.assistant_message
    assert reply is not None
    reply.refresh_from_db()
    if reply.status != "complete":
        # Counted and reported, not fatal: the run goes on, as a user's conversation would.
        FAILURES.append(f"{content[:50]!r} -> {reply.error_code}: {reply.error_message[:200]}")
    return reply


def feed(  # noqa: ANN201
    corpus: Corpus, window: int, embedding_base: str = "", embedding_model: str = ""
):
    """The bot, the session and the corpus sent turn by turn; (user, bot, session, seconds,
    seq of every turn's message). The bot is left at its default embedding model (the built-in
    one) unless ``embedding_base`` names a server: then it embeds with ``embedding_model``
    served there (approved, as staff would: a local server)."""
    from django.contrib.auth import get_user_model

    from bots.models import Bot, ChatSession, Message
    from turns.services.session import session_create

    user, _ = get_user_model().objects.get_or_create(username="bench-retrieval")
    Bot.objects.filter(owner=user).delete()
    bot = Bot.objects.create(
        owner=user,
        name="Retrieval bench (built-in, small window)",
        model="builtin/recall",
        system_prompt="You are a helpful assistant with a small context window.",
        context_window=window,
        max_output_tokens=256,
        compaction_enabled=True,
        compaction_model="builtin/extractive",
        memory_index_size=8,
    )
    if embedding_base:
        bot.api_base = bot.api_base_approved = embedding_base
        bot.embedding_model = embedding_model
        bot.models_approved = f"builtin/recall\nbuiltin/extractive\n{embedding_model}"
        bot.save()
    session = session_create(user=user, bot_id=bot.pk)
    seqs: dict[str, int] = {}
    started = time.monotonic()
    turns = corpus.turns
    for number, turn in enumerate(turns, start=1):
        before = ChatSession.objects.values_list("last_seq", flat=True).get(pk=session.pk)
        say(user, session, f"{turn.speaker}: {turn.text}")
        rows = Message.objects.filter(session=session, seq__gt=before)
        # Bench-only: the send path stamps "now"; the corpus turn's time is what recall must
        # show, so the stored rows of this send get it (the reply one second later).
        first = rows.order_by("seq").values_list("seq", flat=True).first()
        rows.filter(seq=first).update(created_at=turn.when)
        rows.filter(seq__gt=first).update(created_at=turn.when + timedelta(seconds=1))
        seqs[turn.id] = first
        if number % 100 == 0:
            print(f"  fed {number}/{len(turns)} turns ({time.monotonic() - started:.0f} s)")
    return user, bot, session, time.monotonic() - started, seqs


def fed_already(corpus: Corpus, window: int, embedding: str):  # noqa: ANN201
    """``--reuse``: the session an earlier run of this bench fed, when it holds exactly this
    corpus (every turn, in order, nothing else sent by the user) with the same window and
    embedding model; (user, bot, session, 0.0, seqs) as ``feed`` returns, else ``None``. The
    feed is the slow part; the questions leave the session as they found it."""
    from django.contrib.auth import get_user_model

    from bots.models import ChatSession, Message

    user = get_user_model().objects.filter(username="bench-retrieval").first()
    turns = corpus.turns
    said = [f"{t.speaker}: {t.text}" for t in turns]
    for session in (
        ChatSession.objects.filter(user=user, bot__context_window=window)
        .exclude(title=SCALE_TITLE)
        .select_related("bot")
        .order_by("-pk")
    ):
        if session.bot.embedding_model != embedding:
            continue
        sent = list(
            Message.objects.filter(session=session, role="user")
            .order_by("seq")
            .values_list("seq", "content")
        )
        if [content for _, content in sent] == said:
            seqs = {t.id: seq for t, (seq, _) in zip(turns, sent, strict=True)}
            return user, session.bot, session, 0.0, seqs
    return None


def evidence_state(session, turn: Turn, tool_result: str, hits: list[str]) -> str:  # noqa: ANN001
    """Where an evidence turn was, for the misses: in the tool result; in a record that was hit
    through its other messages; in records that were not hit (raw snapshot / only fusion
    copies); in no record (still in live history, or never compacted)."""
    from memory.models import MemoryRecord

    needle = normalise(turn.text)
    if needle in tool_result:
        return "found"
    holders = {
        name: FUSION_MARK in body
        for name, body in MemoryRecord.objects.filter(session=session).values_list("name", "body")
        if needle in normalise(body)
    }
    if not holders:
        return "in no record"
    if any(name in hits for name in holders):
        return "record hit, not this message"
    if all(holders.values()):
        return "only in fusion snapshots, not hit"
    return "record not hit"


def ask(  # noqa: ANN001
    corpus: Corpus, user, bot, session, fake, responder, embedding_model: str = ""
) -> list[Asked]:
    from bots.models import ChatSession, Message
    from chat_platform.llm.tokens import count_tokens
    from memory.queries import records_search
    from memory.recall import RECALL_MAX_ROUNDS  # noqa: F401 - the loop the turn runs

    bot.model = "openai/fake-model"
    bot.api_base = fake.url
    bot.api_base_approved = fake.url  # approved, as staff would: a local server
    bot.compaction_enabled = False
    bot.embedding_model = embedding_model
    bot.models_approved = "\n".join(m for m in (bot.model, embedding_model) if m)
    bot.save()
    session.bot = bot
    state = ChatSession.objects.values("last_seq", "context_tokens", "context_messages").get(
        pk=session.pk
    )
    records_search(session=session, query="warm up")
    results = []
    for question in corpus.questions:
        responder.question = question.text
        before = len(fake.served)
        started = time.perf_counter()
        say(user, session, question.text)
        turn_ms = (time.perf_counter() - started) * 1000
        bodies = fake.requests[before:]
        started = time.perf_counter()
        hits = [hit.name for hit in records_search(session=session, query=question.text)]
        latency_ms = (time.perf_counter() - started) * 1000
        first = request_text(bodies[0]) if bodies else ""
        second = request_text(bodies[1]) if len(bodies) > 1 else ""
        tools = tool_text(bodies[1]) if len(bodies) > 1 else ""
        evidence = [corpus.turn(i) for i in question.evidence]
        found = bool(second) and all(normalise(t.text) in second for t in evidence)
        results.append(
            Asked(
                question=question,
                found=found,
                in_tool_result=all(normalise(t.text) in tools for t in evidence),
                date_found=all(dated_in(tools, t) for t in evidence),
                without_recall=all(normalise(t.text) in first for t in evidence),
                tool_tokens=count_tokens(tools),
                hits=hits,
                tool_result=tools,
                latency_ms=latency_ms,
                turn_ms=turn_ms,
                evidence_state={t.id: evidence_state(session, t, tools, hits) for t in evidence},
            )
        )
        # Every question meets the post-feed state: what this one added goes again.
        Message.objects.filter(session=session, seq__gt=state["last_seq"]).delete()
        ChatSession.objects.filter(pk=session.pk).update(**state)
    return results
