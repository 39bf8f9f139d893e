"""Import: a file of chats (the lossless JSON of one chat, or ChatGPT's ``conversations.json``)
becomes sessions of the signed-in user with one bot.

Read, then write, in steps: a conversation of a ChatGPT file, or a few hundred items of a
lossless one, is read and checked, then written in a transaction of its own (docs/transfer.md,
"Written in steps": in embedded mode SQLite has one write lock, which a file written as one
transaction held for minutes). A file refused anywhere (bad JSON, a wrong type in its last
message, nesting too deep) still leaves nothing behind: the chats its earlier steps wrote are
deleted (``ChatsMade.undo``; under a job, the worker deletes what a stopped child could not).
The file is read as a stream (``transfer.streaming``), one conversation or one message at a
time. Written history is token-counted with the bot's model, written through
``bots.transitions.messages_import``, indexed for search at once
(``memory.services.messages_index_written``). The import job (``transfer.services.jobs``) runs
this in a limited child process and, once it has committed, gives each new session a soft
compaction (``turns.dispatch.compact_soft_dispatch``) so the bot carries what it can of it.

Re-importing is idempotent: every conversation's digest (sha256 of its canonical JSON, ids left
out; of a ChatGPT conversation, the keys the import reads, ``CONVERSATION_KEYS``) is recorded
with its session (``ImportedConversation``); one seen before, whose session still exists, is
skipped and reported.
"""

from collections.abc import Callable
from typing import IO

import structlog
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser

from bots.queries import bot_get_for_user
from chat_platform.errors import NotFound, PayloadTooLarge
from transfer.chatgpt import CONVERSATION_KEYS
from transfer.services.chatgpt_import import chatgpt_import
from transfer.services.common import ChatsMade, ImportResult
from transfer.services.lossless_import import lossless_import
from transfer.streaming import CountingReader, items, top_level_kind

log = structlog.get_logger(__name__)


def check_import_size(*, size: int | None) -> None:
    """A file (or a request claiming a size) over ``IMPORT_MAX_BYTES`` is refused unread."""
    limit = settings.IMPORT_MAX_BYTES
    if size is not None and size > limit:
        raise PayloadTooLarge(
            f"The file is {size:,} bytes; imports take at most {limit:,} bytes.",
            details={"file": [f"At most {limit:,} bytes."], "max_bytes": limit, "size": size},
        )


def chats_import(
    *,
    user: AbstractBaseUser,
    bot_id: object,
    raw: IO[bytes],
    size: int | None,
    on_progress: Callable[[int], None] | None = None,
    job_id: int | None = None,
) -> ImportResult:
    """Import one file for ``user`` into chats with the bot ``bot_id`` (one they may use); the
    chats are linked to the import job ``job_id`` while it runs (``ChatsMade``)."""
    check_import_size(size=size)
    bot = bot_get_for_user(user=user, bot_id=bot_id)
    if bot.owner_id != user.pk and not bot.is_shared:  # pragma: no cover - the selector's rule
        raise NotFound("Bot not found.")
    reader = CountingReader(raw, on_progress=on_progress)
    made = ChatsMade(job_id=job_id)
    try:
        kind, events = top_level_kind(reader)
        # A conversation's keys that the import does not read are skipped as they stream by,
        # never built (a conversation carrying a huge unused object costs no memory).
        keep = CONVERSATION_KEYS if kind == "array" else None
        stream = items(kind, events, reader, max_depth=settings.IMPORT_MAX_DEPTH, keep=keep)
        if kind == "array":
            result = chatgpt_import(user=user, bot=bot, stream=stream, made=made)
        else:
            result = lossless_import(user=user, bot=bot, stream=stream, made=made)
    except BaseException:
        made.undo()
        raise
    log.info(
        "chats_imported",
        user_id=user.pk,
        format=result.format,
        imported=len(result.imported),
        skipped=len(result.skipped),
        bytes=reader.done,
    )
    return result
