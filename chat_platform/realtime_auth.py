"""Websocket handshake auth: the Django session cookie, or ``Authorization: Token <key>``, for
accounts the login page would let in (``chat_platform.account_gate``)."""

from importlib import import_module
from typing import Any
from urllib.parse import urlsplit

import structlog
from channels.auth import AuthMiddleware
from channels.db import database_sync_to_async
from channels.security.websocket import WebsocketDenier
from channels.sessions import CookieMiddleware, SessionMiddleware
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain

from chat_platform.account_gate import account_refusal, token_user
from chat_platform.outage import OUTAGE_ERRORS

log = structlog.get_logger(__name__)

# Set in a handshake's scope when its credential could not be read (PostgreSQL saturated or
# down): the consumer accepts and closes with 4503, as for any outage it meets itself.
# Uncaught, the error became an HTTP 500 the client cannot read.
AUTH_UNAVAILABLE = "auth_unavailable"


def _unavailable(scope: dict) -> Any:
    log.exception("ws_auth_unavailable", path=scope.get("path", ""))
    scope[AUTH_UNAVAILABLE] = True
    return AnonymousUser()


@database_sync_to_async
def _user_for_token(key: str) -> Any:
    # The API's own token read, compiled once per process: every socket opens with it.
    user = token_user(key)
    if user is None or account_refusal(user) is not None:
        return AnonymousUser()
    return user


@database_sync_to_async
def _gated(user: Any) -> Any:
    """The session's user, if the login page would still let them in (account_gate)."""
    if getattr(user, "is_authenticated", False) and account_refusal(user) is not None:
        return AnonymousUser()
    return user


def _token_key(scope: dict) -> str | None:
    """The key of an ``Authorization: Token <key>`` header, if the handshake has one."""
    headers = dict(scope.get("headers") or [])
    raw = headers.get(b"authorization", b"").decode("latin-1")
    scheme, _, key = raw.partition(" ")
    return key.strip() if scheme.lower() == "token" and key.strip() else None


class _SessionAuthMiddleware(AuthMiddleware):
    """channels' session auth, except for a handshake that names a token: the token's user wins
    (``_TokenAuthMiddleware``), so the cookie session's user, a hop to the database thread and
    back, was resolved for nothing (docs/performance.md "A turn's CPU, sixth pass")."""

    async def resolve_scope(self, scope: dict) -> None:
        if _token_key(scope) is None:
            try:
                await super().resolve_scope(scope)
            except OUTAGE_ERRORS:
                scope["user"]._wrapped = _unavailable(scope)
        else:  # replaced by the token's user next
            scope["user"]._wrapped = AnonymousUser()


# ``credential_valid``'s token owner when the caller has not read it.
_UNREAD: Any = object()


def credential_valid(scope: dict, *, token_owner: Any = _UNREAD) -> bool:
    """Whether an open socket's credential still signs its user in, as a new handshake would:
    the token it showed still exists, or its session still holds the user with the same
    password (Django's session auth hash), and the account may still act (account_gate).
    A password reset deletes the token and changes the hash, so a socket opened before it
    stops with it (docs/api.md, "WebSocket"). Synchronous: call it off the event loop.
    ``token_owner``: the user of the socket's token (None: no such token) as the caller read
    it just now (``bots.queries.token_user_and_session``), not read again."""
    from django.contrib.auth import HASH_SESSION_KEY, SESSION_KEY, get_user_model
    from django.utils.crypto import constant_time_compare

    if "auth_token" in scope:  # the token and its user in one statement, compiled once
        owner = token_user(scope["auth_token"]) if token_owner is _UNREAD else token_owner
        return owner is not None and owner.pk == scope["user"].pk and account_refusal(owner) is None
    user = get_user_model().objects.filter(pk=scope["user"].pk).first()
    if user is None or account_refusal(user) is not None:
        return False
    session_key = getattr(scope.get("session"), "session_key", None)
    if not session_key:
        return False
    stored = import_module(settings.SESSION_ENGINE).SessionStore(session_key).load()
    return str(stored.get(SESSION_KEY)) == str(user.pk) and constant_time_compare(
        stored.get(HASH_SESSION_KEY, ""), user.get_session_auth_hash()
    )


class _TokenAuthMiddleware:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        key = _token_key(scope)
        try:
            if key is not None:
                scope = dict(scope, user=await _user_for_token(key), auth_token=key)
            elif settings.ACCOUNT_EMAIL_VERIFICATION == "mandatory" and "user" in scope:
                # A session's user is active (Django's session auth checks that); under
                # mandatory verification the address is asked for as well.
                scope = dict(scope, user=await _gated(scope["user"]))
        except OUTAGE_ERRORS:
            scope = dict(scope)
            scope["user"] = _unavailable(scope)
        return await self.inner(scope, receive, send)


def TokenOrSessionAuthMiddleware(inner: Any) -> Any:  # noqa: N802 - reads like the Channels stacks
    # The session stack runs first and sets scope["user"]; a token header, if present, wins.
    # channels' AuthMiddlewareStack, with its session auth skipped for a token.
    return CookieMiddleware(SessionMiddleware(_SessionAuthMiddleware(_TokenAuthMiddleware(inner))))


def _allowed_hosts() -> list[str]:
    # As HttpRequest.get_host(): with DEBUG and no ALLOWED_HOSTS, the local names are allowed.
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return allowed


def origin_allowed(*, origin: str, host: str | None, secure: bool) -> bool:
    """Django's CSRF origin check (``CsrfViewMiddleware._origin_verified``) for a handshake.

    The Origin must be exactly the scheme, host and port the browser connected to (the ``Host``
    header, itself in ALLOWED_HOSTS), or an origin in CSRF_TRUSTED_ORIGINS (``*.`` wildcards
    as Django reads them). ``http://127.0.0.1:9999`` is not ``http://127.0.0.1:8000``.
    """
    if host:
        domain, _port = split_domain_port(host)
        this_site = f"{'https' if secure else 'http'}://{host}"
        if domain and validate_host(domain, _allowed_hosts()) and origin == this_site:
            return True
    trusted = list(settings.CSRF_TRUSTED_ORIGINS)
    if origin in trusted:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    return any(
        is_same_domain(parsed.netloc, urlsplit(t).netloc.replace("*", "", 1))
        for t in trusted
        if "*" in t and urlsplit(t).scheme == parsed.scheme
    )


def _handshake_secure(scope: dict, headers: dict[bytes, bytes]) -> bool:
    if scope.get("scheme") == "wss":
        return True
    # Behind a TLS-terminating proxy, as HttpRequest.is_secure() reads it.
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy_header:
        name, value = proxy_header
        sent = headers.get(name.removeprefix("HTTP_").lower().replace("_", "-").encode())
        return sent is not None and sent.decode("latin-1").split(",")[0].strip() == value
    return False


class BrowserOriginValidator:
    """Refuses a handshake whose Origin is not this site's (cross-site websocket hijacking).

    Browsers always send Origin, so the session cookie only works from this site's pages; API
    clients (``Authorization: Token``) send none and are let through to auth.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: dict, receive: Any, send: Any) -> Any:
        headers = dict(scope.get("headers") or [])
        origin = headers.get(b"origin")
        if origin is not None:
            host = headers.get(b"host")
            if not origin_allowed(
                origin=origin.decode("latin-1"),
                host=host.decode("latin-1") if host is not None else None,
                secure=_handshake_secure(scope, headers),
            ):
                return await WebsocketDenier()(scope, receive, send)
        return await self.inner(scope, receive, send)


def origin_validated(inner: Any) -> Any:
    return BrowserOriginValidator(inner)
