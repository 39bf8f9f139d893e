"""Reads, and the access chokepoints: user-visible objects are fetched only through here.

Every ``*_get_for_user`` raises the same ``NotFound`` whether the object does not exist or
belongs to someone else, so the API never reveals what exists.
"""

import copy
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import connection
from django.db.models import F, FilteredRelation, Q, QuerySet

from bots.models import Bot, ChatSession, Message, SessionParticipant
from chat_platform.compiled import CompiledValues, instances_from, model_fields
from chat_platform.dbwrite import fast_paths
from chat_platform.errors import NotFound, PermissionDenied


def _as_id(value: object) -> int:
    """A row id from a path or a query parameter; ``NotFound`` for anything no row can have."""
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        raise NotFound() from None
    if not 0 < number <= ID_MAX:  # no row has it; SQLite cannot even bind it (OverflowError)
        raise NotFound()
    return number


# The largest id a row may have (a signed 64-bit integer: PostgreSQL's bigint, SQLite's INTEGER).
ID_MAX = 2**63 - 1


# A request made with an API key limited to some bots carries their ids on its user
# (``openai_api.auth``): every chokepoint below sees only those bots and their sessions.
_BOT_SCOPE = "_api_key_bot_scope"
_SCOPE_KEY = "_api_key_scope_subject"


def user_bot_scope_set(user: AbstractBaseUser, bot_ids: frozenset[int], *, key_id: object) -> None:
    """Limit what this request's ``user`` reaches here to ``bot_ids``, as the API key
    ``key_id`` is (docs/openai-api.md)."""
    setattr(user, _BOT_SCOPE, bot_ids)
    setattr(user, _SCOPE_KEY, f"key:{key_id}")


def user_scope_subject(user: AbstractBaseUser) -> str:
    """``key:<id>`` of the bot-limited API key this request came through, else blank: a reply
    it asks for carries it (``Message.charged_to``), so the turn's hand-overs in a room keep to
    the key's bots (``turns.hooks.TurnOptions.bots``)."""
    subject = getattr(user, _SCOPE_KEY, "")
    return subject if user_bot_scope(user) is not None and isinstance(subject, str) else ""


def user_bot_scope(user: AbstractBaseUser) -> frozenset[int] | None:
    """The bots this request's user is limited to, or None (all of theirs)."""
    scope = getattr(user, _BOT_SCOPE, None)
    return scope if isinstance(scope, frozenset) else None


def _scoped(queryset: QuerySet, user: AbstractBaseUser, field: str) -> QuerySet:
    scope = user_bot_scope(user)
    return queryset if scope is None else queryset.filter(**{f"{field}__in": scope})


def bot_list_for_user(*, user: AbstractBaseUser) -> QuerySet[Bot]:
    bots = Bot.objects.filter(Q(owner=user) | Q(is_shared=True), retired_at__isnull=True)
    return _scoped(bots.select_related("owner"), user, "pk")


def bot_get_for_user(*, user: AbstractBaseUser, bot_id: object) -> Bot:
    bot = bot_list_for_user(user=user).filter(pk=_as_id(bot_id)).first()
    if bot is None:
        raise NotFound("Bot not found.")
    return bot


def bot_can_edit(*, user: AbstractBaseUser, bot: Bot) -> bool:
    return bot.owner_id == user.pk or bool(getattr(user, "is_staff", False))


def bot_get_for_edit(*, user: AbstractBaseUser, bot_id: object) -> Bot:
    bot = bot_get_for_user(user=user, bot_id=bot_id)
    if not bot_can_edit(user=user, bot=bot):
        raise PermissionDenied("Only the bot's owner or staff can change it.")
    return bot


def session_list_for_user(
    *, user: AbstractBaseUser, bot_id: object | None = None
) -> QuerySet[ChatSession]:
    # A chat an import job is still writing (linked to it: ``import_job_link``, the transfer
    # app's row, read by relation, so no import of it) is listed, and found by its id
    # (``session_get_for_user``, ``message_get_for_user``), once the job is done: acted on
    # before, a send or an edit in it was lost with the import if the file then failed.
    sessions = _scoped(
        ChatSession.objects.filter(user=user, import_job_link__isnull=True).select_related("bot"),
        user,
        "bot_id",
    )
    if bot_id not in (None, ""):
        try:
            sessions = sessions.filter(bot_id=_as_id(bot_id))
        except NotFound:
            return sessions.none()
    return sessions


def session_get_for_user(*, user: AbstractBaseUser, session_id: object) -> ChatSession:
    pk = _as_id(session_id)
    if user_bot_scope(user) is None and isinstance(user.pk, int):
        # Every send and socket reads it: compiled once per process (chat_platform/compiled.py).
        rows = _SESSION_WITH_BOT.rows(session_id=pk, user_id=user.pk)
        if not rows:
            raise NotFound("Session not found.")
        session, bot = instances_from(rows[0], ChatSession, Bot)
        session.bot = bot
        return session
    sessions = ChatSession.objects.select_related("bot").filter(
        pk=pk, user=user, import_job_link__isnull=True
    )
    session = _scoped(sessions, user, "bot_id").first()
    if session is None:
        raise NotFound("Session not found.")
    return session


_SESSION_WITH_BOT = CompiledValues(
    # Not a chat an import job is still writing (``session_list_for_user``).
    lambda session_id, user_id: ChatSession.objects.filter(
        pk=session_id, user_id=user_id, import_job_link__isnull=True
    ).values_list(*model_fields(ChatSession), *model_fields(Bot, "bot__"))[:1],
    name="session_with_bot",
)


def _token_user_session(key: str, session_id: int) -> QuerySet:
    user = get_user_model()
    return (
        user.objects.filter(auth_token__key=key)
        .annotate(s=FilteredRelation("chat_sessions", condition=Q(chat_sessions__pk=session_id)))
        .values_list(
            *model_fields(user), *model_fields(ChatSession, "s__"), *model_fields(Bot, "s__bot__")
        )[:1]
    )


_TOKEN_USER_SESSION = CompiledValues(_token_user_session, name="token_user_session")


def token_user_and_session(*, key: str, session_id: object) -> tuple[Any, ChatSession | None]:
    """The user of the API token ``key`` (None: no such token) and that user's session
    ``session_id`` with its bot, as ``session_get_for_user`` reads it (None: they have none of
    that id), in one statement compiled once per process: a websocket's send checks its token
    and reads its chat at once (docs/performance.md "A turn's CPU and latency, seventh pass
    (web)")."""
    rows = _TOKEN_USER_SESSION.rows(key=key, session_id=_as_id(session_id))
    if not rows:
        return None, None
    user, session, bot = instances_from(rows[0], get_user_model(), ChatSession, Bot)
    if session.pk is None:
        return user, None
    session.bot = bot
    return user, session


BOT_UNAVAILABLE = "This chat's bot is no longer available to you."


def bot_usable_in(*, session: ChatSession, bot: Bot | None = None) -> bool:
    """May the session's user still run its bot: they own it, or it is shared, and it was not
    deleted (retired). Checked on every send, compaction and model call, not only when the
    session was made (un-sharing revokes)."""
    bot = bot or session.bot
    return bot.retired_at is None and (bot.owner_id == session.user_id or bot.is_shared)


def session_get_for_use(*, user: AbstractBaseUser, session_id: object) -> ChatSession:
    """``session_get_for_user`` for whatever runs the session's bot (a send, a compaction): the
    transcript stays readable after the bot is un-shared, but it can no longer be run."""
    return session_usable(session_get_for_user(user=user, session_id=session_id))


def session_usable(session: ChatSession) -> ChatSession:
    """``session`` (read by ``session_get_for_user``) if its bot may still be run in it."""
    if not bot_usable_in(session=session):
        raise NotFound(BOT_UNAVAILABLE)
    return session


def message_list(*, session: ChatSession, after_seq: int | None = None) -> QuerySet[Message]:
    messages = Message.objects.filter(session=session).select_related("bot")
    if after_seq is not None:
        messages = messages.filter(seq__gt=after_seq)
    return messages.order_by("seq")


def message_get_for_user(*, user: AbstractBaseUser, message_id: object) -> Message:
    messages = Message.objects.select_related("session").filter(
        pk=_as_id(message_id), session__user=user, session__import_job_link__isnull=True
    )
    message = _scoped(messages, user, "session__bot_id").first()
    if message is None:
        raise NotFound("Message not found.")
    return message


@dataclass(frozen=True)
class RoomSnapshot:
    """A room's participants (removed ones too, with their bots) and its user's name, read once
    for one send or one turn (``room_snapshot_take``)."""

    participants: tuple[SessionParticipant, ...]
    user_name: str


# The attribute of a session instance (and, copied with it, of its seats) holding its snapshot.
_SNAPSHOT = "_room_snapshot"


def room_snapshot_take(session: ChatSession) -> ChatSession:
    """Read a room's participants and its user's name in one statement, kept on ``session``:
    ``participants_of`` and the room view of the one pipeline (``compaction.measure``) then read
    them from there, for ``session`` and every seat made from it (``session_seat`` copies it).

    Only a send and a turn take one, on the session instance they own: a turn builds its bot's
    context, checks it, hands the floor over and reports the meter for the room as it was when
    the turn began (a participant added meanwhile answers from the next message on, as it
    would have anyway). No-op for a one-bot session or one already taken. Returns ``session``."""
    if not session.is_room or getattr(session, _SNAPSHOT, None) is not None:
        return session
    username = f"session__user__{get_user_model().USERNAME_FIELD}"
    rows = list(
        SessionParticipant.objects.filter(session=session)
        .select_related("bot")
        .annotate(room_user_name=F(username))
        .order_by("id")
    )
    if rows:
        user_name = rows[0].room_user_name if session.user_id else "User"
    else:
        user_name = session.user.get_username() if session.user_id else "User"
    setattr(session, _SNAPSHOT, RoomSnapshot(participants=tuple(rows), user_name=user_name))
    return session


def room_snapshot_carry(*, source: ChatSession, target: ChatSession) -> ChatSession:
    """``target`` (the same session re-read, e.g. for its moving totals) keeps the snapshot
    ``source`` took, if any: a compaction run reads its room's participants and user name once
    (``compaction.engine.common.session_fresh`` re-reads the session before every pass), as a
    turn does. Returns ``target``."""
    snapshot: RoomSnapshot | None = getattr(source, _SNAPSHOT, None)
    if snapshot is not None and target.is_room and getattr(target, _SNAPSHOT, None) is None:
        setattr(target, _SNAPSHOT, snapshot)
    return target


def room_user_name(session: ChatSession) -> str:
    """How the room names its user to the bots (from the snapshot when one was taken)."""
    snapshot: RoomSnapshot | None = getattr(session, _SNAPSHOT, None)
    if snapshot is not None:
        return snapshot.user_name
    return session.user.get_username() if session.user_id else "User"


def participants_of(
    *, session: ChatSession, include_removed: bool = False
) -> list[SessionParticipant]:
    """The session's participants in the order they joined, with their bots. A session written
    without participant rows (made before rooms, or by a fixture) has its bot as its one
    default participant (an unsaved row). Read from the session's snapshot when its send or
    turn took one (``room_snapshot_take``)."""
    snapshot: RoomSnapshot | None = getattr(session, _SNAPSHOT, None)
    rows = (
        list(snapshot.participants)
        if snapshot is not None
        else list(
            SessionParticipant.objects.filter(session=session).select_related("bot").order_by("id")
        )
    )
    if not rows:
        rows = [SessionParticipant(session=session, bot=session.bot, is_default=True)]
    return [p for p in rows if include_removed or p.removed_at is None]


def participant_seat(*, session: ChatSession, bot_id: int) -> SessionParticipant | None:
    """The bot's participation in the session (removed or not), None if it never took part."""
    return next(
        (p for p in participants_of(session=session, include_removed=True) if p.bot_id == bot_id),
        None,
    )


def session_seat(session: ChatSession, bot: Bot) -> ChatSession:
    """The session as ``bot`` sits in it: the same row with ``bot`` as its bot, so everything
    downstream (the one pipeline's budget, system prompt, thresholds, memory index; the model
    config; the compaction model) is that bot's. The session itself is left as it was; the seat
    is never saved (its writes are conditional updates of named fields, like every turn's)."""
    if bot.pk == session.bot_id:
        return session
    seat = copy.copy(session)
    seat._state = copy.copy(session._state)
    seat._state.fields_cache = dict(session._state.fields_cache)
    seat.bot = bot
    return seat


# A compaction re-reads its session with its bot several times a pass (its totals move as it
# works): compiled once per process (docs/performance.md, "The tool task, eighth pass").
_SESSION_BY_ID = CompiledValues(
    lambda session_id: ChatSession.objects.filter(pk=session_id).values_list(
        *model_fields(ChatSession), *model_fields(Bot, "bot__")
    )[:1],
    name="session_with_bot_by_id",
)


def session_with_bot(session_id: int) -> ChatSession | None:
    """The session with its bot, as ``select_related("bot")`` reads it; None when it is gone."""
    rows = _SESSION_BY_ID.rows(session_id=session_id)
    if not rows:
        return None
    session, bot = instances_from(rows[0], ChatSession, Bot)
    session.bot = bot
    return session


def session_seat_read(*, session_id: int, bot_id: int | None) -> ChatSession:
    """The session, with its bot, as the bot ``bot_id`` sits in it (``session_seat``): in a
    room, a record or compaction of another seat than the default's is that seat's. One read
    more only when the bot is not the session's."""
    session = session_with_bot(session_id)
    if session is None:
        raise ChatSession.DoesNotExist("ChatSession matching query does not exist.")
    if not session.is_room or bot_id is None or bot_id == session.bot_id:
        return session
    return session_seat(session, Bot.objects.get(pk=bot_id))


def session_seat_get(
    *, user: AbstractBaseUser, session: ChatSession, bot_id: object
) -> ChatSession:
    """``?bot=`` (docs/rooms.md): the session from that participant's seat (a removed one's too:
    its view stays readable); none given, the session as it is (its default bot). A bot that
    never took part is not found, whoever it belongs to, and so is one outside the bots the
    request's API key is limited to (``user_bot_scope``): its seat holds its bot-scoped records
    from its other chats, its context and its compactions."""
    if bot_id in (None, ""):
        return session
    number = _as_id(bot_id)
    scope = user_bot_scope(user)
    seat = (
        None
        if scope is not None and number not in scope
        else participant_seat(session=session, bot_id=number)
    )
    if seat is None:
        raise NotFound("This bot is not in the chat.")
    return session_seat(session, seat.bot)


def reply_running_over(*, session_id: int, first_seq: int, last_seq: int) -> int | None:
    """The unfinished reply of the session whose own messages (its tool and recall rounds,
    stored between the message it answers and itself: docs/tools.md) the span
    ``first_seq``–``last_seq`` reaches into, if any; its id."""
    unfinished = (Message.Status.PENDING, Message.Status.STREAMING)
    rows = (
        Message.objects.filter(
            session_id=session_id, role=Message.Role.ASSISTANT, status__in=unfinished
        )
        .order_by("seq")
        .values_list("pk", "seq", "reply_to__seq")
    )
    for pk, seq, asked in rows:
        if asked is not None and first_seq < seq and last_seq > asked:
            return pk
    return None


def _watched_sql() -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(c) for c in ("id", "stop_requested", "status"))
    # Identifiers from the model, the ids a bound array: nothing here comes from a user.
    table = quote(Message._meta.db_table)
    return f"SELECT {columns} FROM {table} WHERE {quote('id')} = ANY(%s::bigint[])"  # noqa: S608


_watched: list[str] = []  # the statement, built once per process (PostgreSQL)


def replies_watched(message_ids: list[int]) -> list[tuple[int, bool, str]]:
    """(id, stop_requested, status) of the replies a process's turn watcher watches, read every
    half second while turns run (``turns.liveness``). On PostgreSQL one statement built once per
    process, the ids bound as one array: Django built ``pk IN (…)`` anew at every tick, its
    length changing with the turns (docs/performance.md "A turn's CPU, eighth pass")."""
    if connection.vendor != "postgresql" or not fast_paths():
        return [
            (pk, stop, status)
            for pk, stop, status in Message.objects.filter(pk__in=message_ids).values_list(
                "pk", "stop_requested", "status"
            )
        ]
    if not _watched:
        _watched.append(_watched_sql())
    with connection.cursor() as cursor:
        cursor.execute(_watched[0], [list(message_ids)])
        return [(int(pk), bool(stop), str(status)) for pk, stop, status in cursor.fetchall()]
