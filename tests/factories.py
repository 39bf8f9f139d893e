import functools
import threading

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password

from bots.models import Bot, ChatSession, Message
from chat_platform.llm.tokens import count_message_tokens, count_tokens


@functools.cache
def _hashed(raw: str) -> str:
    return make_password(raw)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")

    @factory.post_generation
    def password(obj, create, extracted, **kwargs):  # noqa: N805
        """The project's own hasher (PBKDF2, a million rounds: ~0.2 s of CPU per hash) once per
        password per test process, not once per user: every bot of a test makes a user."""
        obj.password = _hashed(extracted or "pw-123456")

    @factory.post_generation
    def _save(obj, create, extracted, **kwargs):  # noqa: N805
        if create:
            obj.save()


class BotFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Bot

    owner = factory.SubFactory(UserFactory)
    name = factory.Sequence(lambda n: f"Bot {n}")
    system_prompt = "You are a test bot."
    model = "builtin/recall"
    api_base = ""
    # Test bots are configured as staff would: their api_base counts as approved. Tests of the
    # provider policy (tests/bots/test_provider_policy.py) pass api_base_approved explicitly.
    api_base_approved = factory.LazyAttribute(lambda bot: bot.api_base)
    models_approved = factory.LazyAttribute(
        lambda bot: "\n".join(
            m
            for m in (
                bot.model,
                getattr(bot, "compaction_model", ""),
                getattr(bot, "embedding_model", ""),
            )
            if m
        )
    )


class SessionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = ChatSession

    user = factory.SubFactory(UserFactory)
    bot = factory.SubFactory(BotFactory, owner=factory.SelfAttribute("..user"))
    title = "test session"


def message_add(session: ChatSession, *, role: str, content: str, **fields) -> Message:
    """Append a finished message with the next seq (test data; production goes via services)."""
    session.last_seq += 1
    session.save(update_fields=["last_seq"])
    fields.setdefault("token_count", count_message_tokens(content, model=session.bot.model))
    return Message.objects.create(
        session=session, seq=session.last_seq, role=role, content=content, **fields
    )


def turn_pending(
    session: ChatSession, text: str = "What now?", /, **reply_fields
) -> tuple[Message, Message]:
    """A user message (``text``) and the reply that answers it, ``pending`` (or as
    ``reply_fields`` say), the message counted in the session's running totals as the send
    path counts it."""
    from bots.transitions import session_context_add

    question = message_add(session, role="user", content=text)
    fields = {"content": "", "status": "pending", "token_count": 0, **reply_fields}
    reply = message_add(session, role="assistant", reply_to=question, **fields)
    session_context_add(session_id=session.pk, tokens=question.token_count)
    return question, reply


def turn_thread(reply: Message) -> threading.Thread:
    """The reply's turn, started on a thread of its own (which gives its connection back)."""
    from django.db import connection

    from turns import turn

    def run() -> None:
        try:
            turn.turn_run(message_id=reply.pk)
        finally:
            connection.close()

    runner = threading.Thread(target=run)
    runner.start()
    return runner


class MemoryRecordFactory(factory.django.DjangoModelFactory):
    """A session-scoped info record; pass ``scope="bot", session=None, user=…, bot=…`` for a
    bot-scoped one (tests of the data layer; production writes go through memory.services)."""

    class Meta:
        model = "memory.MemoryRecord"

    session = factory.SubFactory(SessionFactory)
    name = factory.Sequence(lambda n: f"record-{n}")
    kind = "info"
    scope = "session"
    description = factory.Sequence(lambda n: f"Record number {n}")
    body = "Some remembered text."
    token_count = factory.LazyAttribute(lambda o: count_tokens(o.body))
