from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from rest_framework_api_key.admin import APIKeyModelAdmin

from accounts.admin_credentials import OrdinaryAccountsOnly
from openai_api.models import ApiKey, ApiSession, ApiTurn


@admin.register(ApiKey)
class ApiKeyAdmin(OrdinaryAccountsOnly, APIKeyModelAdmin):
    """Keys are made by their owners (the settings page, the API), never here: a key made for
    somebody is a way into their account. Staff revoke one, name it, limit it."""

    list_display = [
        *APIKeyModelAdmin.list_display,
        "user",
        "access",
        "daily_token_limit",
        "last_used_at",
    ]
    list_filter = ["access", "revoked"]
    search_fields = ["name", "prefix", "user__username"]
    filter_horizontal = ["bots"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return [*super().get_readonly_fields(request, obj), "user", "last_used_at"]


class BookkeepingAdmin(admin.ModelAdmin):
    """Which key a chat or a turn of the /v1 API belongs to, written by the API alone: viewed
    and deleted here, never added or changed (moving a superuser's chat to one's own key hands
    it over; docs/security.md, "The admin")."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ApiSession)
class ApiSessionAdmin(BookkeepingAdmin):
    list_display = ["session", "key_name", "key", "forked_from", "created_at"]
    search_fields = ["key_name", "session__title", "session__user__username"]
    raw_id_fields = ["session", "key", "forked_from"]


@admin.register(ApiTurn)
class ApiTurnAdmin(BookkeepingAdmin):
    list_display = ["reply", "session", "key", "created_at"]
    raw_id_fields = ["reply", "session", "key"]
    readonly_fields = ["options", "base_position", "base_hash", "pending"]
