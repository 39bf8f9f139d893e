"""A ChatGPT ``conversations.json``: each conversation's transcript (root to ``current_node``)
becomes a chat, each other branch of its tree a branch chat at its fork (docs/transfer.md)."""

import hashlib
from collections.abc import Iterator
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.utils import timezone

from attachments.queries import image_tokens_named
from bots.models import Bot, ChatSession, Message
from chat_platform.llm.tokens import count_message_tokens
from memory.services import messages_index_copy, messages_index_written
from transfer.chatgpt import Conversation, Turn, conversation_parse
from transfer.models import ImportedBranch, ImportedConversation
from transfer.services.common import (
    ChatsMade,
    ImportResult,
    MessageWriter,
    digest_claim,
    digest_update,
    session_finish,
    skipped_entry,
)
from transfer.streaming import refused
from turns.services.branch import ImportedBranchMessages, do_branches_import


def chatgpt_import(
    *, user: AbstractBaseUser, bot: Bot, stream: Any, made: ChatsMade
) -> ImportResult:
    """Each conversation is read, checked and hashed, then written in a transaction of its own
    (docs/transfer.md, "Written in steps"): SQLite's one write lock is held for the writing
    alone."""
    result = ImportResult(format="chatgpt")
    any_item = False
    for item in stream:
        any_item = True
        conversation = conversation_parse(item.value, f"conversations[{item.index}]")
        hasher = hashlib.sha256()
        digest_update(hasher, item.value)
        with made.step():
            _conversation_write(
                user=user,
                bot=bot,
                conversation=conversation,
                digest=hasher.hexdigest(),
                made=made,
                result=result,
            )
    if not any_item:
        raise refused("The file holds an empty list: no conversations to import.")
    return result


def _conversation_write(
    *,
    user: AbstractBaseUser,
    bot: Bot,
    conversation: Conversation,
    digest: str,
    made: ChatsMade,
    result: ImportResult,
) -> None:
    done = ImportedConversation.objects.filter(user=user, digest=digest).select_related("session")
    seen = done.first()
    if seen is not None:
        result.skipped.append(skipped_entry(conversation.title, seen))
        return
    session = _chatgpt_session(user=user, bot=bot, conversation=conversation, made=made)
    clash = digest_claim(
        user=user,
        session=session,
        source=ImportedConversation.Source.CHATGPT,
        digest=digest,
        source_id=conversation.source_id,
    )
    if clash is not None:
        session.delete()
        result.skipped.append(skipped_entry(conversation.title, clash))
        return
    _chatgpt_branches(session=session, bot=bot, conversation=conversation, made=made)
    result.imported.append(
        {
            "session": session.pk,
            "title": session.title,
            "messages": len(conversation.transcript),
            "branches": len(conversation.branches),
            "skipped_nodes": conversation.skipped,
        }
    )


def _chatgpt_session(
    *, user: AbstractBaseUser, bot: Bot, conversation: Conversation, made: ChatsMade
) -> ChatSession:
    first_time = conversation.created_at or (
        conversation.transcript[0].created_at if conversation.transcript else None
    )
    session = made.session_new(user=user, bot=bot, title=conversation.title, created_at=first_time)
    writer = MessageWriter(session, embed=made.embed)
    for message, reply_to in _chatgpt_messages(
        bot=bot,
        turns=conversation.transcript,
        first_seq=1,
        previous_user_seq=None,
        default_time=first_time or timezone.now(),
    ):
        message.session = session
        writer.add(message, reply_to)
    writer.flush()
    ImportedBranch.objects.bulk_create(
        [
            ImportedBranch(
                session=session,
                position=position,
                fork_seq=branch.fork_seq,
                messages=[
                    {
                        "role": t.role,
                        "kind": "chat",
                        "content": t.content,
                        "created_at": t.created_at.isoformat().replace("+00:00", "Z")
                        if t.created_at
                        else None,
                        "model": t.model,
                        "pinned": t.pinned,
                        "source_id": t.source_id,
                    }
                    for t in branch.turns
                ],
            )
            for position, branch in enumerate(conversation.branches, start=1)
        ]
    )
    session_finish(session)
    return session


def _chatgpt_messages(
    *, bot: Bot, turns: list[Turn], first_seq: int, previous_user_seq: int | None, default_time: Any
) -> Iterator[tuple[Message, int | None]]:
    """``turns`` as unsaved messages at seqs from ``first_seq`` on, each with the seq of the
    message it answers (a reply answers the user message just before it: ``previous_user_seq``
    for the first one)."""
    stamp = default_time
    for seq, turn in enumerate(turns, start=first_seq):
        stamp = turn.created_at or stamp
        message = Message(
            seq=seq,
            role=turn.role,
            kind=Message.Kind.CHAT,
            content=turn.content,
            status=Message.Status.COMPLETE,
            token_count=count_message_tokens(turn.content, model=bot.model)
            + (image_tokens_named(turn.content) if turn.role == "user" else 0),
            pinned=turn.pinned,
            model=turn.model,
            finish_reason="stop" if turn.role == "assistant" else "",
            created_at=stamp,
            updated_at=stamp,
        )
        yield message, previous_user_seq if turn.role == "assistant" else None
        previous_user_seq = seq if turn.role == "user" else None


def _chatgpt_branches(
    *, session: ChatSession, bot: Bot, conversation: Conversation, made: ChatsMade
) -> None:
    """Each other branch of the tree as a branch chat of ``session`` (a version ‹ i/n › of the
    message where it leaves the transcript, flipped to and continued like an edit's), written in
    bulk (``do_branches_import``: the shared prefixes copied inside the database, the branches'
    own messages in one batched insert), indexed for search as an edit's branch is (their own
    messages, and their copies of the prefix as the original's rows: found in the branch once
    the original is deleted, ``docs/transfer.md``); a branch compacts when it is
    continued, like any chat, so the import's background work stays one compaction per
    conversation. The branches also stay in ``ImportedBranch``, which the lossless export
    carries."""
    if not conversation.branches:
        return
    by_seq = dict(enumerate(conversation.transcript, start=1))
    branches = []
    for branch in conversation.branches:
        fork = by_seq.get(branch.fork_seq)
        written = list(
            _chatgpt_messages(
                bot=bot,
                turns=branch.turns,
                first_seq=branch.fork_seq + 1,
                previous_user_seq=branch.fork_seq if fork and fork.role == "user" else None,
                default_time=(fork.created_at if fork else None)
                or session.created_at
                or timezone.now(),
            )
        )
        branches.append(
            ImportedBranchMessages(
                fork_seq=branch.fork_seq,
                messages=[m for m, _ in written],
                reply_to_seqs=[r for _, r in written],
            )
        )
    own = do_branches_import(session=session, branches=branches)
    messages_index_written(message_ids=[m.pk for m in own], embed=made.embed)
    starts: dict[int, int] = {}  # each branch chat's first own seq, where its copies end
    for message in own:
        starts[message.session_id] = min(message.seq, starts.get(message.session_id, message.seq))
    made.adopt(list(ChatSession.objects.filter(branch_of=session).values_list("pk", flat=True)))
    messages_index_copy(source_id=session.pk, targets=list(starts.items()))
