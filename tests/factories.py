import functools

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
