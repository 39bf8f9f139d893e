from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from bots.bot_validation import check_bot_settings
from bots.models import Bot, ChatSession, Message
from bots.services import BOT_FIELDS
from chat_platform.errors import ValidationFailed


class BotAdminForm(forms.ModelForm):
    """The admin saves bots through the same checks as the API, with the staff member acting."""

    acting_user: Any = None

    class Meta:
        model = Bot
        fields = ["owner", *BOT_FIELDS]

    def _post_clean(self) -> None:
        previous_api_base = None if self.instance._state.adding else self.initial.get("api_base")
        super()._post_clean()  # copies the fields onto the instance and runs full_clean
        if self.errors:
            return
        try:
            check_bot_settings(
                user=self.acting_user,
                bot=self.instance,
                previous_api_base=previous_api_base,
                changed=set(self.changed_data),
            )
        except ValidationFailed as exc:
            for field, messages in exc.details.items():
                self.add_error(field if field in self.fields else None, messages)


@admin.register(Bot)
class BotAdmin(admin.ModelAdmin):
    form = BotAdminForm

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any):
        form = super().get_form(request, obj, change=change, **kwargs)
        return type(form.__name__, (form,), {"acting_user": request.user})

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
