from django.contrib import admin

from memory.models import MemoryRecord


@admin.register(MemoryRecord)
class MemoryRecordAdmin(admin.ModelAdmin):
    list_display = ["name", "session", "kind", "first_seq", "last_seq", "token_count", "indexed"]
    list_filter = ["kind", "indexed"]
    search_fields = ["name", "description", "body"]
    raw_id_fields = ["session"]
