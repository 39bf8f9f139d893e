"""The statements Django's query builder compiles while a block runs: what is not compiled once
per process (chat_platform/compiled.py) nor written by hand (docs/performance.md)."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db.models.sql.compiler import SQLCompiler


@contextmanager
def built_reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The statements Django's query builder compiles on this thread (``SQLCompiler.as_sql``
    outside a compilation), not once per process (chat_platform/compiled.py) nor by hand: the
    list fills while the block runs."""
    built: list[str] = []
    local = threading.local()
    thread = threading.current_thread()
    real_as_sql = SQLCompiler.as_sql

    def as_sql(self, *args, **kwargs):
        depth = getattr(local, "depth", 0)
        local.depth = depth + 1
        try:
            sql, params = real_as_sql(self, *args, **kwargs)
        finally:
            local.depth = depth
        if depth == 0 and threading.current_thread() is thread:
            built.append(sql)
        return sql, params

    with monkeypatch.context() as patched:
        patched.setattr(SQLCompiler, "as_sql", as_sql)
        yield built
