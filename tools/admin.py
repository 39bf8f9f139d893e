"""Admin: tool servers (headers are a write-only field: written, never shown).

The admin saves through ``tools.services.check_tool_server_fields``, so headers are encrypted
and the name and URL checked exactly as over the API.
"""

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest

from chat_platform.errors import ValidationFailed
from tools import services
from tools.models import ToolServer


class ToolServerAdminForm(forms.ModelForm):
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text=(
            'Write-only: a JSON object such as {"Authorization": "Bearer …"}, stored encrypted, '
            "never shown. Leave empty to keep the stored headers."
        ),
    )
    clear_headers = forms.BooleanField(required=False, help_text="Remove the stored headers.")

    class Meta:
        model = ToolServer
        fields = ["name", "url", "transport", "public", "groups"]

    def _post_clean(self) -> None:
        super()._post_clean()
        if self.errors:
            return
        fields: dict[str, Any] = {
            name: self.cleaned_data.get(name) for name in ("name", "url", "transport", "public")
        }
        raw = self.cleaned_data.get("headers") or ""
        if raw.strip():
            try:
                fields["headers"] = json.loads(raw)
            except ValueError:
                self.add_error("headers", "Not valid JSON.")
                return
        elif self.cleaned_data.get("clear_headers"):
            fields["headers"] = None
        stored = ToolServer.objects.filter(pk=self.instance.pk).values_list("url", flat=True)
        old_url = (stored.first() or self.instance.url) if self.instance.pk else None
        try:
            self.new_headers, _ = services.check_tool_server_fields(
                fields=fields, server=self.instance
            )
            if old_url is not None:
                services.tool_server_moved_check(
                    self.instance, old_url=old_url, headers=self.new_headers
                )
        except ValidationFailed as exc:
            for field, errors in exc.details.items():
                target = field if field in self.fields else None
                for error in errors:
                    self.add_error(target, error)

    def save(self, commit: bool = True) -> ToolServer:
        services.tool_server_headers_store(self.instance, getattr(self, "new_headers", None))
        return super().save(commit=commit)


@admin.register(ToolServer)
class ToolServerAdmin(admin.ModelAdmin):
    form = ToolServerAdminForm
    list_display = ("name", "url", "transport", "public", "tools_refreshed_at")
    readonly_fields = ("header_names", "tool_list", "tools_refreshed_at", "refresh_error")
    filter_horizontal = ("groups",)
    actions = ["refresh_tools"]

    def save_model(self, request: HttpRequest, obj: ToolServer, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)

    @admin.action(description="Refresh tools")
    def refresh_tools(self, request: HttpRequest, queryset: Any) -> None:
        for server in queryset:
            try:
                services.tool_server_tools_refresh(user=request.user, server_id=server.pk)
            except ValidationFailed as exc:
                self.message_user(request, exc.message, level=messages.ERROR)
            else:
                self.message_user(request, f"{server.name}: tools refreshed.")
