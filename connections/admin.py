"""Admin: connections (the key is a password field: written, never shown), quotas, counters.

The admin saves through ``connections.services.check_connection_fields``, so a key is encrypted
and a base URL or key variable checked exactly as over the API.
"""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.http import HttpRequest

from chat_platform.errors import ValidationFailed
from connections import services
from connections.models import Connection, GroupQuota, TokenCounter, UserQuota


class ConnectionAdminForm(forms.ModelForm):
    api_key = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="Write-only: stored encrypted, never shown. Leave empty to keep the stored key.",
    )
    clear_api_key = forms.BooleanField(required=False, help_text="Remove the stored key.")

    class Meta:
        model = Connection
        fields = [
            "name",
            "kind",
            "provider",
            "base_url",
            "api_key_env",
            "public",
            "users",
            "groups",
        ]

    def _post_clean(self) -> None:
        super()._post_clean()
        if self.errors:
            return
        fields: dict[str, Any] = {
            name: self.cleaned_data.get(name)
            for name in ("name", "kind", "provider", "base_url", "api_key_env", "public")
        }
        fields = {k: ("" if v is None else v) for k, v in fields.items()}
        if self.cleaned_data.get("api_key"):
            fields["api_key"] = self.cleaned_data["api_key"]
        elif self.cleaned_data.get("clear_api_key"):
            fields["api_key"] = None
        stored = Connection.objects.filter(pk=self.instance.pk).values_list("base_url", flat=True)
        old_base = (stored.first() or self.instance.base_url) if self.instance.pk else None
        try:
            self.new_key, _ = services.check_connection_fields(
                fields=fields, connection=self.instance
            )
            if old_base is not None:
                services.connection_moved_check(
                    self.instance, old_base=old_base, new_key=self.new_key
                )
        except ValidationFailed as exc:
            for field, errors in exc.details.items():
                target = field if field in self.fields else None
                for error in errors:
                    self.add_error(target, error)

    def save(self, commit: bool = True) -> Connection:
        services.connection_key_store(self.instance, getattr(self, "new_key", None))
        return super().save(commit=commit)


@admin.register(Connection)
class ConnectionAdmin(admin.ModelAdmin):
    form = ConnectionAdminForm
    list_display = ("name", "kind", "base_url", "public", "has_key", "models_refreshed_at")
    readonly_fields = ("model_list", "models_refreshed_at")
    filter_horizontal = ("users", "groups")
    actions = ["refresh_models"]

    @admin.display(boolean=True)
    def has_key(self, obj: Connection) -> bool:
        return obj.has_key

    def save_model(self, request: HttpRequest, obj: Connection, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)

    @admin.action(description="Refresh models")
    def refresh_models(self, request: HttpRequest, queryset: Any) -> None:
        for connection in queryset:
            try:
                services.connection_models_refresh(user=request.user, connection_id=connection.pk)
            except ValidationFailed as exc:
                self.message_user(request, exc.message, level=messages.ERROR)
            else:
                self.message_user(request, f"{connection.name}: models refreshed.")


@admin.register(UserQuota)
class UserQuotaAdmin(admin.ModelAdmin):
    list_display = ("user", "daily_token_limit")
    autocomplete_fields = ("user",)


@admin.register(GroupQuota)
class GroupQuotaAdmin(admin.ModelAdmin):
    list_display = ("group", "daily_token_limit")


@admin.register(TokenCounter)
class TokenCounterAdmin(admin.ModelAdmin):
    list_display = ("subject", "day", "used", "reserved")
    list_filter = ("day",)
    search_fields = ("subject",)
