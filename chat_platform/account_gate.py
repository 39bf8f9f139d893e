"""What every way in asks of an account before it may act (docs/accounts.md, "Every way in").

The login page lets an account in only when it is active (approved, in ``approval`` mode) and,
under ``ACCOUNT_EMAIL_VERIFICATION=mandatory``, when it has a verified email address (allauth's
own check, ``has_verified_email``). The API's ways in hold the same: DRF's token and session
authentication (``TokenAuthentication`` and ``SessionAuthentication`` below), API keys on
``/api/v1/`` and ``/v1/`` (``openai_api.keys.key_authenticate``) and the websocket handshake
(``chat_platform.realtime_auth``). A second factor is asked for where credentials are made (the
login page and ``POST /api/v1/auth/token/``), so a credential that exists was made with it.
"""

from typing import Any

from allauth.account.utils import has_verified_email
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils.translation import gettext_lazy as _
from drf_spectacular.authentication import SessionScheme
from rest_framework import authentication, exceptions

from chat_platform.compiled import CompiledValues, instances_from, model_fields

UNVERIFIED_MESSAGE = "This account's email address is not verified yet: confirm it first."
INACTIVE_MESSAGE = "This account is inactive or waiting for approval."


def account_refusal(user: Any) -> str | None:
    """Why ``user`` may not act now (a message for the refusal), or None when it may."""
    if user is None or not getattr(user, "is_active", False):
        return INACTIVE_MESSAGE
    if email_verification_missing(user):
        return UNVERIFIED_MESSAGE
    return None


def email_verification_missing(user: Any) -> bool:
    """Mandatory verification and no verified address: the login page refuses this account.
    One query, and only when verification is mandatory."""
    return settings.ACCOUNT_EMAIL_VERIFICATION == "mandatory" and not has_verified_email(user)


def _checked(result: tuple[Any, Any] | None) -> tuple[Any, Any] | None:
    if result is not None:
        refusal = account_refusal(result[0])
        if refusal is not None:
            raise exceptions.AuthenticationFailed(refusal)
    return result


class TokenAuthentication(authentication.TokenAuthentication):
    """DRF's ``Authorization: Token <key>``, for accounts the login page would let in."""

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        return _checked(super().authenticate(request))

    def authenticate_credentials(self, key: str) -> tuple[Any, Any]:
        """DRF's, with the token and its user read by a statement compiled once per process
        (every API request makes it; chat_platform/compiled.py): the same answers."""
        from rest_framework.authtoken.models import Token

        if self.get_model() is not Token:
            return super().authenticate_credentials(key)
        rows = _TOKEN_WITH_USER.rows(key=key)
        if not rows:
            raise exceptions.AuthenticationFailed(_("Invalid token."))
        token, user = instances_from(rows[0], Token, get_user_model())
        token.user = user
        if not user.is_active:
            raise exceptions.AuthenticationFailed(_("User inactive or deleted."))
        return (user, token)


def token_user(key: str) -> Any:
    """The user of the API token ``key`` (None: no such token), read with the token by the
    statement the API's token authentication runs, compiled once per process."""
    from rest_framework.authtoken.models import Token

    rows = _TOKEN_WITH_USER.rows(key=key)
    if not rows:
        return None
    return instances_from(rows[0], Token, get_user_model())[1]


def _token_with_user(key: str) -> Any:
    from rest_framework.authtoken.models import Token

    fields = (*model_fields(Token), *model_fields(get_user_model(), "user__"))
    return Token.objects.filter(key=key).values_list(*fields)[:1]


_TOKEN_WITH_USER = CompiledValues(_token_with_user, name="token_with_user")


class SessionAuthentication(authentication.SessionAuthentication):
    """DRF's session authentication (CSRF included), for accounts the login page would let in:
    a session made before verification became mandatory does not outlive the rule."""

    def authenticate(self, request: Any) -> tuple[Any, Any] | None:
        return _checked(super().authenticate(request))


class GatedSessionScheme(SessionScheme):
    """The session cookie in the OpenAPI schema, as drf-spectacular says DRF's own."""

    target_class = "chat_platform.account_gate.SessionAuthentication"
