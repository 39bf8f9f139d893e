from django.contrib import admin
from rest_framework_api_key.admin import APIKeyModelAdmin

from openai_api.models import ApiKey, ApiSession, ApiTurn


@admin.register(ApiKey)
class ApiKeyAdmin(APIKeyModelAdmin):
    list_display = [
        *APIKeyModelAdmin.list_display,
        "user",
        "access",
        "daily_token_limit",
        "last_used_at",
    ]
    list_filter = ["access", "revoked"]
    search_fields = ["name", "prefix", "user__username"]
    raw_id_fields = ["user"]
    filter_horizontal = ["bots"]


@admin.register(ApiSession)
class ApiSessionAdmin(admin.ModelAdmin):
    list_display = ["session", "key_name", "key", "forked_from", "created_at"]
    search_fields = ["key_name", "session__title", "session__user__username"]
    raw_id_fields = ["session", "key", "forked_from"]


@admin.register(ApiTurn)
class ApiTurnAdmin(admin.ModelAdmin):
    list_display = ["reply", "session", "key", "created_at"]
    raw_id_fields = ["reply", "session", "key"]
    readonly_fields = ["options", "base_position", "base_hash", "pending"]
