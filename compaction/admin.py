"""Admins audit every summary: what it covers, what it kept, what it lost, how it was made."""

from django.contrib import admin

from compaction.models import CompactionEvent, CompactionState, Summary


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Summary)
class SummaryAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "session",
        "level",
        "first_seq",
        "last_seq",
        "source_tokens",
        "token_count",
        "retention",
        "trigger",
        "status",
        "model",
        "created_at",
    ]
    list_filter = ["status", "trigger", "level", "model"]
    search_fields = ["text", "session__title", "session__user__username"]
    readonly_fields = [f.name for f in Summary._meta.fields] + ["parents", "missing_facts"]
    raw_id_fields = ["session"]


@admin.register(CompactionEvent)
class CompactionEventAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "session",
        "trigger",
        "outcome",
        "reason",
        "tokens_before",
        "tokens_after",
        "source_tokens",
        "summary_tokens",
        "model",
        "duration_ms",
        "created_at",
    ]
    list_filter = ["trigger", "outcome", "reason", "model"]
    search_fields = ["session__title", "error"]
    readonly_fields = [f.name for f in CompactionEvent._meta.fields]

    def has_delete_permission(self, request, obj=None):
        return True  # clearing events never touches summaries


@admin.register(CompactionState)
class CompactionStateAdmin(admin.ModelAdmin):
    list_display = ["session", "cooldown_until", "backoff_until", "backoff_step", "updated_at"]
    raw_id_fields = ["session"]
