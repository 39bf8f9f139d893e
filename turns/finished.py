"""The "turn finished" notifier: what a turn does once its reply's final write is committed.

The search index (the reply and the message it answers), the context record, the completion
listeners, a room's hand-over, the context gauge, the hand-over to the session's next queued
reply and the soft compaction. All of it is bookkeeping after the reply is shown: a step that
fails is logged with its traceback (one envelope, ``envelope``) and never changes how the reply
ended, and the next step still runs. The turn calls the steps in the order it always did
(docs/chat-turn.md): the index right after the final write, the record after the
``message.completed`` frame, the gauge, then the hand-over and the soft compaction last.

The turn runs in autocommit (it holds no transaction while it streams), so each step runs once
the final write is committed; the frames a step sends keep their own ``on_commit``.
"""

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
from django.db import transaction

from bots import realtime
from bots.models import Bot, ChatSession, Message
from bots.queries import bot_usable_in, participants_of, session_seat
from bots.transitions import reply_handover_create, room_notice_create
from chat_platform import realtime as transport
from compaction.pipeline import (
    context_bot,
    context_report,
    context_state,
    seat_key,
    soft_compaction_due,
)
from compaction.records import context_record_write
from memory.services import messages_index_written
from turns import dispatch
from turns import hooks as turn_hooks
from turns.room import handovers

log = structlog.get_logger(__name__)


@contextlib.contextmanager
def envelope(event: str, **ids: Any) -> Iterator[None]:
    """The one failure envelope of a turn's bookkeeping: a failure inside is logged as
    ``event`` (with ``ids`` and its traceback) and goes no further."""
    try:
        yield
    except Exception:
        if chat_deleted(**ids):  # the user deleted the chat while its reply ran: nothing to keep
            log.info("turn_step_skipped_chat_deleted", step=event, **ids)
        else:
            log.exception(event, **ids)


def chat_deleted(**ids: Any) -> bool:
    """Whether the session (or the reply) a failed step names is gone. A database that does
    not answer is not a deleted chat: the step's own error is then the one to log."""
    try:
        if "session_id" in ids:
            return not ChatSession.objects.filter(pk=ids["session_id"]).exists()
        if "message_id" in ids:
            return not Message.objects.filter(pk=ids["message_id"]).exists()
    except Exception:  # the database itself failed: the step's own error is the one to log
        return False
    return False


def search_index(message: Message) -> None:
    """The reply and the message it answers become searchable across the user's chats at once
    (after the frames: nobody waits for it). Search is never worth a turn: compaction indexes
    the messages later anyway."""
    with envelope("turn_search_index_failed", message_id=message.pk):
        messages_index_written(
            message_ids=[m for m in (message.reply_to_id, message.pk) if m], here=True
        )


@dataclass
class TurnFinished:
    """One turn's notifier, filled while the turn runs, its steps called as the turn ends."""

    reply: Message
    # The turn's model calls as its context record keeps them (``turns.stream.call_entry``),
    # written once when the turn ends, however it ends (``context_record``).
    calls: list[dict[str, Any]] = field(default_factory=list)
    recorded: bool = False
    bot_id: int | None = None
    prompt: str = ""
    # The soft compaction this turn found due (``compact_soft_dispatch``'s arguments), handed
    # to the queue after the session's next reply (``hand_over``), never before it.
    soft_compaction: tuple[int, ...] | None = None
    # The limits of the API key the turn came through (``TurnOptions.quota``): its soft
    # compaction is charged to them too.
    quota: tuple[Any, ...] = ()
    # The bots that key is limited to (``TurnOptions.bots``): the only ones handed the floor.
    bots: frozenset[int] | None = None

    def context_record(self) -> None:
        """Write the turn's context record (once; nothing if it made no call)."""
        if self.recorded or not self.calls:
            return
        self.recorded = True
        with envelope("turn_context_record_failed", message_id=self.reply.pk):
            context_record_write(
                reply=self.reply, bot_id=self.bot_id, calls=self.calls, prompt=self.prompt
            )

    def completed(
        self, finished: Message | None, *, session: ChatSession, speaker: Bot, text: str
    ) -> None:
        """A completed reply, after its ``message.completed`` frame and the REST waiters: the
        record's INSERT is never on the way to the user's reply (read on demand, it is there a
        moment later), then the completion listeners and a room's hand-over."""
        self.context_record()
        if finished is None:
            return
        turn_hooks.notify_completed(finished, user_message=self.reply.reply_to)
        if session.is_room and "@" in text:
            self.room_hand_over(finished, speaker=speaker)

    def room_hand_over(self, reply: Message, *, speaker: Bot) -> None:
        """A bot's finished reply that mentions other participants hands them the floor: a
        pending reply each, after what is queued (``turns.room.handovers`` says who, within the
        bounds); a bound that stopped someone leaves a notice in the transcript."""
        with (
            envelope("room_hand_over_failed", message_id=reply.pk, session_id=reply.session_id),
            transaction.atomic(),
        ):
            _room_hand_over_write(reply, speaker=speaker, scope=self.bots)

    def gauge(
        self, session_id: int, *, bot_id: int | None = None, seat: ChatSession | None = None
    ) -> None:
        """The context report and the soft trigger (``context_notify``); the meter can wait for
        the next turn."""
        with envelope("turn_context_notify_failed", session_id=session_id):
            context_notify(session_id, bot_id=bot_id, seat=seat, finished=self)

    def hand_over(self, session_id: int) -> None:
        """The reply has ended: a reply queued behind it (a message sent meanwhile) runs now
        (if this cannot, the watchdog hands it over). Then the soft compaction: a reply queued
        behind this one (the next bot of a room's round, a message sent meanwhile) starts
        first. In embedded mode, where tasks run in-process, the compaction then runs after
        that reply instead of before it; on the queue it yields to the session's replies
        (``compaction.services.soft_compaction_yields``)."""
        with envelope("turn_hand_over_failed", session_id=session_id):
            dispatch.turn_dispatch_next(session_id)
        if self.soft_compaction is not None:
            transaction.on_commit(
                partial(dispatch.compact_soft_dispatch, *self.soft_compaction, quota=self.quota)
            )


def _room_hand_over_write(
    reply: Message, *, speaker: Bot, scope: frozenset[int] | None = None
) -> None:
    root_id = reply.prompted_by_id or reply.reply_to_id
    if root_id is None:
        return
    participants = [
        p
        for p in participants_of(session=reply.session)
        if bot_usable_in(session=reply.session, bot=p.bot) and (scope is None or p.bot_id in scope)
    ]
    chain = list(
        Message.objects.filter(
            session_id=reply.session_id, prompted_by_id=root_id, role=Message.Role.ASSISTANT
        ).values_list("bot_id", "status", "hop", "pk")
    )
    waiting = {b for b, status, _, pk in chain if status == Message.Status.PENDING and b}
    answered = {b for b, status, _, pk in chain if status != Message.Status.PENDING and b}
    decided = handovers(
        reply=reply,
        speaker=speaker,
        participants=participants,
        answered_bot_ids=answered | {speaker.pk},
        waiting_bot_ids=waiting,
        hops_so_far=max((hop for _, _, hop, _ in chain), default=0),
        earlier=_earlier_said(reply),
    )
    hop = max((h for _, _, h, _ in chain), default=0)
    for bot in decided.bots:
        hop += 1
        created = reply_handover_create(after=reply, bot=bot, hop=hop, prompted_by_id=root_id)
        transaction.on_commit(partial(realtime.notify_message_created, created))
        log.info("room_hand_over", message_id=created.pk, from_bot=speaker.pk, to_bot=bot.pk)
    if decided.notice is not None:
        notice = room_notice_create(session_id=reply.session_id, content=decided.notice)
        transaction.on_commit(partial(realtime.notify_message_created, notice))
        log.info("room_hand_over_stopped", message_id=reply.pk, notice=decided.notice)


# How far back a reply's sentence is looked for when telling an echoed mention from one that
# hands the floor over (``turns.room.addressed_bots``): the round and the turns before it.
ECHO_WINDOW = 12


def _earlier_said(reply: Message) -> list[str]:
    """What the user and the bots said just before ``reply`` (one statement)."""
    return list(
        Message.objects.filter(
            session_id=reply.session_id,
            seq__lt=reply.seq,
            kind=Message.Kind.CHAT,
            role__in=[Message.Role.USER, Message.Role.ASSISTANT],
        )
        .order_by("-seq")
        .values_list("content", flat=True)[:ECHO_WINDOW]
    )


def context_notify(
    session_id: int,
    *,
    bot_id: int | None = None,
    seat: ChatSession | None = None,
    finished: TurnFinished | None = None,
) -> None:
    """After every turn: the context report (same numbers as the endpoint), and a soft compaction
    on the ``compaction`` queue when pressure reached the soft threshold. The turn never waits.
    In a room both are the answering bot's own (its seat, ``bot_id``). ``seat``: the session as
    the turn that just ended sat in it (its running totals are re-read, ``context_state``).
    ``finished``: the turn's notifier, which then dispatches the soft compaction itself, after
    the session's next reply has started (``TurnFinished.hand_over``)."""
    if seat is not None:
        session = seat
    else:
        session = ChatSession.objects.select_related("bot").get(pk=session_id)
        if session.is_room and bot_id is not None and bot_id != session.bot_id:
            session = session_seat(session, Bot.objects.get(pk=bot_id))
    context = context_state(session=session)
    transport.notify_context_updated(
        session_id, context_report(session=session, state=context), bot=context_bot(session)
    )
    if soft_compaction_due(context):
        key = seat_key(session)
        args = (session_id,) if key is None else (session_id, key)
        if finished is not None:
            finished.soft_compaction = args  # the turn dispatches it after its hand-over
        else:
            transaction.on_commit(partial(dispatch.compact_soft_dispatch, *args))
