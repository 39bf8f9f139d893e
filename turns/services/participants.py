"""Rooms: the bots taking part in a session (add, remove, the default) and its reply mode.

The session's ``bot`` is always its default participant, so everything that asks a session for
"its bot" (a one-bot chat, the context report without ``?bot=``) gets the room's default."""

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from bots.models import Bot, ChatSession, SessionParticipant
from bots.queries import (
    _as_id,
    bot_get_for_user,
    bot_usable_in,
    participants_of,
    session_get_for_user,
    user_bot_scope,
)
from chat_platform.errors import NotFound, ValidationFailed
from compaction.engine.coverage import room_seat_open

REPLY_MODES = [choice.value for choice in ChatSession.ReplyMode]


def participant_list(*, user: AbstractBaseUser, session_id: object) -> list[SessionParticipant]:
    session = session_get_for_user(user=user, session_id=session_id)
    return participants_of(session=session, include_removed=True)


def _rows_locked(session: ChatSession) -> list[SessionParticipant]:
    """In the caller's transaction: the session row locked (participant changes of one session
    run one at a time), and its participant rows, the implicit default written out first for a
    session that has none yet."""
    ChatSession.objects.select_for_update().filter(pk=session.pk).values_list("pk").first()
    rows = list(
        SessionParticipant.objects.filter(session=session).select_related("bot").order_by("id")
    )
    if not rows:
        rows = [
            SessionParticipant.objects.create(
                session=session, bot=session.bot, is_default=True, joined_seq=0
            )
        ]
    return rows


def _handle_free(rows: list[SessionParticipant], bot: Bot) -> None:
    """A bot joins only if no other bot of the chat answers to its ``@slug``: a mention reaches
    one of two such bots, the other never (a shared bot keeps its owner's slug, docs/rooms.md)."""
    for other in rows:
        if other.removed_at is None and other.bot_id != bot.pk and other.bot.slug == bot.slug:
            raise ValidationFailed(
                details={
                    "bot": [
                        f"Another bot in this chat already answers to @{bot.slug} "
                        f"({other.bot.name}): two bots with one handle could not be told apart. "
                        "Change one of the handles first."
                    ]
                }
            )


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValidationFailed(details={name: ["Must be true or false."]})
    return value


def _default_set(session: ChatSession, rows: list[SessionParticipant], new: SessionParticipant):
    SessionParticipant.objects.filter(session=session, is_default=True).exclude(pk=new.pk).update(
        is_default=False
    )
    SessionParticipant.objects.filter(pk=new.pk).update(is_default=True)
    ChatSession.objects.filter(pk=session.pk).update(bot=new.bot)
    session.bot = new.bot
    for row in rows:
        row.is_default = row.pk == new.pk
    new.is_default = True


def participant_add(
    *,
    user: AbstractBaseUser,
    session_id: object,
    bot_id: object,
    sees_from_join: object = False,
    is_default: object = False,
) -> SessionParticipant:
    """Bring a bot into the session: one of the user's bots or a shared one (another user's
    private bot is not found). It joins at the session's last seq; ``sees_from_join`` keeps
    what was said before out of its context. A removed participant may come back (it joins
    again, now)."""
    session = session_get_for_user(user=user, session_id=session_id)
    bot = bot_get_for_user(user=user, bot_id=bot_id)
    sees = _bool("sees_from_join", sees_from_join)
    default = _bool("is_default", is_default)
    with transaction.atomic():
        rows = _rows_locked(session)
        last_seq = ChatSession.objects.values_list("last_seq", flat=True).get(pk=session.pk)
        row = next((r for r in rows if r.bot_id == bot.pk), None)
        if row is not None and row.removed_at is None:
            raise ValidationFailed(details={"bot": ["This bot is already in the chat."]})
        _handle_free(rows, bot)
        if row is None:
            row = SessionParticipant.objects.create(
                session=session, bot=bot, joined_seq=last_seq, sees_from_join=sees
            )
            rows.append(row)
            if not session.is_room:
                ChatSession.objects.filter(pk=session.pk).update(is_room=True)
                session.is_room = True
        else:
            row.removed_at, row.joined_seq, row.sees_from_join = None, last_seq, sees
            row.save(update_fields=["removed_at", "joined_seq", "sees_from_join"])
        # Its own compaction seat (docs/rooms.md); what others' summaries cover stays theirs.
        room_seat_open(session=session, bot_id=bot.pk, sees_from_join=sees)
        if default:
            _default_set(session, rows, row)
    row.bot = bot
    return row


def participant_remove(*, user: AbstractBaseUser, session_id: object, bot_id: object) -> None:
    """Take a bot out of the session: it answers no more; its messages stay, attributed. The
    last participant cannot leave; when the default leaves, the earliest remaining one becomes
    the default."""
    session = session_get_for_user(user=user, session_id=session_id)
    number = _as_id(bot_id)
    with transaction.atomic():
        rows = _rows_locked(session)
        row = next((r for r in rows if r.bot_id == number and r.removed_at is None), None)
        if row is None:
            raise NotFound("This bot is not in the chat.")
        rest = [r for r in rows if r.removed_at is None and r.pk != row.pk]
        if not rest:
            raise ValidationFailed(
                details={"bot": ["A chat needs at least one bot; add another one first."]}
            )
        SessionParticipant.objects.filter(pk=row.pk).update(
            removed_at=timezone.now(), is_default=False
        )
        if row.is_default:
            _default_set(session, rest, rest[0])


def participants_bot_retired(*, bot_id: int) -> int:
    """A deleted bot that other people's chats used is retired (``bot_delete``): it leaves
    every room it is still in, as ``participant_remove`` takes a bot out (its messages stay,
    attributed), and where it was the default the earliest remaining bot becomes the default. A
    chat it was the only bot of keeps it, to be read, not run. Caller's transaction. How many
    rooms it left."""
    rooms = ChatSession.objects.filter(
        participants__bot_id=bot_id, participants__removed_at__isnull=True
    ).distinct()
    left = 0
    for session in rooms:
        rows = _rows_locked(session)
        row = next(r for r in rows if r.bot_id == bot_id and r.removed_at is None)
        rest = [r for r in rows if r.removed_at is None and r.pk != row.pk]
        if not rest:
            continue
        SessionParticipant.objects.filter(pk=row.pk).update(
            removed_at=timezone.now(), is_default=False
        )
        if row.is_default or session.bot_id == bot_id:
            _default_set(session, rest, rest[0])
        left += 1
    return left


def participant_default_set(
    *, user: AbstractBaseUser, session_id: object, bot_id: object
) -> SessionParticipant:
    session = session_get_for_user(user=user, session_id=session_id)
    number = _as_id(bot_id)
    with transaction.atomic():
        rows = _rows_locked(session)
        row = next((r for r in rows if r.bot_id == number and r.removed_at is None), None)
        if row is None:
            raise NotFound("This bot is not in the chat.")
        _default_set(session, rows, row)
    return row


def session_reply_mode_set(
    *, user: AbstractBaseUser, session_id: object, reply_mode: object
) -> ChatSession:
    session = session_get_for_user(user=user, session_id=session_id)
    if reply_mode not in REPLY_MODES:
        raise ValidationFailed(details={"reply_mode": [f"One of: {', '.join(REPLY_MODES)}."]})
    ChatSession.objects.filter(pk=session.pk).update(reply_mode=reply_mode)
    session.reply_mode = str(reply_mode)
    return session


def reply_as_bot(*, session: ChatSession, bot_id: object):
    """``reply_as``: the active participant that must answer; else a validation error (no
    other bot, and nobody else's bot, can be made to speak here)."""
    try:
        number = _as_id(bot_id)
    except NotFound:
        raise ValidationFailed(
            details={"reply_as": ["Must be the id of a bot in this chat."]}
        ) from None
    for participant in participants_of(session=session):
        if participant.bot_id == number:
            if not bot_usable_in(session=session, bot=participant.bot):
                raise ValidationFailed(details={"reply_as": ["This bot is no longer available."]})
            return participant.bot
    raise ValidationFailed(details={"reply_as": ["Must be the id of a bot in this chat."]})


def participant_bot(*, user: AbstractBaseUser, session: ChatSession, bot_id: object):
    """``?bot=``: a participant of the session (removed ones too: their view stays readable);
    none given, the default bot; anything else is not found, and so is a bot outside those the
    request's API key is limited to (``user_bot_scope``)."""
    if bot_id in (None, ""):
        return session.bot
    number = _as_id(bot_id)
    scope = user_bot_scope(user)
    for participant in participants_of(session=session, include_removed=True):
        if scope is not None and participant.bot_id not in scope:
            continue
        if participant.bot_id == number:
            return participant.bot
    raise NotFound("This bot is not in the chat.")
