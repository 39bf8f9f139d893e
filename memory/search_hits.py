"""How ``memory.queries.records_search`` turns ranked matches into hits (docs/memory.md): message
hits grouped by the record that holds them, info and snapshot hits as records, live history as one
``history`` hit, all within the result's room in tokens."""

from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.db.models.expressions import RawSQL

from bots.models import ChatSession, Message
from bots.queries import participant_seat
from chat_platform.llm.tokens import count_tokens, tokens_at_least, truncate_to_tokens
from chat_platform.transcript import line as transcript_line
from memory import embeddings, query_embedding, search
from memory.fusion import fused
from memory.models import MemoryRecord, MessageIndex
from memory.seat_hits import room_labels, seat_snapshots
from memory.terms import has_distinct_terms
from memory.terms import terms as search_terms

_Deferred = tuple[float, "search.MessageScore", dict[int, str]]

EXCERPT_MAX_TOKENS = 300


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


# Candidates whose text is read in the first round of filling the result budget (each next
# round reads twice as many); neighbours come along. A hybrid ranking (the lexical candidates
# and up to VECTOR_CANDIDATES by meaning, ~240 at 1,000 messages a session) is read in one
# query: a result that is not full goes on through the whole ranking, and a second read cost
# more than the rows the first reads in vain when the room fills early (docs/performance.md).
_FILL_CHUNK = 300
# A message hit ending in a question brings the next turn (its answer) along, when compacted.
_QUESTION = "?"
# A message of fewer distinct search terms than this says little ("Mei: Best feeling in the
# world.": a name and three words), yet it ranks high on both sides: BM25 favours a short message
# sharing one word with the question, and a short message's vector is mostly its speaker's name
# or a stock phrase, close to any question naming that speaker. Such a message is filled after
# the ranking's fused messages that say more, still before the lexical ranking's tail (messages
# that only share a word with the question) (docs/memory.md, "Messages that say little") —
# unless it holds a word of the question that no ranked message saying more holds: then it is
# the evidence ("I'm on flight BA2490 tomorrow morning." for "What is the flight number?").
LOW_INFORMATION_TERMS = 6


@dataclass
class _Group:
    record_id: int | None  # None: live history
    rank: float
    lines: dict[int, str]  # seq -> line


def seen_from(session: ChatSession) -> int:
    """The first seq ``session``'s bot may see: in a room, a bot that sees from its join never
    finds what was said before it came in (docs/rooms.md); else 1."""
    if not session.is_room:
        return 1
    seat = participant_seat(session=session, bot_id=session.bot_id)
    return seat.joined_seq + 1 if seat is not None and seat.sees_from_join else 1


def with_vectors(
    session: ChatSession,
    text: str,
    ranked: list[tuple[float, object]],
    *,
    from_seq: int = 1,
    live_before: int | None = None,
    web: bool = False,
) -> list[tuple[float, object]]:
    """Hybrid search, for a bot with an embedding model: the lexical ranking fused with the
    session's messages most similar in meaning to the question (``memory.embeddings``), so a
    question that shares no word with its answer still finds it. Without a model, or when the
    model is down (a logged warning), the lexical ranking as it is. ``web``: the caller is the
    web process, which embeds nothing itself (``memory.query_embedding``)."""
    bot = session.bot
    if not bot.embedding_model:
        return ranked
    if web:
        # Not even a worker's time for a session with no vector to compare (one indexed query).
        scope = {"session_id": session.pk, "live_before": live_before}
        if not embeddings.vectors_exist(model=bot.embedding_model, **scope):
            return ranked
        vector = query_embedding.query_vector_from_worker(bot, text, user_id=session.user_id)
    else:
        vector = embeddings.query_vector(bot, text, user_id=session.user_id)
    if vector is None:
        return ranked
    similar = [
        m
        for m in embeddings.vector_ranked(
            session_id=session.pk, model=bot.embedding_model, query=vector, live_before=live_before
        )
        if m.seq >= from_seq  # a room's late joiner, as for the words (``seen_from``)
    ]
    return fused(ranked, similar) if similar else ranked


def rendered(hit: SearchHit) -> str:
    """What one hit adds to a search result (``memory.recall`` joins hits with a blank line)."""
    return f"{hit.header}\n{hit.excerpt}\n\n"


def info_scored(
    records: Callable[[], QuerySet[MemoryRecord]],
    text: str,
    wanted: list[str],
    collection: "search.Collection | None",
    *,
    limit: int,
    pass_rows: "search.PassRows | None" = None,
) -> list[tuple[float, SearchHit]]:
    """Info records matching the query, each with its BM25 score against the messages.
    ``records``: the function that builds the readable ones (called only when needed);
    ``pass_rows``: the ranking's statements compiled by the caller (``memory.queries``)."""

    def infos() -> QuerySet[MemoryRecord]:
        return records().filter(kind=MemoryRecord.Kind.INFO)

    # The records read with their excerpts, once (docs/performance.md).
    ranked = search.search_ranked_records(
        records=infos, query=text, limit=limit, pass_rows=pass_rows
    )
    if not ranked:
        return []
    if collection is None or not collection.documents:
        collection = search.Collection(documents=0, mean_length=0.0, frequency={})
    out = []
    for position, (record, _, excerpt) in enumerate(ranked):
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


class _Filler:
    """One fill of the result's room: message groups by record, their rank order, the seqs
    shown and the tokens used."""

    def __init__(
        self, names: dict[int | None, MemoryRecord], *, room: int, limit: int, model: str
    ) -> None:
        self.names = names
        self.room = room
        self.limit = limit
        self.model = model
        self.groups: dict[int | None, _Group] = {}
        self.order: list[object] = []  # _Group or SearchHit, in rank order
        self.shown: set[int] = set()
        self.used = 0

    def add_hit(self, item: SearchHit) -> None:
        cost = count_tokens(rendered(item), model=self.model)
        if len(self.order) < self.limit and self.used + cost <= self.room:
            self.order.append(item)
            self.used += cost

    def add_message(self, score: float, item: "search.MessageScore", lines: dict[int, str]) -> None:
        record = self.names.get(item.record_id)
        if item.seq in self.shown or record is None:
            return
        seqs = [item.seq]
        line = lines.get(item.seq)
        if line is None:  # deleted meanwhile
            return
        if line.endswith(_QUESTION) and item.seq + 1 in lines and item.seq + 1 not in self.shown:
            seqs.append(item.seq + 1)
        group = self.groups.get(item.record_id)
        new_group = group is None
        if new_group and len(self.order) >= self.limit:
            return
        header = f"{_header(record, history=item.record_id is None)}\n\n" if new_group else ""
        if self.order and self.used + tokens_at_least(header + f"{line}\n") > self.room:
            # Not even the question alone would fit (nor, then, with its answer): not counted.
            # Once the room is nearly full most candidates end here (docs/performance.md).
            return
        cost = count_tokens(header + "".join(f"{lines[s]}\n" for s in seqs), model=self.model)
        if self.used + cost > self.room and len(seqs) > 1:  # the question alone, without its answer
            seqs = seqs[:1]
            cost = count_tokens(header + f"{lines[item.seq]}\n", model=self.model)
        if self.used + cost > self.room:
            if not self.order and new_group:  # nothing fits yet: the best message, cut
                self._cut(score, item, lines[item.seq], header)
            return
        if group is None:
            group = self.groups[item.record_id] = _Group(item.record_id, score, {})
            self.order.append(group)
        for s in seqs:
            group.lines[s] = lines[s]
            self.shown.add(s)
        self.used += cost

    def _cut(self, score: float, item: "search.MessageScore", line: str, header: str) -> None:
        cut = truncate_to_tokens(
            line,
            max(0, self.room - count_tokens(header, model=self.model) - 2),
            model=self.model,
        )
        if cut:
            self.groups[item.record_id] = _Group(item.record_id, score, {item.seq: cut + " …"})
            self.order.append(self.groups[item.record_id])
            self.shown.add(item.seq)
            self.used = self.room

    def hits(self) -> list[SearchHit]:
        hits = []
        for entry in self.order:
            if isinstance(entry, SearchHit):
                hits.append(entry)
                continue
            assert isinstance(entry, _Group)
            record = self.names[entry.record_id]
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
        return hits


def fill(
    session: ChatSession,
    ranked: list[tuple[float, object]],
    *,
    room: int,
    limit: int,
    model: str,
    live_before: int | None = None,
    defer_low: bool = False,
) -> tuple[list[SearchHit], int]:
    """The ranked messages and info hits that fit ``room`` tokens: messages grouped by their
    record (a record's first appearance sets its place), each message once; live messages (no
    record) form one group of their own. With them, the tokens they render to (counted once).
    ``defer_low`` (a fused ranking, words and meaning): messages that say little come after the
    others, before the lexical tail (``LOW_INFORMATION_TERMS``)."""
    if session.is_room:
        ranked = seat_snapshots(session, ranked, live_before)
    names: dict[int | None, MemoryRecord] = {
        r.pk: r
        for r in MemoryRecord.objects.filter(
            pk__in={i.record_id for _, i in ranked if isinstance(i, search.MessageScore)}
        ).defer("body", "search_vector")
    }
    names[None] = MemoryRecord(session=session, name=HISTORY_NAME, kind=MemoryRecord.Kind.SNAPSHOT)
    filler = _Filler(names, room=room, limit=limit, model=model)
    covered = _words_said_more(ranked) if defer_low else frozenset()
    later: list[_Deferred] = []  # messages that say little, until the ranking's tail
    start, size = 0, _FILL_CHUNK
    while start < len(ranked):
        chunk = ranked[start : start + size]
        # Each round reads twice as many: a result a few tokens short of full goes on through
        # the whole ranking for something small enough, in a few queries instead of one per 60.
        start, size = start + size, size * 2
        scored = [item for _, item in chunk if isinstance(item, search.MessageScore)]
        lines, low = _message_lines(
            session, scored, live_before=live_before, held=_held(scored, names)
        )
        for score, item in chunk:
            if isinstance(item, SearchHit):
                filler.add_hit(item)
                continue
            assert isinstance(item, search.MessageScore)
            if score == 0.0:  # the lexical tail after a fusion (``memory.fusion.fused``)
                _flush(filler, later)
            if defer_low and item.seq in low and item.holds <= covered:
                later.append((score, item, lines))
                continue
            filler.add_message(score, item, lines)
        if filler.used >= room:
            break
    _flush(filler, later)
    return _within(filler.hits(), room, model=model)


def _words_said_more(ranked: list[tuple[float, object]]) -> frozenset[str]:
    """The question's words held by the ranked messages that say more (at least
    ``LOW_INFORMATION_TERMS`` distinct terms): a message that says little and holds only these
    waits for them."""
    held: set[str] = set()
    for _, item in ranked:
        if isinstance(item, search.MessageScore) and item.distinct_terms >= LOW_INFORMATION_TERMS:
            held |= item.holds
    return frozenset(held)


def _flush(filler: _Filler, later: list[_Deferred]) -> None:
    """The messages that say little, in their rank order, where the ranking's tail begins."""
    for score, item, lines in later:
        filler.add_message(score, item, lines)
    later.clear()


def _within(hits: list[SearchHit], room: int, *, model: str) -> tuple[list[SearchHit], int]:
    """Drop the last hits while the rendered whole is over ``room`` (joins can tokenize a token
    or two differently from the parts); the hits kept and the tokens they render to."""
    while hits:
        used = count_tokens("".join(rendered(h) for h in hits), model=model)
        if used <= room:
            return hits, used
        hits = hits[:-1]
    return hits, 0


def _held(scored: list["search.MessageScore"], names: dict[int | None, MemoryRecord]) -> set[int]:
    """The seqs of ``scored`` and of the turn after each that the snapshot naming them holds:
    an undone summary's messages are live again, yet its snapshot stays in the index
    (docs/compaction.md, "Take a compaction back"), so they are still found in it."""
    held = set()
    for message in scored:
        record = names.get(message.record_id) if message.record_id is not None else None
        if record is None or record.first_seq is None or record.last_seq is None:
            continue
        held.update(
            s for s in (message.seq, message.seq + 1) if record.first_seq <= s <= record.last_seq
        )
    return held


def _message_lines(
    session: ChatSession,
    scored: list["search.MessageScore"],
    *,
    live_before: int | None,
    held: set[int],
) -> tuple[dict[int, str], set[int]]:
    """Transcript lines (seq -> line) of ``scored`` and of the turn after each question among
    them, read in one query: compacted messages, those a snapshot holds (``held``), and live
    ones below ``live_before`` that are not pinned (a pin is in every request); and the seqs of
    ``scored`` that say little (fewer than ``LOW_INFORMATION_TERMS`` distinct search terms)."""
    if not scored:
        return {}, set()
    seqs = {m.seq for m in scored} | {m.seq + 1 for m in scored}
    # What a summary covers is its seat's (compaction's coverage rows, above this floor): the
    # lines a snapshot holds (``held``: compacted, or undone since, its snapshot still in the
    # index) are shown. Any other line is live history: shown below ``live_before`` (never the
    # message the turn answers, or what came after it), unpinned (a pin is in every request).
    visible = Q(seq__in=_seqs_in(held)) if held else Q(pk__in=[])
    if live_before:
        visible |= Q(seq__lt=live_before, pinned=False)
    rows = (
        Message.objects.filter(
            visible,
            session_id=session.pk,
            seq__in=_seqs_in(seqs),
            role__in=(Message.Role.USER, Message.Role.ASSISTANT),
        )
        .order_by()  # read into a dict: no sort
        .values_list("seq", "role", "content", "created_at", "bot_id")
    )
    asked = {m.seq for m in scored}
    labels = room_labels(session) if session.is_room else None
    lines, low = {}, set()
    for seq, role, content, created_at, bot_id in rows:
        text = content.strip()
        if not text:
            continue
        if seq not in asked and seq - 1 not in asked:
            continue
        speaker = role
        if labels is not None and not (role == Message.Role.ASSISTANT and bot_id == session.bot_id):
            speaker = labels.get(None if role == Message.Role.USER else bot_id, role)
        lines[seq] = transcript_line(seq, created_at, speaker, text)
        if seq in asked and not has_distinct_terms(text, LOW_INFORMATION_TERMS):
            low.add(seq)
    return lines, low


def _seqs_in(seqs: set[int]) -> object:
    """What ``seq__in`` takes for ``seqs``: on PostgreSQL one array parameter, not a list of
    ~300 that Django prepares one by one, psycopg binds one by one and PostgreSQL plans as a
    new statement each time (docs/performance.md, "Search latency, fourth pass")."""
    if connection.vendor == "postgresql":
        return RawSQL("SELECT unnest(%s::integer[])", (sorted(seqs),))
    return seqs


def uncovered_snapshots(records: QuerySet[MemoryRecord], session_id: int) -> QuerySet[MemoryRecord]:
    """The snapshots of ``records`` none of whose messages are indexed (a fusion's, which holds
    summaries; a snapshot from before message search), a failed pass's aside: its messages were
    never compacted, they are searched as themselves."""
    # NOT EXISTS per snapshot (the record_id index), not NOT IN over the session's whole index:
    # that was a hashed subplan beside a sequential scan of the records, on every search. The
    # session compared as ``session_id + 0``: on the session_id index PostgreSQL hashed all the
    # session's index rows (1,000 at the bench's size, 1.7 ms) where probing each snapshot by
    # record_id takes 0.5 (docs/performance.md).
    covered = MessageIndex.objects.alias(in_session=F("session_id") + 0).filter(
        in_session=session_id, record_id=OuterRef("pk")
    )
    return records.filter(kind=MemoryRecord.Kind.SNAPSHOT, indexed=True).exclude(Exists(covered))


def snapshot_hits(
    session: ChatSession,
    records: Callable[[], QuerySet[MemoryRecord]],
    text: str,
    *,
    room: int,
    limit: int,
    any_uncovered: Callable[[], bool] | None = None,
) -> list[SearchHit]:
    """Snapshots searched as records: ``uncovered_snapshots`` of the readable ones (``records``
    builds them). ``any_uncovered``: whether there are any, asked by the caller's compiled
    statement (``memory.queries``) instead of ``exists()`` built again."""
    if room <= 0 or limit <= 0:
        return []
    if any_uncovered is None:
        any_uncovered = uncovered_snapshots(records(), session.pk).exists
    if not any_uncovered():
        return []  # the usual case: every snapshot's messages are indexed
    snapshots = uncovered_snapshots(records(), session.pk)
    ranked = search.search_ranked(records=snapshots, query=text, limit=limit)
    if not ranked:
        return []
    by_id = {
        r.pk: r
        for r in MemoryRecord.objects.filter(pk__in=[pk for pk, _, _ in ranked]).defer(
            "body", "search_vector"
        )
    }
    if session.is_room:
        # A seat's snapshot whose messages another bot's snapshot indexed first: its messages
        # are searched as themselves (``seat_snapshots`` names it), not the whole record again.
        indexed = MessageIndex.objects.filter(
            session_id=session.pk, seq__gte=OuterRef("first_seq"), seq__lte=OuterRef("last_seq")
        )
        by_id = {
            r.pk: r
            for r in MemoryRecord.objects.filter(pk__in=list(by_id))
            .exclude(Exists(indexed))
            .defer("body", "search_vector")
        }
    hits = []
    for pk, rank, excerpt in ranked:
        record = by_id.get(pk)
        if record is None:  # deleted between the two queries, or a room's indexed one
            continue
        hits.append(
            SearchHit(
                record=record, excerpt=truncate_to_tokens(excerpt, EXCERPT_MAX_TOKENS), rank=rank
            )
        )
    return _within(hits, room, model="")[0]
