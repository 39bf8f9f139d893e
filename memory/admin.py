from django.contrib import admin

from memory.models import MemoryRecord, RecallEvent


@admin.register(MemoryRecord)
class MemoryRecordAdmin(admin.ModelAdmin):
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
    ]
    list_filter = ["kind", "scope", "indexed"]
    search_fields = ["name", "description", "body"]
    raw_id_fields = ["session", "user", "bot"]
    exclude = ["search_vector"]


@admin.register(RecallEvent)
class RecallEventAdmin(admin.ModelAdmin):
    """Read-only: an audit of what the model looked up."""

    list_display = ["created_at", "session", "message", "round", "tool", "query", "tokens"]
    list_filter = ["tool"]
    raw_id_fields = ["session", "message"]

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
