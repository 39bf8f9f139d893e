"""Sessions: create, rename (and the default title from a first message), per-chat settings
(model, extra instruction), delete."""

from collections.abc import Callable
from functools import partial

import structlog
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, OperationalError, transaction
from django.db.models import QuerySet

from bots.models import ChatSession, SessionParticipant
from bots.queries import bot_get_for_user, session_get_for_user
from chat_platform.errors import ValidationFailed
from chat_platform.llm.tokens import count_message_tokens
from chat_platform.realtime import sockets_close_deleted
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from compaction.measure import bot_budget
from turns.services.checks import full_clean

log = structlog.get_logger(__name__)


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


EXTRA_INSTRUCTION_MAX_CHARS = 4000


def check_session_settings(
    *, session: ChatSession, model: object, extra_instruction: object
) -> dict[str, str]:
    """The per-chat settings a user may change without editing the bot: ``model`` among the
    bot's ``chat_models`` ("" = the bot's model), ``extra_instruction`` (text sent after the bot's
    system prompt, counted with it: the two must stay under the hard threshold of the chosen
    model's budget, as the bot's prompt alone must). ``None``: leave as is. Returns the fields
    to write; refuses the whole change, writing nothing."""
    changes: dict[str, str] = {}
    errors: dict[str, list[str]] = {}
    bot = session.bot
    if model is not None:
        if not isinstance(model, str):
            errors["model"] = ["A model name must be text."]
        elif model and model not in bot.chat_models:
            listed = ", ".join(bot.chat_models)
            errors["model"] = [f"Not one of this bot's models: choose one of {listed}."]
        else:
            changes["model_override"] = "" if model == bot.model else model
    if extra_instruction is not None:
        if not isinstance(extra_instruction, str):
            errors["extra_instruction"] = ["The instruction must be text."]
        elif not text_is_storable(extra_instruction):
            errors["extra_instruction"] = [UNSTORABLE_MESSAGE]
        elif len(extra_instruction) > EXTRA_INSTRUCTION_MAX_CHARS:
            errors["extra_instruction"] = [
                f"At most {EXTRA_INSTRUCTION_MAX_CHARS:,} characters "
                f"(this one has {len(extra_instruction):,})."
            ]
        else:
            changes["extra_instruction"] = extra_instruction.strip()
    if errors:
        raise ValidationFailed(details=errors)
    _check_system_part_fits(session=session, changes=changes)
    return changes


def _check_system_part_fits(*, session: ChatSession, changes: dict[str, str]) -> None:
    bot = session.bot
    trial = ChatSession(
        bot=bot,
        model_override=changes.get("model_override", session.model_override),
        extra_instruction=changes.get("extra_instruction", session.extra_instruction),
    )
    if not trial.extra_instruction:
        return
    model = trial.chat_model
    hard = bot_budget(bot, model=model).hard
    tokens = count_message_tokens(trial.extra_instruction, model=model) + (
        count_message_tokens(bot.system_prompt, model=model) if bot.system_prompt else 0
    )
    if tokens >= hard:
        raise ValidationFailed(
            details={
                "extra_instruction": [
                    f"With the bot's system prompt it is {tokens:,} tokens; it must stay under "
                    f"{hard:,} (75 % of this chat's budget), or no room is left for the "
                    "conversation."
                ]
            }
        )


def session_settings_update(
    *,
    user: AbstractBaseUser,
    session_id: object,
    title: object = None,
    model: object = None,
    extra_instruction: object = None,
) -> ChatSession:
    """PATCH a chat: its title, model and extra instruction; all checked before any is written."""
    session = session_get_for_user(user=user, session_id=session_id)
    changes = check_session_settings(
        session=session, model=model, extra_instruction=extra_instruction
    )
    if title is not None:
        session = session_rename(user=user, session_id=session.pk, title=title)
    for name, value in changes.items():
        setattr(session, name, value)
    if changes:
        full_clean(session, exclude=["user", "bot"])
        session.save(update_fields=list(changes))
        log.info("session_settings_changed", session_id=session.pk, fields=sorted(changes))
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
    chats_delete(lambda: ChatSession.objects.filter(pk=session.pk))


# A delete that met a concurrent writer (a deadlock, a row written after it looked) runs again.
DELETE_ATTEMPTS = 3


def chats_delete(
    chats: Callable[[], QuerySet[ChatSession]], *, then: Callable[[], object] | None = None
) -> None:
    """Delete ``chats()`` with everything that hangs off them, and run ``then`` in the same
    transaction. Their rows are locked first (in id order), so a compaction or a turn writing
    into one of them (a snapshot, a summary, an event: each refers to its chat) either commits
    before the delete collects what hangs off the chat, or waits for the delete and then finds
    the chat gone (``compaction.engine.common.SessionGone``) — never commits a row the delete
    did not see, which failed the delete's commit (a 500, the chat left in place). A deadlock
    with such a writer is retried."""
    for attempt in range(1, DELETE_ATTEMPTS + 1):
        try:
            with transaction.atomic():
                ids = list(chats().select_for_update().order_by("pk").values_list("pk", flat=True))
                ChatSession.objects.filter(pk__in=ids).delete()
                if then is not None:
                    then()
                # Their open sockets close once the delete holds (after an outer transaction's
                # commit, when there is one).
                transaction.on_commit(partial(sockets_close_deleted, ids))
            return
        except (IntegrityError, OperationalError):
            if attempt == DELETE_ATTEMPTS:
                raise
            log.info("chat_delete_retried", attempt=attempt)
