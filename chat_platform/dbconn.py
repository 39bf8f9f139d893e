"""Give the thread's database connection back while it waits (docs/security.md).

With psycopg's pool (the default for PostgreSQL, ``chat_platform/settings/core.py``) a thread
borrows a connection at its first query and keeps it until the request or task ends. A request
that then waits on a model, a compaction lease or a reply held a connection it did not use:
twenty such requests emptied the pool and every other user's request answered 503. Waiting code
calls ``connection_release`` first; the next query borrows a connection again.
"""

from django.db import connection


def connection_release() -> None:
    """Hand this thread's pooled connection back to the pool, unless a transaction is open on it
    (closing it would roll that back). Without a pool it stays: reconnecting costs more than an
    idle connection of a process's own."""
    pooled = bool(connection.settings_dict.get("OPTIONS", {}).get("pool"))
    if pooled and not connection.in_atomic_block:
        connection.close()
