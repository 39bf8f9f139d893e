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
"""

from typing import Any

TABLE = "memory_memoryrecord"
FTS_TABLE = "memory_record_fts"

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


def search_schema_install(connection: Any) -> None:
    """Create (or re-create) the vendor's search objects. Idempotent."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(PG_INSTALL)
        elif connection.vendor == "sqlite":
            for statement in SQLITE_STATEMENTS:
                cursor.execute(statement)


def search_schema_uninstall(connection: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(PG_UNINSTALL)
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
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM django_migrations WHERE app = %s AND name = %s",
            ["memory", "0003_search"],
        )
        if cursor.fetchone() is None:  # not migrated that far (or unapplied): leave it alone
            return
    search_schema_install(connection)
