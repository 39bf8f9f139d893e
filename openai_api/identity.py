"""Conversation identity: which stored session an OpenAI request continues.

A stateless client resends its whole transcript every call. Each message the client sees (its
user turns, the replies it got, and assistant turns it wrote itself) has a fingerprint, and the
session keeps a **chain** of them (``ChainLink``): the hash at position k covers positions 1..k,
rooted in the user and the bot. A request whose history (everything before its last message)
hashes to a session's newest link extends that session: one indexed lookup, whatever the length
of the history. Anything else is matched by its longest common prefix (a binary search over the
request's own hashes, O(log n) lookups: a prefix of a stored chain is stored too), and gets a
**fork**: a new session holding that prefix (messages, and the summaries and snapshots that cover
only it), never an overwrite. Client ``system`` messages are call parameters, not transcript:
they take no part in the chain.

Links are written when the client's history is stored, and for the call's own message and its
reply once the reply completes (``turn_completed``, in the worker; the view writes them too, so
the client's next call finds them at once). A reply that failed writes none: the client's retry
continues from before it, and the send re-runs the failed reply in place.
"""

import hashlib
import json
from dataclasses import dataclass, field
from json.encoder import encode_basestring as _quoted
from typing import Any

import structlog
from django.db import transaction
from django.db.models import Exists, OuterRef

from bots import bulk
from bots.models import Bot, ChatSession, Message
from bots.queries import session_get_for_use
from chat_platform.errors import ValidationFailed
from chat_platform.llm.tokens import count_message_tokens
from openai_api.client_tools import calls_key
from openai_api.models import ApiKey, ApiSession, ApiTurn, ChainLink
from turns.services.branch import branch_origin, do_branch_copy

log = structlog.get_logger(__name__)


def message_fingerprint(role: str, content: str, extra: str = "") -> str:
    """What identifies one message of a transcript: its role and its text (outer whitespace
    aside: clients trim differently), and ``extra``: an assistant message's tool calls
    (``client_tools.calls_key``) or the id of the call a ``tool`` result answers."""
    # Byte for byte ``json.dumps([role, content, extra?], ensure_ascii=False, separators=(",",
    # ":"))`` (the stored chains hash that), built from the encoder's own C string quoting:
    # json.dumps per message was most of the cost of matching a 1,000-message resend.
    data = f"[{_quoted(role)},{_quoted(content.strip())}"
    data += f",{_quoted(extra)}]" if extra else "]"
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


def chain_root(*, user_id: int, bot_id: int) -> str:
    return hashlib.sha256(f"chat-platform/chain/v1:{user_id}:{bot_id}".encode()).hexdigest()


def chain_next(previous: str, fingerprint: str) -> str:
    return hashlib.sha256(f"{previous}:{fingerprint}".encode()).hexdigest()


def chain_of(root: str, fingerprints: list[str]) -> list[str]:
    hashes, current = [], root
    for fingerprint in fingerprints:
        current = chain_next(current, fingerprint)
        hashes.append(current)
    return hashes


@dataclass(slots=True)
class ClientMessage:
    role: str  # user | assistant | tool
    content: str
    # An assistant message's calls to the client's tools (``client_tools.check_tool_calls``).
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    # A tool result: the call it answers.
    tool_call_id: str = ""
    tool_name: str = ""  # the function a result answers (stored, not fingerprinted)

    @property
    def fingerprint(self) -> str:
        extra = self.tool_call_id if self.role == "tool" else calls_key(self.tool_calls)
        return message_fingerprint(self.role, self.content, extra)


def reply_fingerprint(reply: Message, *, said_before: str = "") -> str:
    """A stored reply as the client sees it: its text and its calls to the client's tools.
    ``said_before``: what the reply's earlier model calls said before their tool calls, which a
    streamed call sends ahead of the reply's own text (``_said_before``)."""
    return message_fingerprint(
        "assistant", said_before + reply.content, calls_key(reply.tool_calls or [])
    )


def _said_before(turn: ApiTurn, reply: Message) -> str:
    """What a streamed call sent before its reply's own text: each earlier model call of the
    reply streams what it says before its tool calls (docs/openai-api.md), and the client
    resends all of it as the assistant's turn. Stored as the text of the tool-call messages this
    run of the reply stored, after ``streamed_after_seq`` (written with the turn) and before the
    reply; a recall request written as text is stored empty, as it is never streamed.
    Empty, with no statement, for an unstreamed call and for a reply without such rounds."""
    after = turn.options.get("streamed_after_seq")
    if after is None or reply.seq <= after + 1:
        return ""
    said = Message.objects.filter(
        session_id=turn.session_id,
        seq__gt=after,
        seq__lt=reply.seq,
        role=Message.Role.ASSISTANT,
        kind=Message.Kind.TOOL,
    ).order_by("seq")
    return "".join(said.values_list("content", flat=True))


@dataclass
class Conversation:
    session: ChatSession
    # Where the chain stands once the request's history is stored: the call's own message and
    # its reply follow from here.
    base_position: int
    base_hash: str
    created: bool = False
    forked_from: int | None = None
    stored_history: list[Message] = field(default_factory=list)


def _links(*, user_id: int, bot_id: int) -> Any:
    return ChainLink.objects.filter(session__user_id=user_id, session__bot_id=bot_id)


def _tip_link(session: ChatSession) -> ChainLink | None:
    return ChainLink.objects.filter(session=session).order_by("-position").first()


def _find_tip(*, user_id: int, bot_id: int, chain_hash: str, content: str) -> ChainLink | None:
    """The session whose newest link is ``chain_hash`` (the newest such session if several),
    with ``moved_on``: another call's question other than ``content`` was asked in it after
    that link (its exchange still running, or ended without a link) — this call continues the
    conversation from before it, and forks there (two calls sent at once from one history, each
    its own continuation, went into one session, each request carrying the other's question).
    A question typed on the chat page is no call's: the client's resend continues the chat
    (docs/openai-api.md; it forked, leaving the page's turn behind)."""
    later = ChainLink.objects.filter(session=OuterRef("session"), position__gt=OuterRef("position"))
    asked_since = (
        Message.objects.filter(
            session=OuterRef("session"),
            seq__gt=OuterRef("message__seq"),
            role=Message.Role.USER,
            kind=Message.Kind.CHAT,
            client_id__startswith=API_CLIENT_ID_PREFIX,
        )
        .exclude(content=content)
        .order_by()
    )
    return (
        _links(user_id=user_id, bot_id=bot_id)
        .filter(chain_hash=chain_hash)
        .filter(~Exists(later))
        .annotate(moved_on=Exists(asked_since))
        .select_related("session", "session__bot")
        .order_by("-session__updated_at", "-session_id")
        .first()
    )


def _longest_prefix(*, user_id: int, bot_id: int, hashes: list[str]) -> ChainLink | None:
    """The stored link of the longest prefix of ``hashes`` (binary search: a stored chain holds
    every prefix of itself)."""
    links = _links(user_id=user_id, bot_id=bot_id)
    low, high, best = 1, len(hashes), None
    while low <= high:
        middle = (low + high) // 2
        found = (
            links.filter(chain_hash=hashes[middle - 1])
            .select_related("session", "message")
            .order_by("-session__updated_at", "-session_id")
            .first()
        )
        if found is not None:
            best, low = found, middle + 1
        else:
            high = middle - 1
    return best


def history_row(m: ClientMessage, *, model: str, client_id: str = "") -> dict[str, Any]:
    """A client message as ``bulk.history_append`` stores it: a tool result as a
    ``tool`` message (the call's function name with it), calls counted with their text."""
    row: dict[str, Any] = {"role": m.role, "content": m.content, "client_id": client_id}
    counted = m.content
    if m.tool_calls:
        row["tool_calls"] = m.tool_calls
        counted = m.content + json.dumps(m.tool_calls)
    if m.role == "tool":
        row["kind"] = Message.Kind.TOOL
        row["tool_call_id"] = m.tool_call_id
        row["tool_name"] = m.tool_name
    row["token_count"] = count_message_tokens(counted, model=model)
    return row


def _history_rows(messages: list[ClientMessage], *, model: str) -> list[dict[str, Any]]:
    return [history_row(m, model=model) for m in messages]


def _store_history(
    *, session: ChatSession, messages: list[ClientMessage], position: int, chain_hash: str
) -> tuple[list[Message], int, str]:
    """Append the client's history and its links; returns the rows and where the chain ends."""
    stored = bulk.history_append(
        session=session, messages=_history_rows(messages, model=session.bot.model)
    )
    links = []
    for message, client in zip(stored, messages, strict=True):
        position += 1
        chain_hash = chain_next(chain_hash, client.fingerprint)
        links.append(
            ChainLink(session=session, position=position, message=message, chain_hash=chain_hash)
        )
    ChainLink.objects.bulk_create(links)
    return stored, position, chain_hash


def _session_new(*, user: Any, bot: Bot, key: ApiKey) -> ChatSession:
    session = ChatSession.objects.create(user=user, bot=bot, title="")
    ApiSession.objects.create(session=session, key=key, key_name=key.name)
    return session


def _failed_opening(*, key: ApiKey, bot: Bot, content: str) -> ChatSession | None:
    """The key's newest chat with ``bot`` that holds only this opening message and its failed
    reply (with the tool rounds that reply stored before it failed): a call with no history
    that failed (a provider down, a limit), sent again by the client or its SDK's retries,
    continues there (the send re-runs that reply, ``turns.services.retry``) instead of leaving
    one more chat behind per try."""
    if not content:
        return None
    opening = Message.objects.filter(
        session_id=OuterRef("pk"), seq=1, role=Message.Role.USER, content=content
    )
    failed = Message.objects.filter(
        session_id=OuterRef("pk"),
        seq=OuterRef("last_seq"),
        role=Message.Role.ASSISTANT,
        kind=Message.Kind.CHAT,
        status__in=(Message.Status.FAILED, Message.Status.INTERRUPTED),
    )
    between = Message.objects.filter(
        session_id=OuterRef("pk"), seq__gt=1, seq__lt=OuterRef("last_seq")
    ).exclude(kind=Message.Kind.TOOL)
    return (
        ChatSession.objects.filter(api_origin__key=key, bot=bot, last_seq__gte=2)
        .filter(Exists(opening), Exists(failed))
        .exclude(Exists(between))
        .exclude(Exists(ChainLink.objects.filter(session_id=OuterRef("pk"))))
        .order_by("-pk")
        .first()
    )


def conversation_resolve(
    *,
    key: ApiKey,
    bot: Bot,
    history: list[ClientMessage],
    explicit_session_id: str | None,
    content: str = "",
) -> Conversation:
    """Find (or make) the session the request continues and store the history it lacks. In the
    caller's transaction. ``content``: the call's own message (a failed opening is tried
    again in its chat, ``_failed_opening``)."""
    user = key.user
    root = chain_root(user_id=user.pk, bot_id=bot.pk)
    hashes = chain_of(root, [m.fingerprint for m in history])

    if explicit_session_id is not None:
        session = session_get_for_use(user=user, session_id=explicit_session_id)
        if session.bot_id != bot.pk:
            raise ValidationFailed(
                "This session belongs to another model.", details={"param": "model"}
            )
        tip = _tip_link(session)
        position, chain_hash = (tip.position, tip.chain_hash) if tip else (0, root)
        new: list[ClientMessage] = []
        if tip is not None and len(hashes) >= tip.position:
            if hashes[tip.position - 1] == tip.chain_hash:
                new = history[tip.position :]  # the full transcript again: store what is new
        elif tip is None and not ChatSession.objects.filter(pk=session.pk, last_seq__gt=0).exists():
            new = history  # an empty session: the history is its start
        stored, position, chain_hash = _store_history(
            session=session, messages=new, position=position, chain_hash=chain_hash
        )
        return Conversation(session, position, chain_hash, stored_history=stored)

    if not history:
        again = _failed_opening(key=key, bot=bot, content=content)
        if again is not None:
            return Conversation(again, 0, root)
        session = _session_new(user=user, bot=bot, key=key)
        return Conversation(session, 0, root, created=True)

    tip = _find_tip(user_id=user.pk, bot_id=bot.pk, chain_hash=hashes[-1], content=content)
    if tip is not None and not tip.moved_on:
        return Conversation(tip.session, tip.position, tip.chain_hash)

    prefix = tip or _longest_prefix(user_id=user.pk, bot_id=bot.pk, hashes=hashes)
    if prefix is None:
        session = _session_new(user=user, bot=bot, key=key)
        stored, position, chain_hash = _store_history(
            session=session, messages=history, position=0, chain_hash=root
        )
        return Conversation(session, position, chain_hash, created=True, stored_history=stored)

    session = conversation_fork(source=prefix.session, at=prefix, key=key)
    stored, position, chain_hash = _store_history(
        session=session,
        messages=history[prefix.position :],
        position=prefix.position,
        chain_hash=prefix.chain_hash,
    )
    log.info(
        "api_conversation_forked",
        source_session_id=prefix.session_id,
        session_id=session.pk,
        common_prefix=prefix.position,
        stored=len(stored),
    )
    return Conversation(
        session,
        position,
        chain_hash,
        created=True,
        forked_from=prefix.session_id,
        stored_history=stored,
    )


def conversation_fork(*, source: ChatSession, at: ChainLink, key: ApiKey) -> ChatSession:
    """A new session holding ``source`` up to the message of link ``at``: its messages, its
    active summaries and snapshots that cover only those, and its chain up to there. The
    source is left exactly as it was."""
    through_seq = at.message.seq
    fork = ChatSession.objects.create(
        user=source.user,
        bot=source.bot,
        title=source.title,
        branch_of=branch_origin(source, through_seq + 1),
        branch_seq=through_seq + 1,
    )
    ApiSession.objects.create(
        session=fork,
        key=key,
        key_name=key.name,
        forked_from=source,
        forked_at_seq=through_seq,
    )
    # The one way a chat is copied up to a point (turns.services.branch): the messages, the
    # summaries and snapshots that cover only those, the chat's notes, the search index. A client
    # that edited its history made a branch of the conversation, as an edit in the page does.
    do_branch_copy(session=source, branch=fork, at_seq=through_seq + 1)
    copies = dict(Message.objects.filter(session=fork).values_list("seq", "pk"))
    ids = {
        pk: copies[seq]
        for pk, seq in Message.objects.filter(session=source, seq__lte=through_seq).values_list(
            "pk", "seq"
        )
    }
    ChainLink.objects.bulk_create(
        [
            ChainLink(
                session=fork,
                position=link.position,
                message_id=ids[link.message_id],
                chain_hash=link.chain_hash,
            )
            for link in ChainLink.objects.filter(session=source, position__lte=at.position)
            if link.message_id in ids
        ],
        batch_size=500,
    )
    return fork


# --- the turn's side: options, and the links of a completed reply ------------------------------


# The user message of every API call carries a client_id with this prefix: the turn's hooks tell
# an API turn from that row, which the claim has already read (no statement for other turns).
API_CLIENT_ID_PREFIX = "openai-"


def is_api_turn(user_message: Message | None) -> bool:
    return user_message is not None and user_message.client_id.startswith(API_CLIENT_ID_PREFIX)


def turn_completed(reply: Message, user_message: Message | None) -> None:
    """The turn's completion listener (``turns.hooks``): write the call's links."""
    if not is_api_turn(user_message):
        return
    turn = ApiTurn.objects.filter(reply_id=reply.pk).first()
    if turn is not None:
        links_write(turn=turn, reply=reply)


def links_write(*, turn: ApiTurn, reply: Message) -> None:
    """The links of the call's own messages and its completed reply, with no text too (the
    client got it, and sends it back: unlinked, its next call started a chat of its own).
    Idempotent (the worker and the view both call it); a reply that did not complete writes
    nothing."""
    if reply.status != Message.Status.COMPLETE:
        return
    position, chain_hash = turn.base_position, turn.base_hash
    links = []
    for message_id, fingerprint in turn.pending:
        position += 1
        chain_hash = chain_next(chain_hash, fingerprint)
        links.append(
            ChainLink(
                session_id=turn.session_id,
                position=position,
                message_id=message_id,
                chain_hash=chain_hash,
            )
        )
    position += 1
    said_before = _said_before(turn, reply)
    chain_hash = chain_next(chain_hash, reply_fingerprint(reply, said_before=said_before))
    links.append(
        ChainLink(
            session_id=turn.session_id,
            position=position,
            message_id=reply.pk,
            chain_hash=chain_hash,
        )
    )
    with transaction.atomic():
        # A concurrent call on the same session may have taken these positions: the first
        # writer's chain stands, this one is left unlinked (its messages stay stored).
        ChainLink.objects.bulk_create(links, ignore_conflicts=True)
