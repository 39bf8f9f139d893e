"""Memory records and recall events, read-only: snapshots are the audit trail of compaction and
info records are written through ``memory.services`` (name rules, scopes, token counts)."""

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from memory.models import MemoryRecord, RecallEvent


class _ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(MemoryRecord)
class MemoryRecordAdmin(_ReadOnly):
    list_display = [
        "name",
        "kind",
        "scope",
        "session",
        "user",
        "bot",
        "first_seq",
        "last_seq",
        "token_count",
        "indexed",
        "updated_at",
    ]
    list_filter = ["kind", "scope", "indexed", ("bot", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["session", "user", "bot"]
    search_fields = ["name", "description", "body"]
    exclude = ["search_vector"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in MemoryRecord._meta.fields if f.name != "search_vector"]


@admin.register(RecallEvent)
class RecallEventAdmin(_ReadOnly):
    """An audit of what the model looked up."""

    list_display = ["created_at", "session", "message", "round", "tool", "query", "tokens"]
    list_filter = ["tool", "created_at"]
    list_select_related = ["session", "message"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in RecallEvent._meta.fields]
