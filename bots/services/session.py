"""Sessions: create, rename (and the default title from a first message), delete."""

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from bots.models import ChatSession, SessionParticipant
from bots.queries import bot_get_for_user, session_get_for_user
from bots.services.checks import full_clean
from chat_platform.errors import ValidationFailed


def session_create(*, user: AbstractBaseUser, bot_id: object, title: str = "") -> ChatSession:
    bot = bot_get_for_user(user=user, bot_id=bot_id)
    session = ChatSession(user=user, bot=bot, title=title or "")
    full_clean(session, exclude=["user", "bot"])
    with transaction.atomic():
        session.save()
        # Its bot is its one default participant (a room of one).
        SessionParticipant.objects.create(session=session, bot=bot, is_default=True)
    return session


SESSION_TITLE_MAX_CHARS = 60


def session_title_from_text(text: str) -> str:
    """A chat's default title: the first non-blank line of its first message, whitespace
    collapsed, cut at a word boundary to at most ``SESSION_TITLE_MAX_CHARS`` characters."""
    line = next((part for part in text.splitlines() if part.strip()), "")
    words = " ".join(line.split())
    if len(words) <= SESSION_TITLE_MAX_CHARS:
        return words
    cut = words[: SESSION_TITLE_MAX_CHARS - 1]
    if words[len(cut)] != " " and " " in cut[SESSION_TITLE_MAX_CHARS // 2 :]:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" .,;:") + "…"


def session_rename(*, user: AbstractBaseUser, session_id: object, title: object) -> ChatSession:
    session = session_get_for_user(user=user, session_id=session_id)
    if not isinstance(title, str):
        raise ValidationFailed(details={"title": ["A title must be text."]})
    session.title = " ".join(title.split())
    full_clean(session, exclude=["user", "bot"])
    session.save(update_fields=["title"])  # a rename is not activity: the chat keeps its place
    return session


def do_session_title_default(*, session: ChatSession, text: str) -> None:
    """Title a blank-titled chat from its first message (a conditional UPDATE: a rename or a
    concurrent first message wins; ``updated_at`` is left alone)."""
    title = session_title_from_text(text)
    if title and ChatSession.objects.filter(pk=session.pk, title="").update(title=title):
        session.title = title


def session_delete(*, user: AbstractBaseUser, session_id: object) -> None:
    """Delete a session with everything that hangs off it (messages, summaries, records…)."""
    session = session_get_for_user(user=user, session_id=session_id)
    session.delete()
