"""Bot CRUD: create, update, delete, with the settings checks of ``turns.bot_validation``."""

from typing import Any

import structlog
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from bots.models import Bot, ChatSession, SessionParticipant
from bots.queries import bot_get_for_edit
from chat_platform.errors import NotFound, ValidationFailed
from compaction.records import prompt_version_store
from connections.models import Connection
from connections.queries import connection_get_for_user
from turns.bot_validation import check_bot_settings, slug_taken
from turns.services.checks import full_clean
from turns.services.participants import participants_bot_retired
from turns.services.session import chats_delete

log = structlog.get_logger(__name__)

# A bot's settings, the one list, in the sections every form shows them in (the bot page, the
# admin): the API, the page and the admin all take their fields from here.
BOT_BASIC_FIELDS = (
    "name",
    "system_prompt",
    "connection",
    "model",
    "allowed_models",
    "api_base",
    "api_key_env",
    "temperature",
    "max_output_tokens",
    "context_window",
    "is_shared",
)
BOT_COMPACTION_FIELDS = (
    "compaction_enabled",
    "compaction_threshold",
    "compaction_kept_percent",
    "compaction_model",
    "compaction_fallback_extractive",
)
BOT_MEMORY_FIELDS = ("memory_index_size", "recall_enabled", "embedding_model")
BOT_TOOLS_FIELDS = ("tools",)
BOT_FIELDS = BOT_BASIC_FIELDS + BOT_COMPACTION_FIELDS + BOT_MEMORY_FIELDS + BOT_TOOLS_FIELDS
# The REST API (and the admin) also show and take the slug (a bot's ``@handle`` and ``/v1``
# model id; blank is filled from the name). The bot page leaves it out: its form does not send
# it, and a blank slug would be re-derived from the name (docs/bots.md).
BOT_API_FIELDS = ("slug", *BOT_FIELDS)
# Where a bot's calls go and which key they use is its owner's (and staff's) business only:
# the API and the page leave these out for anyone else (docs/bots.md).
BOT_PRIVATE_FIELDS = ("api_base", "api_key_env")


def _connection_resolved(*, user: AbstractBaseUser, fields: dict[str, Any]) -> None:
    """``connection`` given as an id becomes the row, if ``user`` may use it: one error whether
    it does not exist or is not theirs to use."""
    if "connection" not in fields:
        return
    value = fields["connection"]
    if value is None or value == "" or isinstance(value, Connection):
        fields["connection"] = value or None
        return
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValidationFailed(details={"connection": ["A connection id."]})
    try:
        fields["connection"] = connection_get_for_user(user=user, connection_id=value)
    except NotFound:
        raise ValidationFailed(
            details={"connection": ["No such connection, or you may not use it."]}
        ) from None


# A slug derived from the name that a concurrent save took meanwhile is derived again.
SLUG_DERIVE_ATTEMPTS = 5


def _bot_saved(bot: Bot, **kwargs: Any) -> None:
    """Save; a slug another request took since ``check_bot_slug`` looked is the same field
    error, not a database error (the owner-slug constraint is the last word) — unless the user
    gave none: then the name's next free slug is derived again (two bots of one name created
    at once both derived ``x-3``, and one was refused for a slug nobody typed)."""
    derived = not bot.slug
    for attempt in range(1, SLUG_DERIVE_ATTEMPTS + 1):
        try:
            with transaction.atomic():
                bot.save(**kwargs)
            return
        except IntegrityError:
            # The constraint's name is in PostgreSQL's message, not in SQLite's: ask the rows.
            taken = Bot.objects.filter(
                owner_id=bot.owner_id, slug=bot.slug, retired_at__isnull=True
            ).exclude(pk=bot.pk)
            if not taken.exists():
                raise
            if not derived or attempt == SLUG_DERIVE_ATTEMPTS:
                raise slug_taken(bot.slug) from None
            bot.slug = ""


def bot_create(*, owner: AbstractBaseUser, **fields: Any) -> Bot:
    """The owner is the acting user: what they may set (api_base) depends on them."""
    unknown = set(fields) - set(BOT_API_FIELDS)
    if unknown:
        raise ValidationFailed(details={name: ["Unknown field."] for name in sorted(unknown)})
    _connection_resolved(user=owner, fields=fields)
    bot = Bot(owner=owner, **fields)
    full_clean(bot, exclude=["owner"])
    check_bot_settings(user=owner, bot=bot, previous_api_base=None, changed=set(fields))
    _bot_saved(bot)
    if bot.system_prompt:
        # The prompt's first version: context records name (bot, version), not the text.
        prompt_version_store(bot_id=bot.pk, text=bot.system_prompt)
    log.info("bot_created", bot_id=bot.pk, owner_id=owner.pk, model=bot.model)
    return bot


def bot_update(*, user: AbstractBaseUser, bot_id: object, **fields: Any) -> Bot:
    unknown = set(fields) - set(BOT_API_FIELDS)
    if unknown:
        raise ValidationFailed(details={name: ["Unknown field."] for name in sorted(unknown)})
    bot = bot_get_for_edit(user=user, bot_id=bot_id)
    _connection_resolved(user=user, fields=fields)
    previous_api_base = bot.api_base
    previous_tools = list(bot.tools or [])
    changed = {name for name, value in fields.items() if getattr(bot, name) != value}
    for name, value in fields.items():
        setattr(bot, name, value)
    full_clean(bot, exclude=["owner"])
    check_bot_settings(
        user=user,
        bot=bot,
        previous_api_base=previous_api_base,
        changed=changed,
        previous_tools=previous_tools,
    )
    # The connection check may fill model (listed id -> litellm string) and context_window.
    extra = ["model", "context_window"] if bot.connection_id else []
    _bot_saved(
        bot,
        update_fields=sorted(
            {*fields, *extra, "api_base_approved", "models_approved", "updated_at"}
        ),
    )
    if "system_prompt" in changed and bot.system_prompt:
        prompt_version_store(bot_id=bot.pk, text=bot.system_prompt)
    return bot


def bot_chats_deleted(bot: Bot) -> QuerySet[ChatSession]:
    """The chats deleting ``bot`` deletes: its owner's that it is the bot of, but a room where
    another bot still sits (the bot leaves it; the room goes on). What the delete page counts."""
    others_sit = SessionParticipant.objects.filter(
        session_id=OuterRef("pk"), removed_at__isnull=True
    ).exclude(bot_id=bot.pk)
    return ChatSession.objects.filter(bot=bot, user_id=bot.owner_id).exclude(
        is_room=True, pk__in=Subquery(others_sit.values("session_id"))
    )


def bot_delete(*, user: AbstractBaseUser, bot_id: object) -> None:
    """Delete the bot and its owner's chats with it (``bot_chats_deleted``: what the bot's
    delete page counts). Other people's chats with it (a shared bot's, a room it joined), and
    rooms where another bot sits, are kept: while any exist, the bot is retired instead of
    deleted (docs/bots.md "Deleting a bot") — shared no more, its slug freed (kept, no longer
    unique), found and run by
    no one, gone from every room it sat in (another bot the default where it was)."""
    bot_remove(bot_get_for_edit(user=user, bot_id=bot_id), by=user)


def bot_remove(bot: Bot, *, by: AbstractBaseUser) -> None:
    """``bot_delete`` for a bot ``by`` may change (the API's owner or staff; the admin's staff
    with the delete permission): deleted, or retired while other people's chats keep it."""
    left: list[int] = []  # rooms the retired bot left; empty when it was deleted

    def delete_or_retire() -> None:
        # Its owner's chats that go with it are deleted already (``chats_delete``, same
        # transaction): what is left with it is other people's, or rooms another bot keeps.
        others = ChatSession.objects.filter(
            Q(bot=bot) | Q(participants__bot=bot), ~Q(user_id=bot.owner_id)
        )
        rooms_kept = ChatSession.objects.filter(bot=bot, user_id=bot.owner_id)
        left.clear()
        if not others.exists() and not rooms_kept.exists():
            bot.delete()
            return
        Bot.objects.filter(pk=bot.pk).update(retired_at=timezone.now(), is_shared=False)
        left.append(participants_bot_retired(bot_id=bot.pk))

    chats_delete(lambda: bot_chats_deleted(bot), then=delete_or_retire)
    if not left:
        log.info("bot_deleted", bot_id=bot.pk, by=by.pk)
    else:
        log.info("bot_retired", bot_id=bot.pk, by=by.pk, rooms_left=left[0])
