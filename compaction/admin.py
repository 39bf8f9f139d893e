"""Admins audit every summary: what it covers, what it kept, what it lost, how it was made.

Everything here is read-only: summaries, events and the compaction state are written by the
engine alone, and an edited row would contradict the seats' coverage and their running
totals. Staff need only the *view* permission (``seed_demo`` gives the demo
user exactly that in embedded mode).
"""

from typing import Any

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from compaction.audit import room_audit, summary_audit
from compaction.models import CompactionEvent, CompactionState, ContextRecord, SeatState, Summary
from compaction.records import part_describe, records_for_summary


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A summary deleted here left its messages covered by nothing: they dropped out of the
        # model's context while the seat's totals still counted them.
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in self.model._meta.fields] + [
            f.name for f in self.model._meta.many_to_many
        ]


def _admin_link(obj: Any, text: str) -> str:
    meta = obj._meta
    url = reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])
    return format_html('<a href="{}">{}</a>', url, text)


def _change_url(obj: Any) -> str:
    meta = obj._meta
    return reverse(f"admin:{meta.app_label}_{meta.model_name}_change", args=[obj.pk])


@admin.register(Summary)
class SummaryAdmin(ReadOnlyAdmin):
    """The summary audit: filters in the list, snapshot beside summary on the detail page."""

    change_form_template = "admin/compaction/summary/audit.html"
    list_display = [
        "id",
        "session",
        "bot_name",
        "user",
        "coverage",
        "level",
        "source_tokens",
        "token_count",
        "retention_display",
        "trigger",
        "status",
        "model",
        "created_at",
    ]
    # In a room each bot has its own summaries: ``?session__exact=<id>&bot__id__exact=<id>``
    # lists one bot's within a session (the filter offers the bots that wrote any).
    list_filter = [
        ("bot", admin.RelatedOnlyFieldListFilter),
        ("session__bot", admin.RelatedOnlyFieldListFilter),
        ("session__user", admin.RelatedOnlyFieldListFilter),
        "trigger",
        "status",
        "held",
        "level",
        "created_at",
        "model",
    ]
    list_select_related = ["session__bot", "session__user", "bot"]
    search_fields = ["text", "session__title", "session__user__username", "session__bot__name"]
    date_hierarchy = "created_at"
    fieldsets = [
        (
            None,
            {
                "fields": [
                    ("session", "bot"),
                    ("first_seq", "last_seq"),
                    ("level", "status", "trigger"),
                    ("model", "created_at", "superseded_at"),
                    # Reversible compaction (docs/context-records.md): undone when, still held,
                    # replaced by.
                    ("reverted_at", "held", "superseded_by"),
                    ("source_tokens", "token_count"),
                    ("retention", "missing_facts"),
                    "focus",
                    "parents",
                    "replies_made_from_this_summary",
                ]
            },
        ),
    ]

    @admin.display(description="bot", ordering="bot__name")
    def bot_name(self, obj: Summary) -> str:
        """The bot whose seat it was written from (a room's), else the chat's."""
        return (obj.bot or obj.session.bot).name

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "replies_made_from_this_summary"]

    @admin.display(description="replies made from this summary")
    def replies_made_from_this_summary(self, obj: Summary) -> str:
        found = records_for_summary(summary=obj)
        if not found:
            return "—"
        return format_html_join(
            ", ",
            "{}",
            ((_admin_link(record, f"reply #{record.message_id}"),) for record in found),
        )

    @admin.display(description="user", ordering="session__user__username")
    def user(self, obj: Summary) -> str:
        return obj.session.user.get_username()

    @admin.display(description="messages", ordering="first_seq")
    def coverage(self, obj: Summary) -> str:
        return f"{obj.first_seq}–{obj.last_seq}"

    @admin.display(description="retention", ordering="retention")
    def retention_display(self, obj: Summary) -> str:
        return f"{obj.retention:.0%}"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        summary = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if summary is not None and self.has_view_permission(request, summary):
            audit = summary_audit(summary=summary)
            extra["audit"] = audit
            extra["audit_event_links"] = [
                _admin_link(event, f"#{event.pk} {event.trigger} {event.outcome}")
                for event in audit.events
            ]
            if audit.snapshot is not None:
                extra["audit_snapshot_link"] = _admin_link(audit.snapshot, audit.snapshot.name)
            if summary.session.is_room:
                extra["audit_room_url"] = reverse(
                    "admin:compaction_summary_room", args=[summary.session_id]
                )
        return super().change_view(request, object_id, form_url, extra_context=extra)

    def get_urls(self) -> list[URLPattern]:
        room = path(
            "room/<int:session_id>/",
            self.admin_site.admin_view(self.room_view),
            name="compaction_summary_room",
        )
        return [room, *super().get_urls()]

    def room_view(self, request: HttpRequest, session_id: int) -> HttpResponse:
        """A room's audit: each bot's summaries side by side (a column per bot, a row per
        summarised stretch), each linking to its own audit page. Staff with the summary view
        permission only (``admin_view`` sends anyone else to the admin's login)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        audit = room_audit(session_id=session_id)
        if audit is None:
            raise Http404("No such session.")
        context = {
            **self.admin_site.each_context(request),
            "title": f"Room audit: {audit.session.title or f'session {audit.session.pk}'}",
            "opts": self.model._meta,
            "room": audit,
            "rows": [
                (row, [[(s, _change_url(s)) for s in cell] for cell in row.cells])
                for row in audit.rows
            ],
            "summaries_url": reverse("admin:compaction_summary_changelist")
            + f"?session__exact={audit.session.pk}",
        }
        return TemplateResponse(request, "admin/compaction/summary/room_audit.html", context)


@admin.register(CompactionEvent)
class CompactionEventAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "session",
        "bot",
        "trigger",
        "outcome",
        "reason",
        "tokens_before",
        "tokens_after",
        "source_tokens",
        "summary_tokens",
        "model",
        "duration",
        "snapshot_link",
        "summary_link",
    ]
    list_filter = [
        "outcome",
        "trigger",
        "reason",
        ("bot", admin.RelatedOnlyFieldListFilter),
        ("session__bot", admin.RelatedOnlyFieldListFilter),
        "created_at",
        "model",
    ]
    list_select_related = ["session", "bot", "snapshot", "summary"]
    search_fields = ["session__title", "error", "session__user__username"]
    date_hierarchy = "created_at"

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, obj: CompactionEvent) -> str:
        return (
            f"{obj.duration_ms / 1000:.2f} s"
            if obj.duration_ms >= 1000
            else f"{obj.duration_ms} ms"
        )

    @admin.display(description="snapshot")
    def snapshot_link(self, obj: CompactionEvent) -> str:
        return _admin_link(obj.snapshot, obj.snapshot.name) if obj.snapshot else "—"

    @admin.display(description="summary")
    def summary_link(self, obj: CompactionEvent) -> str:
        return _admin_link(obj.summary, f"summary #{obj.summary.pk}") if obj.summary else "—"


@admin.register(CompactionState)
class CompactionStateAdmin(ReadOnlyAdmin):
    list_display = ["session", "cooldown_until", "backoff_until", "backoff_step", "updated_at"]


@admin.register(SeatState)
class SeatStateAdmin(ReadOnlyAdmin):
    """A room's bots, each with its own compaction state and totals (docs/rooms.md)."""

    list_display = [
        "session",
        "bot",
        "covered_tokens",
        "hidden_tokens",
        "cooldown_until",
        "backoff_until",
        "updated_at",
    ]
    list_filter = [("bot", admin.RelatedOnlyFieldListFilter)]
    list_select_related = ["session", "bot"]


def record_html(record: ContextRecord | None) -> SafeString | str:
    """A record as the admin shows it: per call its model, budget, usage and latency, then its
    parts in the order they were sent."""
    if record is None:
        return "—"
    calls = []
    for call in record.calls:
        usage = call.get("usage") or {}
        head = format_html(
            "<strong>call {} · {}</strong> · budget {} · sent {} tokens · provider {} in / {} out"
            " · {} ms{}",
            call.get("round", 0),
            call.get("model", ""),
            call.get("budget", ""),
            (call.get("admission") or {}).get("selected_tokens", "?"),
            usage.get("prompt_tokens", "—"),
            usage.get("completion_tokens", "—"),
            call.get("latency_ms", ""),
            f" · {call['error']}" if call.get("error") else "",
        )
        parts = format_html_join(
            "", "<li>{}</li>", ((part_describe(p),) for p in call.get("parts", []))
        )
        calls.append(format_html("<div>{}<ol>{}</ol></div>", head, parts))
    return format_html_join("", "{}", ((c,) for c in calls))


@admin.register(ContextRecord)
class ContextRecordAdmin(ReadOnlyAdmin):
    """What the model saw for each reply. Immutable: written once by the turn."""

    list_display = ["id", "message", "session", "bot", "created_at"]
    list_select_related = ["message", "session", "bot"]
    list_filter = [("bot", admin.RelatedOnlyFieldListFilter), "created_at"]
    date_hierarchy = "created_at"

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [*super().get_readonly_fields(request, obj), "what_the_model_saw"]

    @admin.display(description="what the model saw")
    def what_the_model_saw(self, obj: ContextRecord) -> SafeString | str:
        return record_html(obj)
