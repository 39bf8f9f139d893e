"""API keys on ``/api/v1/`` (DRF): ``Authorization: Bearer <key>`` signs in as the key's user;
a ``read`` key may only read (GET, HEAD, OPTIONS)."""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from openai_api.keys import KeyRefused, key_authenticate
from openai_api.models import ApiKey


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        header = get_authorization_header(request).decode("latin-1")
        scheme, _, raw = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        try:
            key = key_authenticate(raw=raw.strip())
        except KeyRefused:
            raise exceptions.AuthenticationFailed(
                "Incorrect, revoked or expired API key."
            ) from None
        return key.user, key

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"


class ApiKeyAccess(BasePermission):
    message = "This API key is read-only."

    def has_permission(self, request: Request, view: Any) -> bool:
        key = request.auth
        if isinstance(key, ApiKey) and key.access == ApiKey.Access.READ:
            return request.method in SAFE_METHODS
        return True


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """The key in the OpenAPI schema (drf-spectacular finds it by the class it extends)."""

    target_class = "openai_api.auth.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key from /api/v1/api-keys/ (read keys may only read).",
        }
