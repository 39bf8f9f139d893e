"""Branches: edit a sent message or regenerate a reply without losing what was there.

A branch is a chat of its own (``ChatSession.branch_of`` / ``branch_seq``) that starts as a copy
of the original's messages before the branch point, with the summaries and snapshots that cover
only those messages and the chat's notes; from the branch point on it has its own messages. So
everything that follows a chat — the context, the running totals, compaction, memory, search —
follows the branch being continued, through the one pipeline, and a summary of messages the
branch does not have is never shown on it. The original stays as it was: the user flips between
the versions of the message at the branch point (‹ 1/2 ›) and may continue any of them.

The versions of the message at seq ``k`` of a chat are those of the chat where that message was
first written (its *origin* at ``k``: the chat itself, or the ancestor it copied the message from)
and of that origin's branches at ``k``; a new branch at ``k`` is made a branch of that origin, so
all versions of one message are siblings.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from bots import bulk, transitions
from bots.models import ChatSession, Message, SessionParticipant
from bots.queries import (
    message_get_for_user,
    session_get_for_use,
    session_get_for_user,
    user_scope_subject,
)
from chat_platform.errors import NotFound, ValidationFailed
from compaction.engine.coverage import summaries_copy_prefix
from connections import usage
from memory.services import records_copy_prefix
from turns.services.content import COMPACT_COMMAND, check_message_content
from turns.services.send import SendResult, reply_again_open, session_message_send

log = structlog.get_logger(__name__)

STILL_WRITING = (
    "A reply in this chat is still being written. Stop it or wait for it to finish, then "
    "edit or regenerate."
)


@dataclass
class BranchResult:
    session: ChatSession
    send: SendResult


def branch_origin(session: ChatSession, seq: int) -> ChatSession:
    """The chat whose branches hold the versions of the message at ``seq`` of ``session``: the
    oldest chat on its line that has that seq as its own (not copied, not a branch point)."""
    origin = session
    while origin.branch_seq is not None and seq <= origin.branch_seq and origin.branch_of_id:
        parent = ChatSession.objects.filter(pk=origin.branch_of_id).first()
        if parent is None:  # the original was deleted: this chat is the oldest version left
            break
        origin = parent
    return origin


def _check_idle(session: ChatSession) -> None:
    if transitions.reply_running_first(session_id=session.pk) is not None:
        raise ValidationFailed(STILL_WRITING, details={"message": [STILL_WRITING]})


def do_branch_create(*, session: ChatSession, at_seq: int) -> ChatSession:
    """A new chat holding ``session``'s messages before ``at_seq`` (and what covers only them),
    made a branch of the origin of the message at ``at_seq``."""
    origin = branch_origin(session, at_seq)
    # The chat (and the one the branch hangs off) locked first: a delete that got there before
    # has taken its row (not found, nothing written); one that comes after waits for the branch
    # (``chats_delete`` locks the rows it deletes). On SQLite the write lock is the
    # transaction's own.
    locked = set(
        ChatSession.objects.select_for_update()
        .filter(pk__in={session.pk, origin.pk})
        .values_list("pk", flat=True)
    )
    if session.pk not in locked:
        raise NotFound("Session not found.")
    if origin.pk not in locked:  # the original went: the oldest version left is the origin
        origin = branch_origin(session, at_seq)
    branch = ChatSession.objects.create(
        user=session.user,
        bot=session.bot,
        title=session.title,
        branch_of=origin,
        branch_seq=at_seq,
        reply_mode=session.reply_mode,
        is_room=session.is_room,
        # The chat's own settings go with it: the branch's reply ran without them.
        extra_instruction=session.extra_instruction,
        model_override=session.model_override,
    )
    do_branch_copy(session=session, branch=branch, at_seq=at_seq)
    return branch


def do_branch_copy(*, session: ChatSession, branch: ChatSession, at_seq: int) -> None:
    """Fill the new, empty chat ``branch`` with ``session`` before ``at_seq``: its participants,
    the messages, the summaries and snapshots that cover only those (with the snapshots' search
    index), the chat's notes and the running totals. Also how the OpenAI-compatible API forks a
    conversation a client edited."""
    # A room's branch is the same room: its participants as they stand.
    SessionParticipant.objects.bulk_create(
        [
            SessionParticipant(
                session=branch,
                bot_id=p.bot_id,
                joined_seq=min(p.joined_seq, at_seq - 1),
                sees_from_join=p.sees_from_join,
                is_default=p.is_default,
                removed_at=p.removed_at,
            )
            for p in SessionParticipant.objects.filter(session=session)
        ]
    )
    bulk.messages_copy_prefix(source_id=session.pk, target=branch, before_seq=at_seq)
    summaries_copy_prefix(source=session, target=branch, before_seq=at_seq)
    # The copies of compacted messages are indexed with their snapshot's copy (recall in the
    # branch), the rest as live history, with their originals' terms and vectors: search across
    # the user's chats leaves a branch's copies out while the original holds them (a hit is
    # listed once), and finds them in the branch once the original is deleted.
    records_copy_prefix(source=session, target=branch, before_seq=at_seq)
    tokens, messages = transitions.session_context_recount(session_id=branch.pk)
    branch.context_tokens, branch.context_messages = tokens, messages


@dataclass
class ImportedBranchMessages:
    """One other branch of an imported conversation: it continues ``session`` after
    ``fork_seq`` with ``messages`` (unsaved, seqs from ``fork_seq + 1``), each answering the
    message at its ``reply_to_seqs`` entry (or none)."""

    fork_seq: int
    messages: list[Message]
    reply_to_seqs: list[int | None]


def do_branches_import(
    *, session: ChatSession, branches: list[ImportedBranchMessages]
) -> list[Message]:
    """An import's other branches of ``session`` as branch chats, each a version of the message
    at its fork (‹ i/n ›), as an edit's would be: the chats in one insert, their shared prefixes
    copied inside the database in one INSERT … SELECT (``bulk.messages_copy_prefixes``),
    their own messages in one batched insert with the running totals
    (``bulk.branches_messages_import``): a fixed number of statements per conversation,
    however many branches it has, and no prefix text through Python. Just imported, ``session``
    has no summaries, snapshots, notes or participants yet (an import is never a room), so
    nothing else is copied. Returns the branches' own messages, written."""
    if not branches:
        return []
    chats = ChatSession.objects.bulk_create(
        [
            ChatSession(
                user_id=session.user_id,
                bot_id=session.bot_id,
                title=session.title,
                branch_of=session,
                branch_seq=branch.fork_seq + 1,
                reply_mode=session.reply_mode,
                is_room=session.is_room,
            )
            for branch in branches
        ]
    )
    bulk.messages_copy_prefixes(
        source_id=session.pk,
        targets=[
            (chat.pk, branch.fork_seq + 1) for chat, branch in zip(chats, branches, strict=True)
        ],
    )
    messages, reply_to = [], []
    for chat, branch in zip(chats, branches, strict=True):
        for message in branch.messages:
            message.session = chat
        messages += branch.messages
        reply_to += branch.reply_to_seqs
    return bulk.branches_messages_import(messages=messages, reply_to_seqs=reply_to)


def message_edit(
    *,
    user: AbstractBaseUser,
    message_id: object,
    content: object,
    quota: Sequence[usage.Limit] = (),
) -> BranchResult:
    """Edit a sent message: a branch with the messages before it, then the new text sent there
    (answered through the one pipeline). The original message and its reply stay, as the other
    version. ``quota``: as for ``session_message_send`` (an API key's limits: a spent one
    refuses the edit before the branch is made, and the new reply is charged to the key)."""
    message = message_get_for_user(user=user, message_id=message_id)
    if message.role != Message.Role.USER or message.kind != Message.Kind.CHAT:
        raise ValidationFailed(details={"message": ["Only a message you sent can be edited."]})
    text, _ = check_message_content(content=content)
    if COMPACT_COMMAND.match(text.strip()):
        raise ValidationFailed(
            details={"content": ["An edit cannot be a command: send /compact as a new message."]}
        )
    session = session_get_for_use(user=user, session_id=message.session_id)
    _check_idle(session)
    _check_quota(user=user, quota=quota)
    with transaction.atomic():
        branch = do_branch_create(session=session, at_seq=message.seq)
    log.info("message_edited", session_id=session.pk, branch_id=branch.pk, seq=message.seq)
    sent = session_message_send(user=user, session_id=branch.pk, content=text, quota=quota)
    return BranchResult(session=branch, send=sent)


def _check_quota(*, user: AbstractBaseUser, quota: Sequence[usage.Limit]) -> None:
    """A spent daily limit (the user's, or the API key's in ``quota``) refuses a new reply
    before its branch is stored, as a send is refused (docs/connections.md "Daily token
    limits")."""
    limits = [*usage.user_limits(user.pk), *quota]
    if limits:
        usage.quota_check(limits)


def reply_regenerate(
    *, user: AbstractBaseUser, message_id: object, quota: Sequence[usage.Limit] = ()
) -> BranchResult:
    """Regenerate a reply: a branch with everything up to the message it answered, and a new
    pending reply there (the turn runs as for any message). The old reply stays as the other
    version. ``quota``: an API key's limits (see ``message_edit``)."""
    reply = message_get_for_user(user=user, message_id=message_id)
    if reply.role != Message.Role.ASSISTANT or reply.kind != Message.Kind.CHAT:
        raise ValidationFailed(details={"message": ["Only a reply can be regenerated."]})
    # The message it answers: its own (the first reply), or, for a later bot's reply in a room,
    # the user message that prompted them all.
    question_id = reply.reply_to_id or reply.prompted_by_id
    if question_id is None:
        raise ValidationFailed(details={"message": ["This reply answers no message."]})
    question = Message.objects.get(pk=question_id)
    session = session_get_for_use(user=user, session_id=reply.session_id)
    _check_idle(session)
    _check_quota(user=user, quota=quota)
    # The branch starts where the reply did: right after the question for the first reply (its
    # own lookups are not carried), at the reply for a later bot's (the replies before it stay
    # in view, as they were when it answered).
    at_seq = question.seq + 1 if reply.reply_to_id else reply.seq
    with transaction.atomic():
        branch = do_branch_create(session=session, at_seq=at_seq)
        copied = Message.objects.get(session=branch, seq=question.seq)
        result = reply_again_open(
            session=branch,
            user_message=copied,
            bot=reply.bot,
            quota=quota,
            scope=user_scope_subject(user),
        )
    pending = result.assistant_message
    assert pending is not None
    log.info("reply_regenerated", session_id=session.pk, branch_id=branch.pk, seq=pending.seq)
    return BranchResult(session=branch, send=result)


@dataclass
class BranchPoint:
    seq: int
    versions: list[int] = field(default_factory=list)  # chat ids, oldest first
    current: int = 0  # index in ``versions`` of the version this chat continues

    def as_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "versions": self.versions, "current": self.current}


def session_branch_points(*, user: AbstractBaseUser, session_id: object) -> list[BranchPoint]:
    """Where this chat's messages have other versions: for each such seq, the chats holding
    each version (oldest first) and which one this chat continues. Reads one chat row per
    ancestor and one query per ancestor for its branches."""
    session = session_get_for_user(user=user, session_id=session_id)
    points: dict[int, BranchPoint] = {}
    current = session
    limit: int | None = None  # seqs this far up the chain are what the chat copied
    line = session.pk  # the version on this chat's line, at the level being read
    while True:
        branches = ChatSession.objects.filter(branch_of=current, user=session.user)
        if limit is not None:
            branches = branches.filter(branch_seq__lte=limit)
        by_seq: dict[int, list[int]] = {}
        for pk, seq in branches.order_by("created_at", "pk").values_list("pk", "branch_seq"):
            by_seq.setdefault(seq, []).append(pk)
        for seq, ids in by_seq.items():
            if seq in points:
                continue
            versions = [current.pk, *ids]
            chosen = line if line in versions else current.pk
            points[seq] = BranchPoint(seq=seq, versions=versions, current=versions.index(chosen))
        if current.branch_of_id is None or current.branch_seq is None:
            break
        parent = ChatSession.objects.filter(pk=current.branch_of_id, user=session.user).first()
        if parent is None:
            break
        limit = current.branch_seq if limit is None else min(limit, current.branch_seq)
        line = current.pk
        current = parent
    return [points[seq] for seq in sorted(points)]
