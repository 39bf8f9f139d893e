"""The cursor of the PostgreSQL connections when the server binds parameters (docs/operations.md,
``DATABASE_PREPARE_THRESHOLD``).

A statement is prepared on a connection at its first run there (the default threshold, 0). A
prepared statement holds one statement, so a script of several (``DELETE FROM a; DELETE FROM
b;``) would fail there ("cannot insert multiple commands into a prepared statement"). Scripts,
DDL and one-off commands are sent without parameters, and every statement of a turn has them
(the ORM passes a sequence, empty or not): a statement run without parameters is never
prepared, whatever the threshold.
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
