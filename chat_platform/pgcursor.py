"""The cursor of the PostgreSQL connections when the server binds parameters (docs/operations.md,
``DATABASE_PREPARE_THRESHOLD``).

A statement is prepared on a connection at its first run there (the default threshold, 0). A
prepared statement holds one statement, so a script of several (``DELETE FROM a; DELETE FROM
b;``) would fail there ("cannot insert multiple commands into a prepared statement"). Scripts,
DDL and one-off commands are sent without parameters, and every statement of a turn has them
(the ORM passes a sequence, empty or not): a statement run without parameters is never
prepared, whatever the threshold.

Each connection Django opens (or borrows from the pool) gets this cursor in place of Django's
own for server-bound parameters (``use_preparing_cursor``, on ``connection_created``; bots'
``ready``). The setting stays data: the connection's options are sent to an import's child
process as JSON (``transfer/services/jobs.py``).
"""

from __future__ import annotations

from typing import Any

from django.db.backends.postgresql.base import ServerBindingCursor


class PreparingCursor(ServerBindingCursor):
    def execute(
        self,
        query: Any,
        params: Any = None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> PreparingCursor:
        if params is None and prepare is None:
            prepare = False
        return super().execute(query, params, prepare=prepare, binary=binary)


def use_preparing_cursor(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created``: a PostgreSQL connection whose server binds the parameters opens
    ``PreparingCursor``s (an attribute of the psycopg connection: no round trip)."""
    raw = getattr(connection, "connection", None)
    if getattr(raw, "cursor_factory", None) is ServerBindingCursor:
        raw.cursor_factory = PreparingCursor
