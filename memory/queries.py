"""Reads of the memory app: what a session may read, the index, recall reads and search.

Everything here takes an already-authorised ``session`` (the interfaces resolve it through
``bots.queries.session_get_for_user``). "Readable from a session" (docs/memory.md) is one rule,
``records_readable_q``: the session's own records plus the bot-scoped records of
(session.user, session.bot). A session-scoped record shadows a bot-scoped one of the same name, so
a name always means one record inside a session.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q, QuerySet

from bots.models import ChatSession, Message
from bots.queries import participant_seat
from chat_platform.compiled import CompiledValues
from chat_platform.errors import NotFound, ValidationFailed
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens
from chat_platform.transcript import line as transcript_line
from memory import embeddings, search
from memory.models import MemoryRecord, MessageIndex
from memory.terms import query_terms
from memory.terms import terms as search_terms

READ_MAX_NAMES = 5
READ_BODY_MAX_TOKENS = 2000
# At most this many records per result; the token budget (SEARCH_RESULT_TOKENS) is what fills it.
SEARCH_MAX_HITS = 20
EXCERPT_MAX_TOKENS = 300
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
        tokens = count_tokens(f"{text}\n", model=model)
        lines.append(IndexLine(name=name, text=text, tokens=tokens))
    return lines


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


# --- recall: search ---------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchHit:
    record: MemoryRecord  # loaded without body and search_vector
    # Message hits: the record's matching messages, whole, one transcript line each, in seq
    # order ("[12] 2024-03-08 13:56Z user: …"). Record hits (info records, and snapshots whose
    # messages are not indexed): ≤ EXCERPT_MAX_TOKENS tokens around the match, matches in **…**.
    excerpt: str
    rank: float
    seqs: tuple[int, ...] = ()  # the messages the excerpt carries (empty for a record hit)
    # Live history the request does not show (``records_search(live_before=…)``): messages no
    # record holds yet, so nothing to read by name; ``record`` is an unsaved stand-in.
    history: bool = False

    @property
    def name(self) -> str:
        return HISTORY_NAME if self.history else self.record.name

    @property
    def header(self) -> str:
        """The line a search result puts above the hit's text."""
        return _header(self.record, history=self.history)


def _header(record: MemoryRecord, *, history: bool) -> str:
    return HISTORY_HEADER if history else f"[record {record.name}]"


# What a recall result names a live-history hit by: no record, so ``read`` has nothing to open.
HISTORY_NAME = "(history)"
HISTORY_HEADER = "[chat history: not in a record yet, nothing to read]"


# Candidates whose text is read per round of filling the result budget; neighbours come along.
_FILL_CHUNK = 60
# A message hit ending in a question brings the next turn (its answer) along, when compacted.
_QUESTION = "?"


@dataclass
class _Group:
    record_id: int | None  # None: live history
    rank: float
    lines: dict[int, str]  # seq -> line


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
    source. The hits fill at most ``budget`` tokens (``SEARCH_RESULT_TOKENS`` and no more), with
    at most ``limit`` records. The query is always data: any text gives hits or none.

    ``live_before`` (recall, from the turn: the seq of the message it answers): the session's
    uncompacted messages older than that are searched with the compacted ones and come as one
    ``history`` hit — admission may have left them out, and a recall result takes its room from
    history, so the request after it may not show what this one did (pinned ones are in every
    request, so never). Without it (the records API, the memory panel) only compacted messages
    are: they list records.
    """
    if limit <= 0 or not isinstance(query, str):
        return []
    text = search.clean_query(query)
    wanted = query_terms(text, search.QUERY_MAX_TERMS)
    room = (
        settings.SEARCH_RESULT_TOKENS
        if budget is None
        else min(budget, settings.SEARCH_RESULT_TOKENS)
    )
    if not text or room <= 0:
        return []
    records = records_for_session(session=session, kind=kind, scope=scope)
    messages = kind in (None, MemoryRecord.Kind.SNAPSHOT) and scope in (
        None,
        MemoryRecord.Scope.SESSION,
    )
    scored, collection = (
        search.messages_ranked(session_id=session.pk, query=wanted, live_before=live_before)
        if messages
        else ([], None)
    )
    info = _info_scored(records, text, wanted, collection, limit=limit)
    from_seq = _seen_from(session)
    # messages_ranked gives live rows (no record) only below ``live_before``.
    ranked: list[tuple[float, object]] = [(m.score, m) for m in scored if m.seq >= from_seq]
    ranked += [(score, hit) for score, hit in info]
    ranked.sort(key=lambda pair: -pair[0])  # stable: ties keep newest-first message order
    if messages:
        ranked = _with_vectors(session, text, ranked, from_seq=from_seq, live_before=live_before)
    hits = _fill(session, ranked, room=room, limit=limit, model=model, live_before=live_before)
    used = count_tokens("".join(_rendered(hit) for hit in hits), model=model)
    if len(hits) < limit and (kind in (None, MemoryRecord.Kind.SNAPSHOT)):
        hits += _snapshot_hits(session, records, text, room=room - used, limit=limit - len(hits))
    return hits


def _seen_from(session: ChatSession) -> int:
    """The first seq ``session``'s bot may see: in a room, a bot that sees from its join never
    finds what was said before it came in (docs/rooms.md); else 1."""
    if not session.is_room:
        return 1
    seat = participant_seat(session=session, bot_id=session.bot_id)
    return seat.joined_seq + 1 if seat is not None and seat.sees_from_join else 1


def _with_vectors(
    session: ChatSession,
    text: str,
    ranked: list[tuple[float, object]],
    *,
    from_seq: int = 1,
    live_before: int | None = None,
) -> list[tuple[float, object]]:
    """Hybrid search, for a bot with an embedding model: the lexical ranking fused with the
    session's messages most similar in meaning to the question (``memory.embeddings``), so a
    question that shares no word with its answer still finds it. Without a model, or when the
    model is down (a logged warning), the lexical ranking as it is."""
    bot = session.bot
    if not bot.embedding_model:
        return ranked
    vector = embeddings.query_vector(bot, text, user_id=session.user_id)
    if vector is None:
        return ranked
    similar = [
        m
        for m in embeddings.vector_ranked(
            session_id=session.pk, model=bot.embedding_model, query=vector, live_before=live_before
        )
        if m.seq >= from_seq  # a room's late joiner, as for the words (``_seen_from``)
    ]
    return embeddings.fused(ranked, similar) if similar else ranked


def _rendered(hit: SearchHit) -> str:
    """What one hit adds to a search result (``memory.recall`` joins hits with a blank line)."""
    return f"{hit.header}\n{hit.excerpt}\n\n"


def _info_scored(
    records: QuerySet[MemoryRecord],
    text: str,
    wanted: list[str],
    collection: "search.Collection | None",
    *,
    limit: int,
) -> list[tuple[float, SearchHit]]:
    """Info records matching the query, each with its BM25 score against the messages."""
    infos = records.filter(kind=MemoryRecord.Kind.INFO)
    ranked = search.search_ranked(records=infos, query=text, limit=limit)
    if not ranked:
        return []
    rows = {
        r.pk: r
        for r in MemoryRecord.objects.filter(pk__in=[pk for pk, _, _ in ranked]).defer(
            "search_vector"
        )
    }
    if collection is None or not collection.documents:
        collection = search.Collection(documents=0, mean_length=0.0, frequency={})
    out = []
    for position, (pk, _, excerpt) in enumerate(ranked):
        record = rows.get(pk)
        if record is None:  # deleted between the two queries
            continue
        words = search_terms(f"{record.name} {record.description} {record.body}")
        score = collection.score(wanted, words) or 1.0 / (position + 2)
        record.body = ""  # the hit carries the excerpt, not the body
        out.append(
            (
                score,
                SearchHit(
                    record=record,
                    excerpt=truncate_to_tokens(excerpt, EXCERPT_MAX_TOKENS),
                    rank=score,
                ),
            )
        )
    return out


def _fill(
    session: ChatSession,
    ranked: list[tuple[float, object]],
    *,
    room: int,
    limit: int,
    model: str,
    live_before: int | None = None,
) -> list[SearchHit]:
    """The ranked messages and info hits that fit ``room`` tokens: messages grouped by their
    record (a record's first appearance sets its place), each message once; live messages (no
    record) form one group of their own."""
    names: dict[int | None, MemoryRecord] = {
        r.pk: r
        for r in MemoryRecord.objects.filter(
            pk__in={i.record_id for _, i in ranked if isinstance(i, search.MessageScore)}
        ).defer("body", "search_vector")
    }
    names[None] = MemoryRecord(session=session, name=HISTORY_NAME, kind=MemoryRecord.Kind.SNAPSHOT)
    groups: dict[int | None, _Group] = {}
    order: list[object] = []  # _Group or SearchHit, in rank order
    shown: set[int] = set()
    used = 0
    for start in range(0, len(ranked), _FILL_CHUNK):
        chunk = ranked[start : start + _FILL_CHUNK]
        lines = _message_lines(
            session,
            [item for _, item in chunk if isinstance(item, search.MessageScore)],
            live_before=live_before,
        )
        for score, item in chunk:
            if isinstance(item, SearchHit):
                cost = count_tokens(_rendered(item), model=model)
                if len(order) < limit and used + cost <= room:
                    order.append(item)
                    used += cost
                continue
            assert isinstance(item, search.MessageScore)
            record = names.get(item.record_id)
            if item.seq in shown or record is None:
                continue
            seqs = [item.seq]
            line = lines.get(item.seq)
            if line is None:  # deleted meanwhile
                continue
            if line.endswith(_QUESTION) and item.seq + 1 in lines and item.seq + 1 not in shown:
                seqs.append(item.seq + 1)
            group = groups.get(item.record_id)
            new_group = group is None
            if new_group and len(order) >= limit:
                continue
            header = f"{_header(record, history=item.record_id is None)}\n\n" if new_group else ""
            cost = count_tokens(header + "".join(f"{lines[s]}\n" for s in seqs), model=model)
            if used + cost > room and len(seqs) > 1:  # the question alone, without its answer
                seqs = seqs[:1]
                cost = count_tokens(header + f"{lines[item.seq]}\n", model=model)
            if used + cost > room:
                if not order and new_group:  # nothing fits yet: the best message, cut
                    cut = truncate_to_tokens(
                        lines[item.seq],
                        max(0, room - count_tokens(header, model=model) - 2),
                        model=model,
                    )
                    if cut:
                        groups[item.record_id] = _Group(
                            item.record_id, score, {item.seq: cut + " …"}
                        )
                        order.append(groups[item.record_id])
                        shown.add(item.seq)
                        used = room
                continue
            if group is None:
                group = groups[item.record_id] = _Group(item.record_id, score, {})
                order.append(group)
            for s in seqs:
                group.lines[s] = lines[s]
                shown.add(s)
            used += cost
        if used >= room:
            break
    hits = []
    for entry in order:
        if isinstance(entry, SearchHit):
            hits.append(entry)
            continue
        record = names[entry.record_id]
        seqs = tuple(sorted(entry.lines))
        hits.append(
            SearchHit(
                record=record,
                excerpt="\n".join(entry.lines[s] for s in seqs),
                rank=entry.rank,
                seqs=seqs,
                history=entry.record_id is None,
            )
        )
    return _within(hits, room, model=model)


def _within(hits: list[SearchHit], room: int, *, model: str) -> list[SearchHit]:
    """Drop the last hits while the rendered whole is over ``room`` (joins can tokenize a token
    or two differently from the parts)."""
    while hits and count_tokens("".join(_rendered(h) for h in hits), model=model) > room:
        hits = hits[:-1]
    return hits


def _message_lines(
    session: ChatSession, scored: list["search.MessageScore"], *, live_before: int | None
) -> dict[int, str]:
    """Transcript lines (seq -> line) of ``scored`` and of the turn after each question among
    them, read in one query: compacted messages, and live ones below ``live_before`` that are
    not pinned (a pin is in every request)."""
    if not scored:
        return {}
    seqs = {m.seq for m in scored} | {m.seq + 1 for m in scored}
    # A room's messages never carry compacted_by_id (coverage is per bot, in compaction): the
    # scored ones are indexed with a snapshot, so compacted by some bot of the room; a live one
    # is one no snapshot holds.
    if session.is_room:
        live = {m.seq for m in scored if m.record_id is None}
        visible = ~Q(seq__in=live, pinned=True)
        if live_before:  # never the message the turn answers, or what came after it
            visible &= Q(seq__lt=live_before)
    else:
        visible = Q(compacted_by_id__isnull=False)
        if live_before:
            visible |= Q(seq__lt=live_before, pinned=False)
    rows = Message.objects.filter(
        visible,
        session_id=session.pk,
        seq__in=seqs,
        role__in=(Message.Role.USER, Message.Role.ASSISTANT),
    ).values_list("seq", "role", "content", "created_at")
    asked = {m.seq for m in scored}
    lines = {}
    for seq, role, content, created_at in rows:
        text = content.strip()
        if not text:
            continue
        if seq not in asked and seq - 1 not in asked:
            continue
        lines[seq] = transcript_line(seq, created_at, role, text)
    return lines


def _snapshot_hits(
    session: ChatSession,
    records: QuerySet[MemoryRecord],
    text: str,
    *,
    room: int,
    limit: int,
) -> list[SearchHit]:
    """Snapshots searched as records: those none of whose messages are indexed (a fusion's,
    which holds summaries; a snapshot from before message search)."""
    if room <= 0 or limit <= 0:
        return []
    covered = MessageIndex.objects.filter(session_id=session.pk, record__isnull=False).values(
        "record_id"
    )
    snapshots = records.filter(kind=MemoryRecord.Kind.SNAPSHOT).exclude(pk__in=covered)
    if not snapshots.exists():  # the usual case: every snapshot's messages are indexed
        return []
    ranked = search.search_ranked(records=snapshots, query=text, limit=limit)
    if not ranked:
        return []
    by_id = {
        r.pk: r
        for r in MemoryRecord.objects.filter(pk__in=[pk for pk, _, _ in ranked]).defer(
            "body", "search_vector"
        )
    }
    hits = []
    for pk, rank, excerpt in ranked:
        record = by_id.get(pk)
        if record is None:  # deleted between the two queries
            continue
        hits.append(
            SearchHit(
                record=record, excerpt=truncate_to_tokens(excerpt, EXCERPT_MAX_TOKENS), rank=rank
            )
        )
    return _within(hits, room, model="")


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
