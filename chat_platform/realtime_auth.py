"""Websocket handshake auth: the Django session cookie, or ``Authorization: Token <key>``."""

from typing import Any

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser


@database_sync_to_async
def _user_for_token(key: str) -> Any:
    from rest_framework.authtoken.models import Token

    token = Token.objects.select_related("user").filter(key=key).first()
    if token is None or not token.user.is_active:
        return AnonymousUser()
    return token.user


class _TokenAuthMiddleware:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        headers = dict(scope.get("headers") or [])
        raw = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, key = raw.partition(" ")
        if scheme.lower() == "token" and key.strip():
            scope = dict(scope, user=await _user_for_token(key.strip()))
        return await self.inner(scope, receive, send)


def TokenOrSessionAuthMiddleware(inner: Any) -> Any:  # noqa: N802 - reads like the Channels stacks
    # The session stack runs first and sets scope["user"]; a token header, if present, wins.
    return AuthMiddlewareStack(_TokenAuthMiddleware(inner))


class BrowserOriginValidator(OriginValidator):
    """Checks Origin against ALLOWED_HOSTS when there is one.

    Browsers always send Origin, so this blocks cross-site websocket hijacking of the session
    cookie; API clients (``Authorization: Token``) send none and are let through to auth.
    """

    def valid_origin(self, parsed_origin: Any) -> bool:
        if parsed_origin is None:
            return True
        return super().valid_origin(parsed_origin)


def origin_validated(inner: Any) -> Any:
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = ["localhost", "127.0.0.1", "[::1]"]
    return BrowserOriginValidator(inner, allowed)
