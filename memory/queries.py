"""Reads of the memory app: what a session may read, the index, recall reads and search.

Everything here takes an already-authorised ``session`` (the interfaces resolve it through
``bots.queries.session_get_for_user``). "Readable from a session" (docs/memory.md) is one rule,
``records_readable_q``: the session's own records plus the bot-scoped records of
(session.user, session.bot). A session-scoped record shadows a bot-scoped one of the same name, so
a name always means one record inside a session.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache, partial

from django.conf import settings
from django.db.models import Q, QuerySet

from bots.models import ChatSession, Message
from chat_platform.compiled import CompiledValues
from chat_platform.errors import NotFound, ValidationFailed
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens
from memory import search
from memory.models import MemoryRecord
from memory.search_hits import (
    SearchHit,
    fill,
    info_scored,
    seen_from,
    snapshot_hits,
    uncovered_snapshots,
    with_vectors,
)
from memory.terms import query_terms

READ_MAX_NAMES = 5
READ_BODY_MAX_TOKENS = 2000
# At most this many records per result; the token budget (SEARCH_RESULT_TOKENS) is what fills it.
SEARCH_MAX_HITS = 20
# Newest first everywhere (index, list, frame): an edited record counts as new.
NEWEST_FIRST = ("-updated_at", "-id")


def records_readable_q(*, session: ChatSession) -> Q:
    """What ``session`` may read: its own records and its bot's. In a room (``session`` a bot's
    seat) a snapshot is its writer's alone: the room's info records are everyone's, another
    bot's snapshots (what that bot was shown, as it was shown) never reach this one."""
    own = Q(scope=MemoryRecord.Scope.SESSION, session_id=session.pk)
    if session.is_room:
        own &= Q(kind=MemoryRecord.Kind.INFO) | Q(bot_id=session.bot_id)
    shadowed = MemoryRecord.objects.filter(
        scope=MemoryRecord.Scope.SESSION, session_id=session.pk
    ).values("name")
    per_bot = Q(scope=MemoryRecord.Scope.BOT, user_id=session.user_id, bot_id=session.bot_id) & ~Q(
        name__in=shadowed
    )
    return own | per_bot


def records_for_session(
    *, session: ChatSession, kind: str | None = None, scope: str | None = None
) -> QuerySet[MemoryRecord]:
    """Every record readable from ``session``, newest first (``search_vector`` never loaded)."""
    records = MemoryRecord.objects.filter(records_readable_q(session=session))
    if kind:
        records = records.filter(kind=kind)
    if scope:
        records = records.filter(scope=scope)
    return records.defer("search_vector").order_by(*NEWEST_FIRST)


def record_get_for_session(*, session: ChatSession, name: object) -> MemoryRecord:
    """The readable record called ``name``; one ``not_found`` whether missing or not readable."""
    if not isinstance(name, str) or not MemoryRecord.name_is_valid(name):
        raise NotFound("Record not found.")
    record = records_for_session(session=session).filter(name=name).first()
    if record is None:
        raise NotFound("Record not found.")
    return record


# --- the index --------------------------------------------------------------------------------


@dataclass(frozen=True)
class IndexLine:
    name: str
    text: str  # exactly one line of docs/memory.md, without a newline
    tokens: int  # count_tokens(text + "\n"): what the line adds to the index block


def _line_text(
    name: str, kind: str, first_seq: int | None, last_seq: int | None, description: str
) -> str:
    if first_seq is not None and last_seq is not None:
        label = f"{kind}, messages {first_seq}–{last_seq}"
    else:
        label = kind
    return f"- {name} ({label}): {description}"


def memory_index_records(*, session: ChatSession, limit: int) -> list[MemoryRecord]:
    """The records the index lists: up to ``limit`` newest readable ones, snapshots only once
    indexed. Bodies are not loaded."""
    if limit <= 0:
        return []
    return list(_index_records(session).defer("body")[:limit])


def _index_records(session: ChatSession) -> QuerySet[MemoryRecord]:
    return records_for_session(session=session).exclude(
        kind=MemoryRecord.Kind.SNAPSHOT, indexed=False
    )


def memory_index_lines(
    *, session: ChatSession, limit: int, model: str | None = None
) -> list[IndexLine]:
    """The index, newest first, one ``IndexLine`` per record with its token cost (counted with
    ``model``'s encoding, default the session's bot model). Admission drops lines from the end
    (the oldest) first when the index must shrink; the caller renders the block header."""
    model = session.bot.model if model is None else model
    if limit <= 0:
        return []
    lines = []
    rows = _INDEX_LINES.rows(
        session_id=session.pk,
        user_id=session.user_id,
        bot_id=session.bot_id,
        limit=limit,
        room=session.is_room,
    )
    for name, kind, first_seq, last_seq, description in rows:
        text = _line_text(name, kind, first_seq, last_seq, description)
        tokens = _line_tokens(text, model)
        lines.append(IndexLine(name=name, text=text, tokens=tokens))
    return lines


# Lines are short (a name, a label and a description of at most 140 characters), and the same
# lines are measured on every model call: a long tool task measured each ~250 times
# (docs/performance.md, "The tool task"). Bounded: the largest index, four times over.
INDEX_LINE_COUNTS_CACHED = 800


@lru_cache(maxsize=INDEX_LINE_COUNTS_CACHED)
def _line_tokens(text: str, model: str) -> int:
    """What a line adds to the index block: ``count_tokens(text + "\n")``."""
    return count_tokens(f"{text}\n", model=model)


def _index_lines_query(
    *, session_id: int, user_id: int, bot_id: int, limit: int, room: bool = False
) -> QuerySet:
    """``memory_index_records`` as the columns a line needs (compiled once: every turn runs it)."""
    session = ChatSession(pk=session_id, user_id=user_id, bot_id=bot_id, is_room=room)
    return _index_records(session).values_list(
        "name", "kind", "first_seq", "last_seq", "description"
    )[:limit]


_INDEX_LINES = CompiledValues(_index_lines_query, shape=("limit", "room"))


# --- recall: read -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordRead:
    name: str
    found: bool
    kind: str = ""
    scope: str = ""
    description: str = ""
    # The body as given to the model: at most READ_BODY_MAX_TOKENS tokens including the
    # truncation marker when it was cut.
    body: str = ""
    tokens: int = 0
    truncated: bool = False

    @property
    def not_found_marker(self) -> str:
        return f"[not found: {self.name}]"


def truncation_marker(total_tokens: int) -> str:
    return f"\n[truncated: record continues, {total_tokens} tokens in all]"


def cap_body(body: str, *, max_tokens: int, model: str = "") -> tuple[str, int, bool]:
    """``body`` cut to ``max_tokens`` tokens, marker included: (text, its tokens, truncated)."""
    total = count_tokens(body, model=model)
    if total <= max_tokens:
        return body, total, False
    marker = truncation_marker(total)
    room = max_tokens - count_tokens(marker, model=model)
    while True:
        text = f"{truncate_to_tokens(body, room, model=model).rstrip()}{marker}"
        tokens = count_tokens(text, model=model)
        # Tokens can merge across the seam; give one back until the whole fits.
        if tokens <= max_tokens or room <= 0:
            return text, tokens, True
        room -= 1


def records_read(
    *, session: ChatSession, names: Sequence[object], model: str | None = None
) -> list[RecordRead]:
    """One result per distinct requested name, in the order asked. More than READ_MAX_NAMES
    distinct names is a ``ValidationFailed`` (the turn reports it to the model). Names are data:
    anything that is not a valid record name is simply not found."""
    model = session.bot.model if model is None else model
    wanted = list(dict.fromkeys(str(name) for name in names))
    if len(wanted) > READ_MAX_NAMES:
        raise ValidationFailed(
            f"At most {READ_MAX_NAMES} records per read.",
            details={"names": [f"Ask for at most {READ_MAX_NAMES} names at a time."]},
        )
    valid = [name for name in wanted if MemoryRecord.name_is_valid(name)]
    records = {r.name: r for r in records_for_session(session=session).filter(name__in=valid)}
    results = []
    for name in wanted:
        record = records.get(name)
        if record is None:
            results.append(RecordRead(name=name, found=False))
            continue
        body, tokens, truncated = cap_body(
            record.body, max_tokens=READ_BODY_MAX_TOKENS, model=model
        )
        results.append(
            RecordRead(
                name=name,
                found=True,
                kind=record.kind,
                scope=record.scope,
                description=record.description,
                body=body,
                tokens=tokens,
                truncated=truncated,
            )
        )
    return results


# --- recall: search (the hits: memory/search_hits.py) -----------------------------------------


def records_search(
    *,
    session: ChatSession,
    query: object,
    limit: int = SEARCH_MAX_HITS,
    kind: str | None = None,
    scope: str | None = None,
    budget: int | None = None,
    model: str = "",
    live_before: int | None = None,
    web: bool = False,
) -> list[SearchHit]:
    """Ranked hits over everything ``session`` may read, best first (docs/memory.md).

    The compacted messages themselves (``MessageIndex``), ranked by BM25 over their terms (and,
    for a bot with an ``embedding_model``, fused with their similarity in meaning), any
    query word counting (OR, rarer words weigh more, stop words dropped): a hit is the record
    that holds them (the snapshot a compaction took them into) with the matching messages whole,
    dated and attributed, plus the answer after a matching question. Info records are ranked
    with the messages (BM25 over their name, description and body against the same
    collection). Snapshots whose messages are not indexed (a fusion's, holding summaries) are
    searched as records and come after every message and info hit: a copy never outranks its
    source. The hits fill at most ``budget`` tokens (``search_tokens_max()`` and no more; without
    a budget ``SEARCH_RESULT_TOKENS``: recall passes ``search_room``), with at most ``limit``
    records. The query is always data: any text gives hits or none.

    ``live_before`` (recall, from the turn: the seq of the message it answers): the session's
    uncompacted messages older than that are searched with the compacted ones and come as one
    ``history`` hit — admission may have left them out, and a recall result takes its room from
    history, so the request after it may not show what this one did (pinned ones are in every
    request, so never). Without it (the records API, the memory panel) only compacted messages
    are: they list records.

    ``web``: the caller is the web process (the records API): the question is embedded on a
    worker, never in the request (``memory.query_embedding``).
    """
    if limit <= 0 or not isinstance(query, str):
        return []
    text = search.clean_query(query)
    wanted = query_terms(text, search.QUERY_MAX_TERMS)
    room = settings.SEARCH_RESULT_TOKENS if budget is None else min(budget, search_tokens_max())
    if not text or room <= 0:
        return []
    records = _readable(session, kind, scope)
    snapshot, own = MemoryRecord.Kind.SNAPSHOT, MemoryRecord.Scope.SESSION
    messages = kind in (None, snapshot) and scope in (None, own)
    scored, collection = (
        search.messages_ranked(session_id=session.pk, query=wanted, live_before=live_before)
        if messages
        else ([], None)
    )
    passes = partial(_info_pass_rows, session, kind, scope, limit)
    info = info_scored(records, text, wanted, collection, limit=limit, pass_rows=passes)
    from_seq = seen_from(session)
    # messages_ranked gives live rows (no record) only below ``live_before``.
    ranked: list[tuple[float, object]] = [(m.score, m) for m in scored if m.seq >= from_seq]
    ranked += [(score, hit) for score, hit in info]
    ranked.sort(key=lambda pair: -pair[0])  # stable: ties keep newest-first message order
    lexical = ranked
    if messages:
        ranked = with_vectors(
            session, text, ranked, from_seq=from_seq, live_before=live_before, web=web
        )
    hits, used = fill(
        session,
        ranked,
        room=room,
        limit=limit,
        model=model,
        live_before=live_before,
        defer_low=ranked is not lexical,  # fused: messages that say little after the others
    )
    if len(hits) < limit and (kind in (None, snapshot)):
        uncovered = partial(_any_uncovered, session, kind, scope)
        more = partial(snapshot_hits, session, records, text, any_uncovered=uncovered)
        hits += more(room=room - used, limit=limit - len(hits))
    return hits


def search_tokens_max() -> int:
    """The most one search may fill: ``SEARCH_RESULT_TOKENS_MAX``, never below
    ``SEARCH_RESULT_TOKENS``."""
    return int(max(settings.SEARCH_RESULT_TOKENS, settings.SEARCH_RESULT_TOKENS_MAX))


def search_room(room: int) -> int:
    """What a recall search fills of ``room`` (what is left of B for recall): half of it, so a
    second round and the request's history keep the rest, at least ``SEARCH_RESULT_TOKENS`` and
    at most ``search_tokens_max()``, never more than ``room`` (docs/memory.md, "Budget"). An
    8,192-token window leaves ~6,000: a search fills ~3,000 where it filled 2,000."""
    share = max(settings.SEARCH_RESULT_TOKENS, min(search_tokens_max(), room // 2))
    return max(0, min(room, share))


def _readable(
    session: ChatSession, kind: str | None, scope: str | None
) -> Callable[[], QuerySet[MemoryRecord]]:
    """``records_for_session`` for a search, built on the first call only: the statements that
    read the records are compiled once (``_INFO_PASS``, ``_UNCOVERED``), so a search seldom
    needs the queryset (~1 ms of Django's work, docs/performance.md "Search latency, fourth
    pass")."""
    return cache(partial(records_for_session, session=session, kind=kind, scope=scope))


def _info_pass_query(
    *,
    session_id: int,
    user_id: int,
    bot_id: int,
    room: bool,
    kind: str | None,
    scope: str | None,
    limit: int,
    **binds: str,
) -> QuerySet:
    """One ranking pass of ``info_scored`` (``memory.search.pg_ranked`` over the readable info
    records): compiled once per shape and number of words; Django built and compiled it on each
    search, ~2 ms of CPU for a statement the server answers in under 1 (docs/performance.md,
    "Search latency, fourth pass")."""
    session = ChatSession(pk=session_id, user_id=user_id, bot_id=bot_id, is_room=room)
    infos = records_for_session(session=session, kind=kind, scope=scope).filter(
        kind=MemoryRecord.Kind.INFO
    )
    return search.pg_ranked(infos, search.pg_pass_query(**binds), limit)


def _session_binds(session: ChatSession, kind: str | None, scope: str | None) -> dict:
    """What the compiled statements of a search (``_INFO_PASS``, ``_UNCOVERED``) are run with:
    the session's keys (``records_for_session`` reads them) and the search's filters."""
    return {
        "session_id": session.pk,
        "user_id": session.user_id,
        "bot_id": session.bot_id,
        "room": session.is_room,
        "kind": kind,
        "scope": scope,
    }


_INFO_PASS = CompiledValues(_info_pass_query, shape=("room", "kind", "scope", "limit"))


def _info_pass_rows(
    session: ChatSession, kind: str | None, scope: str | None, limit: int, binds: dict[str, str]
) -> list[tuple[int, float]]:
    return _INFO_PASS.rows(**_session_binds(session, kind, scope), limit=limit, **binds)


def _uncovered_query(
    *, session_id: int, user_id: int, bot_id: int, room: bool, kind: str | None, scope: str | None
) -> QuerySet:
    """Whether ``snapshot_hits`` has snapshots to search (its ``exists()``), as one row or none:
    compiled once (every search asks it; Django built it in ~1.5 ms, the server answers in
    under 1, docs/performance.md "Search latency, fourth pass")."""
    session = ChatSession(pk=session_id, user_id=user_id, bot_id=bot_id, is_room=room)
    records = records_for_session(session=session, kind=kind, scope=scope)
    return uncovered_snapshots(records, session_id).order_by().values_list("pk")[:1]


_UNCOVERED = CompiledValues(_uncovered_query, shape=("room", "kind", "scope"))


def _any_uncovered(session: ChatSession, kind: str | None, scope: str | None) -> bool:
    return bool(_UNCOVERED.rows(**_session_binds(session, kind, scope)))


# --- search all my chats ----------------------------------------------------------------------

USER_SEARCH_MAX_HITS = 50


@dataclass(frozen=True)
class MessageHit:
    """One message of the user's chats matching a search, for the sidebar and the REST API."""

    session: ChatSession  # with its bot loaded
    message_id: int
    seq: int
    role: str
    created_at: object
    excerpt: str  # one line around the match, matched words in **…**
    rank: float


def messages_search_for_user(
    *, user_id: int, query: object, limit: int = USER_SEARCH_MAX_HITS
) -> list[MessageHit]:
    """The messages of ``user_id``'s own sessions best matching ``query`` (the memory search
    function, BM25 over ``MessageIndex``, in one query over all of them), at most ``limit``,
    best first. Every indexed message counts, compacted or not. The query is data: any text
    gives hits or none; another user's messages are never candidates."""
    if limit <= 0 or not isinstance(query, str):
        return []
    wanted = query_terms(search.clean_query(query), search.QUERY_MAX_TERMS)
    if not wanted:
        return []
    scored, _ = search.messages_ranked(user_id=user_id, query=wanted)
    top = scored[:limit]
    if not top:
        return []
    rows = {
        row["pk"]: row
        for row in Message.objects.filter(
            pk__in=[m.message_id for m in top], session__user_id=user_id
        ).values("pk", "session_id", "seq", "role", "content", "created_at")
    }
    sessions = ChatSession.objects.select_related("bot").in_bulk(
        {row["session_id"] for row in rows.values()}
    )
    hits = []
    for scored_message in top:
        row = rows.get(scored_message.message_id)
        if row is None:  # deleted between the two queries
            continue
        hits.append(
            MessageHit(
                session=sessions[row["session_id"]],
                message_id=row["pk"],
                seq=row["seq"],
                role=row["role"],
                created_at=row["created_at"],
                excerpt=search.message_excerpt(row["content"], wanted),
                rank=round(scored_message.score, 4),
            )
        )
    return hits
