"""The database objects behind record search, one set per vendor (installed by migration 0003).

PostgreSQL: a ``BEFORE INSERT OR UPDATE OF name, description, body`` trigger fills
``search_vector`` (name weighted A, description B, body C; ``english`` config) and a GIN index
serves ``@@``. Updates that touch none of the three columns (``indexed``, ``updated_at``) do not
re-parse the body. A body too long for one tsvector (PostgreSQL's 1 MB limit) is indexed by its
first 100,000 characters instead of failing the write.

SQLite: an external-content FTS5 table ``memory_record_fts`` (porter stemming, so "lives" finds
"live" as on PostgreSQL) kept in sync by three triggers. Django rebuilds a SQLite table when a
later migration alters it, and dropping the old table drops its triggers, so ``sqlite_fts_ensure``
also runs after every ``migrate`` (see ``MemoryConfig.ready``): it recreates anything missing and
rebuilds the index from the table, which is cheap at embedded-mode sizes.

Messages (``memory_messageindex``, installed by migration 0004): the terms are computed in
Python (``memory.terms``), so neither database parses language. PostgreSQL: a stored generated
column ``terms_vector = to_tsvector('simple', terms)`` (the ``simple`` configuration only splits
on spaces) with a GIN index; Django's model does not list it (the database writes it). SQLite: an
external-content FTS5 table ``memory_message_fts`` over ``terms`` (the ``unicode61`` tokenizer
without diacritic folding, so a term is one token, as stored), synced by insert and delete
triggers (an index row is never updated).
"""

from collections.abc import Sequence
from typing import Any

from django.db import connection

from chat_platform.compiled import CompiledValues
from memory.terms import terms

# What search indexes: what people said, not tool traffic, commands or notices.
INDEXED_ROLES = ("user", "assistant")
INDEX_BATCH = 500

TABLE = "memory_memoryrecord"

# Literal SQL (no interpolation): these are DDL, written once, read by humans.
PG_INSTALL = """
CREATE OR REPLACE FUNCTION memory_record_search_vector() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    BEGIN
        NEW.search_vector :=
            setweight(to_tsvector('english', coalesce(NEW.name, '')), 'A')
            || setweight(to_tsvector('english', coalesce(NEW.description, '')), 'B')
            || setweight(to_tsvector('english', coalesce(NEW.body, '')), 'C');
    EXCEPTION WHEN program_limit_exceeded THEN
        NEW.search_vector :=
            setweight(to_tsvector('english', coalesce(NEW.name, '')), 'A')
            || setweight(to_tsvector('english', coalesce(NEW.description, '')), 'B')
            || setweight(to_tsvector('english', left(coalesce(NEW.body, ''), 100000)), 'C');
    END;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS memory_record_search_vector ON memory_memoryrecord;
CREATE TRIGGER memory_record_search_vector
    BEFORE INSERT OR UPDATE OF name, description, body ON memory_memoryrecord
    FOR EACH ROW EXECUTE FUNCTION memory_record_search_vector();
CREATE INDEX IF NOT EXISTS memory_record_search_gin
    ON memory_memoryrecord USING gin (search_vector);
UPDATE memory_memoryrecord SET name = name;
"""

PG_UNINSTALL = """
DROP INDEX IF EXISTS memory_record_search_gin;
DROP TRIGGER IF EXISTS memory_record_search_vector ON memory_memoryrecord;
DROP FUNCTION IF EXISTS memory_record_search_vector();
UPDATE memory_memoryrecord SET search_vector = NULL;
"""

SQLITE_STATEMENTS = [
    """CREATE VIRTUAL TABLE IF NOT EXISTS memory_record_fts USING fts5(
        name, description, body,
        content='memory_memoryrecord', content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )""",
    """CREATE TRIGGER IF NOT EXISTS memory_record_fts_ai AFTER INSERT ON memory_memoryrecord
    BEGIN
        INSERT INTO memory_record_fts(rowid, name, description, body)
        VALUES (new.id, new.name, new.description, new.body);
    END""",
    """CREATE TRIGGER IF NOT EXISTS memory_record_fts_ad AFTER DELETE ON memory_memoryrecord
    BEGIN
        INSERT INTO memory_record_fts(memory_record_fts, rowid, name, description, body)
        VALUES ('delete', old.id, old.name, old.description, old.body);
    END""",
    """CREATE TRIGGER IF NOT EXISTS memory_record_fts_au
    AFTER UPDATE OF name, description, body ON memory_memoryrecord
    BEGIN
        INSERT INTO memory_record_fts(memory_record_fts, rowid, name, description, body)
        VALUES ('delete', old.id, old.name, old.description, old.body);
        INSERT INTO memory_record_fts(rowid, name, description, body)
        VALUES (new.id, new.name, new.description, new.body);
    END""",
    "INSERT INTO memory_record_fts(memory_record_fts) VALUES ('rebuild')",
]

SQLITE_UNINSTALL = [
    "DROP TRIGGER IF EXISTS memory_record_fts_ai",
    "DROP TRIGGER IF EXISTS memory_record_fts_ad",
    "DROP TRIGGER IF EXISTS memory_record_fts_au",
    "DROP TABLE IF EXISTS memory_record_fts",
]


MESSAGE_TABLE = "memory_messageindex"

# The tsvector is stored (a generated column), not an expression index: when the query's words
# are common across all sessions the planner reads the session's rows instead of the GIN index,
# and matching a stored vector costs a tenth of parsing ``terms`` again (bench/memory_search.py).
PG_MESSAGE_INSTALL = """
ALTER TABLE memory_messageindex ADD COLUMN IF NOT EXISTS terms_vector tsvector
    GENERATED ALWAYS AS (to_tsvector('simple', terms)) STORED;
CREATE INDEX IF NOT EXISTS memory_message_terms_gin
    ON memory_messageindex USING gin (terms_vector);
"""

PG_MESSAGE_UNINSTALL = """
DROP INDEX IF EXISTS memory_message_terms_gin;
ALTER TABLE memory_messageindex DROP COLUMN IF EXISTS terms_vector;
"""

SQLITE_MESSAGE_STATEMENTS = [
    """CREATE VIRTUAL TABLE IF NOT EXISTS memory_message_fts USING fts5(
        terms,
        content='memory_messageindex', content_rowid='message_id',
        tokenize='unicode61 remove_diacritics 0'
    )""",
    """CREATE TRIGGER IF NOT EXISTS memory_message_fts_ai AFTER INSERT ON memory_messageindex
    BEGIN
        INSERT INTO memory_message_fts(rowid, terms) VALUES (new.message_id, new.terms);
    END""",
    """CREATE TRIGGER IF NOT EXISTS memory_message_fts_ad AFTER DELETE ON memory_messageindex
    BEGIN
        INSERT INTO memory_message_fts(memory_message_fts, rowid, terms)
        VALUES ('delete', old.message_id, old.terms);
    END""",
    "INSERT INTO memory_message_fts(memory_message_fts) VALUES ('rebuild')",
]

SQLITE_MESSAGE_UNINSTALL = [
    "DROP TRIGGER IF EXISTS memory_message_fts_ai",
    "DROP TRIGGER IF EXISTS memory_message_fts_ad",
    "DROP TABLE IF EXISTS memory_message_fts",
]


def _pg_script(cursor: Any, script: str) -> None:
    """Run several statements at once on PostgreSQL: never as a prepared statement, which holds
    one (``DATABASE_PREPARE_THRESHOLD``, ``chat_platform/settings/core.py``)."""
    cursor.cursor.execute(script, prepare=False)


def message_search_install(connection: Any) -> None:
    """Create (or re-create) the message index's search objects. Idempotent."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _pg_script(cursor, PG_MESSAGE_INSTALL)
        elif connection.vendor == "sqlite":
            for statement in SQLITE_MESSAGE_STATEMENTS:
                cursor.execute(statement)


def message_search_uninstall(connection: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _pg_script(cursor, PG_MESSAGE_UNINSTALL)
        elif connection.vendor == "sqlite":
            for statement in SQLITE_MESSAGE_UNINSTALL:
                cursor.execute(statement)


def _migrated(connection: Any, name: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM django_migrations WHERE app = %s AND name = %s", ["memory", name]
        )
        return cursor.fetchone() is not None


def search_schema_install(connection: Any) -> None:
    """Create (or re-create) the vendor's search objects. Idempotent."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _pg_script(cursor, PG_INSTALL)
        elif connection.vendor == "sqlite":
            for statement in SQLITE_STATEMENTS:
                cursor.execute(statement)


def search_schema_uninstall(connection: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            _pg_script(cursor, PG_UNINSTALL)
        elif connection.vendor == "sqlite":
            for statement in SQLITE_UNINSTALL:
                cursor.execute(statement)


def sqlite_fts_ensure(connection: Any) -> None:
    """After ``migrate`` on SQLite: restore triggers a table rebuild dropped, then rebuild."""
    if connection.vendor != "sqlite":
        return
    tables = connection.introspection.table_names()
    if TABLE not in tables:  # migrated backwards past 0001
        return
    # Not migrated that far (or unapplied): leave it alone.
    if _migrated(connection, "0003_search"):
        search_schema_install(connection)
    if MESSAGE_TABLE in tables and _migrated(connection, "0004_message_index"):
        message_search_install(connection)


def messages_index_rows(
    message_model: Any,
    index_model: Any,
    *,
    session_id: int,
    first_seq: int,
    last_seq: int,
    record_id: int,
    covered: Any = None,
) -> int:
    """Index the compacted messages ``first_seq``–``last_seq`` of a session not indexed yet,
    each held by the record ``record_id``; how many were indexed. The models are passed in, so
    ``memory.services.messages_index`` (the app's models) and migration 0004's backfill (the
    historical ones) write the same rows. A message without a single search term (all stop
    words) is not indexed: nothing could find it.

    Messages indexed when they were written (``record`` NULL: searchable across the user's
    chats, not yet recall material) are taken into the record, not indexed twice.

    ``covered``: the ids of the messages the record's summary covers (compaction passes a
    subquery of its coverage rows, which this floor does not read); None (a branch's copies,
    the backfill): the finished, unpinned messages of the range."""
    compacted: dict[str, Any] = {"status": "complete", "pinned": False}
    if covered is not None:
        compacted["pk__in"] = covered
    held = index_model.objects.filter(
        session_id=session_id,
        seq__gte=first_seq,
        seq__lte=last_seq,
        record_id__isnull=True,
        message_id__in=message_model.objects.filter(
            session_id=session_id,
            seq__gte=first_seq,
            seq__lte=last_seq,
            **compacted,
        ).values("pk"),
    ).update(record_id=record_id)
    done = index_model.objects.filter(
        session_id=session_id, seq__gte=first_seq, seq__lte=last_seq
    ).values("message_id")
    rows = (
        message_model.objects.filter(
            session_id=session_id,
            seq__gte=first_seq,
            seq__lte=last_seq,
            **compacted,
            role__in=INDEXED_ROLES,
            kind="chat",
        )
        .exclude(content="")
        .exclude(pk__in=done)
        .values_list("pk", "seq", "content")
    )
    entries = []
    for pk, seq, content in rows:
        words = terms(content)
        if words:
            entries.append(
                index_model(
                    message_id=pk,
                    session_id=session_id,
                    seq=seq,
                    record_id=record_id,
                    terms=" ".join(words),
                    length=len(words),
                )
            )
    index_model.objects.bulk_create(entries, batch_size=INDEX_BATCH, ignore_conflicts=True)
    return held + len(entries)


def _written_query(message_model: Any, index_model: Any, message_ids: list[int]) -> Any:
    """The finished messages among ``message_ids`` that are not indexed yet, with their text and
    their session's embedding model."""
    return (
        message_model.objects.filter(
            pk__in=message_ids,
            role__in=INDEXED_ROLES,
            kind="chat",
            status__in=("complete", "interrupted"),
        )
        .exclude(content="")
        .exclude(pk__in=index_model.objects.filter(message_id__in=message_ids).values("pk"))
        .values_list("pk", "session_id", "seq", "content", "session__bot__embedding_model")
    )


# (message model, index model) -> the read of one or two written messages, compiled once.
_WRITTEN_PAIR: dict[tuple[Any, Any], CompiledValues] = {}


def messages_index_written_rows(
    message_model: Any,
    index_model: Any,
    *,
    message_ids: list[int],
    to_embed: dict[int, list[int]] | None = None,
) -> int:
    """Index finished messages when they are written (``record`` NULL until a compaction takes
    them into its snapshot): what people said, with at least one search term, not indexed yet.
    One read and one insert for any number of messages; how many were indexed. ``to_embed``
    is given, by session, the rows written whose session's bot has an embedding model (read
    with the messages: a row just written has no vector yet)."""
    if not message_ids:
        return 0
    if len(message_ids) <= 2:  # a turn's question and reply: compiled once per process
        key = (message_model, index_model)
        compiled = _WRITTEN_PAIR.get(key)
        if compiled is None:
            compiled = _WRITTEN_PAIR.setdefault(
                key,
                CompiledValues(
                    lambda first, second: _written_query(
                        message_model, index_model, [first, second]
                    ),
                    name="index_written_pair",
                ),
            )
        rows = compiled.rows(first=message_ids[0], second=message_ids[-1])
    else:
        rows = _written_query(message_model, index_model, message_ids)
    entries = []
    for pk, session_id, seq, content, embedding_model in rows:
        words = terms(content)
        if words:
            if to_embed is not None and embedding_model:
                to_embed.setdefault(session_id, []).append(pk)
            entries.append(
                index_model(
                    message_id=pk,
                    session_id=session_id,
                    seq=seq,
                    record_id=None,
                    terms=" ".join(words),
                    length=len(words),
                )
            )
    index_model.objects.bulk_create(entries, batch_size=INDEX_BATCH, ignore_conflicts=True)
    return len(entries)


def messages_index_copy_rows(
    message_model: Any,
    index_model: Any,
    *,
    source_id: int,
    targets: Sequence[tuple[int, int]],
) -> int:
    """Branches' copies (each ``(chat, before_seq)`` of ``targets`` made from ``source_id``
    before its ``before_seq``) indexed as their originals are, terms and vector alike, in one
    INSERT … SELECT however many branches: the copies not indexed yet (a copied snapshot's
    were, with it), ``record`` NULL (live in the branch until its own compaction takes them).
    Search across the user's chats leaves a branch's copies out while its original holds them;
    once the original is deleted they are the branch's own, and recall in the branch finds them
    as live history. How many were indexed."""
    if not targets:
        return 0
    quote = connection.ops.quote_name
    index, message = quote(index_model._meta.db_table), quote(message_model._meta.db_table)
    copied = ("terms", "length", "embedding", "embedding_model")
    columns = ", ".join(quote(c) for c in ("message_id", "session_id", "seq", "record_id", *copied))
    values = ", ".join(f"s.{quote(c)}" for c in copied)
    # VALUES names its columns column1, column2 on PostgreSQL and SQLite alike.
    branches = ", ".join(["(CAST(%s AS integer), CAST(%s AS integer))"] * len(targets))
    with connection.cursor() as cursor:
        # Identifiers from the models, values in params.
        cursor.execute(
            f"INSERT INTO {index} ({columns}) "  # noqa: S608
            f"SELECT t.id, t.session_id, s.seq, NULL, {values} FROM {index} s "
            f"JOIN (VALUES {branches}) b ON s.seq < b.column2 "
            f"JOIN {message} t ON t.session_id = b.column1 AND t.seq = s.seq "
            "WHERE s.session_id = %s "
            f"AND NOT EXISTS (SELECT 1 FROM {index} x WHERE x.message_id = t.id)",
            [*(n for target in targets for n in target), source_id],
        )
        return max(cursor.rowcount, 0)
