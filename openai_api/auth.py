"""API keys on ``/api/v1/`` (DRF): ``Authorization: Bearer <key>`` signs in as the key's user.

A key means what it says (docs/openai-api.md, "Keys"): a ``read`` key may only read
(GET, HEAD, OPTIONS); a key limited to some bots reaches only those bots and their sessions —
the chokepoints of ``bots.queries`` see the limit on the request's user, every path that names
a session, message, summary, attachment or bot is checked here (another bot's is
``not_found``), and what spans all of a user's chats (search, compaction events of every chat,
the export of everything) is refused to it, and so are writes that change the account beyond
those bots' chats (a new bot, a provider connection, a tool server).
"""

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from bots.queries import user_bot_scope, user_bot_scope_set
from chat_platform.errors import NotFound, PermissionDenied
from openai_api.keys import (
    READ_ONLY_MESSAGE,
    KeyRefused,
    key_authenticate,
    key_bot_scope,
    key_scope_holds,
)
from openai_api.models import ApiKey

# Endpoints (URL names) that read across all of a user's chats: not for a key limited to some
# bots. ``compaction-events`` is one only without ``?session=``.
_ACROSS_CHATS = frozenset({"search", "export-all", "compaction-events"})
SCOPE_MESSAGE = "This API key is limited to some bots; it cannot use what spans all of your chats."
# Endpoints whose writes change the account beyond its bots' chats (new bots, provider
# connections, tool servers, whose secrets it may hold): not for a key limited to some bots.
_ACCOUNT_WRITES = frozenset(
    {
        "bot-list",
        "connection-list",
        "connection-detail",
        "connection-refresh-models",
        "tool-server-list",
        "tool-server-detail",
        "tool-server-refresh-tools",
    }
)
ACCOUNT_MESSAGE = (
    "This API key is limited to some bots; it cannot create bots or change connections or "
    "tool servers."
)


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
        user = key.user
        scope = key_bot_scope(key=key)
        if scope is not None:
            user_bot_scope_set(user, scope, key_id=key.pk)
        return user, key

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"


class ApiKeyAccess(BasePermission):
    message = READ_ONLY_MESSAGE

    def has_permission(self, request: Request, view: Any) -> bool:
        key = request.auth
        if not isinstance(key, ApiKey):
            return True
        if key.access == ApiKey.Access.READ and request.method not in SAFE_METHODS:
            return False
        scope = user_bot_scope(request.user)
        if scope is not None:
            match = request.resolver_match
            name = match.url_name if match is not None else None
            if name in _ACROSS_CHATS and not (
                name == "compaction-events" and request.query_params.get("session")
            ):
                raise PermissionDenied(SCOPE_MESSAGE)
            if name in _ACCOUNT_WRITES and request.method not in SAFE_METHODS:
                raise PermissionDenied(ACCOUNT_MESSAGE)
            kwargs = match.kwargs if match is not None else {}
            if not key_scope_holds(user=request.user, scope=scope, kwargs=kwargs):
                raise NotFound("Not found.")
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
