"""Reads of the memory app: what a session may read, the index, recall reads and search.

Everything here takes an already-authorised ``session`` (the interfaces resolve it through
``bots.queries.session_get_for_user``). "Readable from a session" (CONTRACT §10) is one rule,
``records_readable_q``: the session's own records plus the bot-scoped records of
(session.user, session.bot). A session-scoped record shadows a bot-scoped one of the same name, so
a name always means one record inside a session.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from django.db.models import Q, QuerySet

from bots.models import ChatSession
from chat_platform.compiled import CompiledValues
from chat_platform.errors import NotFound, ValidationFailed
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens
from memory import search
from memory.models import MemoryRecord

READ_MAX_NAMES = 5
READ_BODY_MAX_TOKENS = 2000
SEARCH_MAX_HITS = 5
EXCERPT_MAX_TOKENS = 300
# Newest first everywhere (index, list, frame): an edited record counts as new.
NEWEST_FIRST = ("-updated_at", "-id")


def records_readable_q(*, session: ChatSession) -> Q:
    own = Q(scope=MemoryRecord.Scope.SESSION, session_id=session.pk)
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
    text: str  # exactly one line of CONTRACT §10, without a newline
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
        session_id=session.pk, user_id=session.user_id, bot_id=session.bot_id, limit=limit
    )
    for name, kind, first_seq, last_seq, description in rows:
        text = _line_text(name, kind, first_seq, last_seq, description)
        tokens = count_tokens(f"{text}\n", model=model)
        lines.append(IndexLine(name=name, text=text, tokens=tokens))
    return lines


def _index_lines_query(*, session_id: int, user_id: int, bot_id: int, limit: int) -> QuerySet:
    """``memory_index_records`` as the columns a line needs (compiled once: every turn runs it)."""
    session = ChatSession(pk=session_id, user_id=user_id, bot_id=bot_id)
    return _index_records(session).values_list(
        "name", "kind", "first_seq", "last_seq", "description"
    )[:limit]


_INDEX_LINES = CompiledValues(_index_lines_query, shape=("limit",))


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
    excerpt: str  # ≤ EXCERPT_MAX_TOKENS tokens around the match, matches wrapped in **…**
    rank: float

    @property
    def name(self) -> str:
        return self.record.name


def records_search(
    *,
    session: ChatSession,
    query: object,
    limit: int = SEARCH_MAX_HITS,
    kind: str | None = None,
    scope: str | None = None,
) -> list[SearchHit]:
    """Ranked full-text hits among the records readable from ``session``, best first.

    PostgreSQL full-text search in real mode, SQLite FTS5 in embedded mode (``memory.search``
    holds both). The query is always data: any text, however shaped, gives hits or none, never
    an error. All words must match (websearch rules on PostgreSQL); when that finds nothing, any
    word may match, ranked, so a question phrased in full still finds the record that answers it.
    """
    if limit <= 0 or not isinstance(query, str):
        return []
    records = records_for_session(session=session, kind=kind, scope=scope)
    ranked = search.search_ranked(records=records, query=query, limit=limit)
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
                record=record,
                excerpt=truncate_to_tokens(excerpt, EXCERPT_MAX_TOKENS),
                rank=rank,
            )
        )
    return hits
