from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from bots.bot_pages import MODEL_SUGGESTIONS, connection_model_suggestions
from bots.models import Bot, ChatSession, Message
from chat_platform.errors import ValidationFailed
from compaction.admin import record_html
from compaction.models import ContextRecord
from turns.bot_validation import check_bot_settings, check_bot_slug
from turns.services.bot import (
    BOT_BASIC_FIELDS,
    BOT_COMPACTION_FIELDS,
    BOT_FIELDS,
    BOT_MEMORY_FIELDS,
    BOT_TOOLS_FIELDS,
    bot_chats_deleted,
    bot_remove,
)
from turns.services.session import chats_delete


class ModelListInput(forms.TextInput):
    """A model string typed freely (any litellm model), with the models discovered on the
    connections the staff member may use offered as a list (a ``<datalist>``), as on the bot
    page (docs/connections.md)."""

    list_id = "bot-model-suggestions"

    def __init__(self, suggestions: list[str], attrs: dict[str, Any] | None = None) -> None:
        super().__init__({**(attrs or {}), "list": self.list_id})
        self.suggestions = suggestions

    def render(self, name: str, value: Any, attrs: Any = None, renderer: Any = None) -> str:
        field = super().render(name, value, attrs, renderer)
        options = format_html_join("", '<option value="{}">', ((m,) for m in self.suggestions))
        return format_html('{}<datalist id="{}">{}</datalist>', field, self.list_id, options)


class BotAdminForm(forms.ModelForm):
    """The admin saves bots through the same checks as the API, with the staff member acting."""

    acting_user: Any = None

    class Meta:
        model = Bot
        # The slug too, as the API has it (the form shows the current one; blank: from the name).
        fields = ["owner", "slug", *BOT_FIELDS]
        help_texts = {
            "slug": "The bot's @handle in rooms and its /v1 model id: lowercase letters, digits "
            "and hyphens, unique among the owner's bots. Blank: made from the name."
        }

    def clean(self) -> dict[str, Any]:
        """A slug another of the owner's bots has is the API's field error (``check_bot_slug``),
        before the database constraint's generic one."""
        data = super().clean()
        owner, slug = data.get("owner"), data.get("slug")
        if owner is not None and slug:
            try:
                check_bot_slug(bot=Bot(pk=self.instance.pk, owner=owner, slug=slug))
            except ValidationFailed as exc:
                self.add_error("slug", exc.details["slug"])
        return data

    def _post_clean(self) -> None:
        previous_api_base = None if self.instance._state.adding else self.initial.get("api_base")
        previous_tools = None if self.instance._state.adding else self.initial.get("tools")
        super()._post_clean()  # copies the fields onto the instance and runs full_clean
        if self.errors:
            return
        try:
            check_bot_settings(
                user=self.acting_user,
                bot=self.instance,
                previous_api_base=previous_api_base,
                changed=set(self.changed_data),
                previous_tools=previous_tools if isinstance(previous_tools, list) else None,
            )
        except ValidationFailed as exc:
            for field, messages in exc.details.items():
                self.add_error(field if field in self.fields else None, messages)


@admin.register(Bot)
class BotAdmin(admin.ModelAdmin):
    form = BotAdminForm

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any):
        form = super().get_form(request, obj, change=change, **kwargs)
        acting = type(form.__name__, (form,), {"acting_user": request.user})
        if "model" in acting.base_fields:  # a fresh class per request: its fields are its own
            suggestions = connection_model_suggestions(request.user) + MODEL_SUGGESTIONS
            acting.base_fields["model"].widget = ModelListInput(list(dict.fromkeys(suggestions)))
        return acting

    list_display = ["name", "owner", "model", "is_shared", "compaction_enabled", "created_at"]
    list_filter = ["is_shared", "compaction_enabled", "recall_enabled"]
    search_fields = ["name", "model", "owner__username"]
    raw_id_fields = ["owner"]
    # The same sections as the bot page (bots/bot_pages.py): basic, then Advanced.
    fieldsets = [
        (
            "Basic settings",
            {"fields": ["owner", BOT_BASIC_FIELDS[0], "slug", *BOT_BASIC_FIELDS[1:]]},
        ),
        ("Advanced: Compaction", {"classes": ["collapse"], "fields": [*BOT_COMPACTION_FIELDS]}),
        ("Advanced: Memory", {"classes": ["collapse"], "fields": [*BOT_MEMORY_FIELDS]}),
        # A JSON list of "<server>/<tool>" or "<server>/*" (docs/tools.md).
        ("Advanced: Tools", {"classes": ["collapse"], "fields": [*BOT_TOOLS_FIELDS]}),
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # A bot's owner is who made it: moving it would leave the owner's chats with it behind
        # (the API has no such change either).
        fields = list(super().get_readonly_fields(request, obj))
        return fields if obj is None else [*fields, "owner"]

    # Deleting goes the API's way (docs/bots.md, "Deleting a bot"): the owner's chats with it go,
    # other people's stay and the bot is retired; the page lists what goes.
    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        listed: list[Any] = []
        chats = 0
        for bot in objs:
            going = list(bot_chats_deleted(bot))
            chats += len(going)
            listed += [str(bot), [f"Chat: {chat}" for chat in going]]
        counts = {"bots": len(objs), "chats": chats}
        return listed, counts, set(), []

    def delete_model(self, request: HttpRequest, obj: Bot) -> None:
        bot_remove(obj, by=request.user)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for bot in queryset:
            bot_remove(bot, by=request.user)


# Counters and statuses are written by the services alone (seqs by one conditional UPDATE, the
# running context totals with every message, status by compare-and-set claims): an edit here
# would corrupt them, so they are read-only. What a summary covers is compaction's (its admin).
# Sessions and messages are made by chatting, never added here.


@admin.register(ChatSession)
class ChatSessionAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "title",
        "user",
        "bot",
        "last_seq",
        "context_tokens",
        "context_messages",
        "updated_at",
    ]
    list_filter = [("bot", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["user", "bot"]
    search_fields = ["title", "user__username", "bot__name"]
    fields = [
        "title",
        "user",
        "bot",
        "last_seq",
        "context_tokens",
        "context_messages",
        "last_admission",
        "created_at",
        "updated_at",
    ]
    readonly_fields = [
        "user",
        "bot",
        "last_seq",
        "context_tokens",
        "context_messages",
        "last_admission",
        "created_at",
        "updated_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    # As the API deletes a chat (``chats_delete``: its rows locked first, its sockets closed).
    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        return [f"Chat: {chat}" for chat in objs], {"chats": len(objs)}, set(), []

    def delete_model(self, request: HttpRequest, obj: ChatSession) -> None:
        chats_delete(lambda: ChatSession.objects.filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        chats_delete(lambda: ChatSession.objects.filter(pk__in=ids))


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    """Read-only: a message's text, counts and status belong to the turn that wrote them."""

    list_display = [
        "id",
        "session",
        "seq",
        "role",
        "kind",
        "status",
        "token_count",
        "pinned",
    ]
    list_filter = ["role", "kind", "status", "pinned"]
    list_select_related = ["session"]
    search_fields = ["content"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in Message._meta.fields] + ["what_the_model_saw"]

    @admin.display(description="what the model saw")
    def what_the_model_saw(self, obj: Message) -> Any:
        """The reply's context record beside it (read-only, like the message)."""
        return record_html(ContextRecord.objects.filter(message=obj).first())

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # One message gone leaves its chat's running totals and the summaries over it wrong;
        # a chat is deleted whole.
        return False
