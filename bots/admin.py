from django.contrib import admin

from bots.models import Bot, ChatSession, Message


@admin.register(Bot)
class BotAdmin(admin.ModelAdmin):
    list_display = ["name", "owner", "model", "is_shared", "compaction_enabled", "created_at"]
    list_filter = ["is_shared", "compaction_enabled", "recall_enabled"]
    search_fields = ["name", "model", "owner__username"]
    raw_id_fields = ["owner"]
    fieldsets = [
        (None, {"fields": ["owner", "name", "system_prompt", "is_shared"]}),
        (
            "Model",
            {
                "fields": [
                    "model",
                    "api_base",
                    "api_key_env",
                    "temperature",
                    "max_output_tokens",
                    "context_window",
                ]
            },
        ),
        (
            "Compaction",
            {
                "fields": [
                    "compaction_enabled",
                    "compaction_threshold",
                    "compaction_kept_percent",
                    "compaction_model",
                    "compaction_fallback_extractive",
                ]
            },
        ),
        ("Memory", {"fields": ["memory_index_size", "recall_enabled"]}),
    ]


@admin.register(ChatSession)
class ChatSessionAdmin(admin.ModelAdmin):
    list_display = ["id", "title", "user", "bot", "last_seq", "updated_at"]
    search_fields = ["title", "user__username", "bot__name"]
    raw_id_fields = ["user", "bot"]


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = ["id", "session", "seq", "role", "kind", "status", "token_count", "pinned"]
    list_filter = ["role", "kind", "status", "pinned"]
    search_fields = ["content"]
    raw_id_fields = ["session", "reply_to"]
    readonly_fields = ["created_at", "updated_at"]
