from typing import Any

from django.apps import AppConfig
from django.db import connections
from django.db.models.signals import post_migrate

from memory.search_schema import sqlite_fts_ensure


def _sqlite_fts_ensure(sender: AppConfig, using: str, **kwargs: Any) -> None:
    sqlite_fts_ensure(connections[using])


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Memory records and recall"

    def ready(self) -> None:
        # SQLite drops a table's triggers when a later migration rebuilds it; put them back.
        post_migrate.connect(_sqlite_fts_ensure, sender=self)
