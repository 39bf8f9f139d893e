"""allauth's signals that end an account's credentials (docs/accounts.md, "Who keeps access"):
an identity connected to the account, a password reset or change, a second factor turned on
(credentials made with the password alone do not outlive it). Adapters: the work is
``services.credentials_revoke``; the person is told on the next page."""

from typing import Any

from allauth.account.signals import password_changed, password_reset
from allauth.mfa.models import Authenticator
from allauth.mfa.signals import authenticator_added
from allauth.socialaccount.signals import social_account_added
from django.contrib import messages

from accounts import services

CONNECTED_MESSAGE = (
    "Single sign-on is now connected to this account. Its API token and API keys were revoked "
    "({count} ended): make new ones if you need them."
)
MFA_MESSAGE = (
    "Two-factor authentication is on. The API token and API keys made before it were revoked "
    "({count} ended): make new ones if you need them."
)
CHANGED_MESSAGE = (
    "Your password was changed. The account's API token and API keys were revoked "
    "({count} ended): make new ones if you need them."
)
RESET_MESSAGE = (
    "Your password was reset. The account's API token and API keys were revoked "
    "({count} ended): make new ones if you need them."
)


def _revoked(request: Any, user: Any, message: str) -> None:
    count = services.credentials_revoke(user=user)
    if request is not None and hasattr(request, "_messages"):
        messages.warning(request, message.format(count=count))


def on_identity_connected(
    sender: Any, request: Any = None, sociallogin: Any = None, **_: Any
) -> None:
    """An identity joined an account, by email at sign-in or from the connections page: what
    could reach the account before ends."""
    _revoked(request, sociallogin.user, CONNECTED_MESSAGE)


def on_password_reset(sender: Any, request: Any = None, user: Any = None, **_: Any) -> None:
    _revoked(request, user, RESET_MESSAGE)


def on_password_changed(sender: Any, request: Any = None, user: Any = None, **_: Any) -> None:
    """A changed password (a leaked one, perhaps) ends what was made with the old one, as the
    other browsers' sessions end: a token or key someone else holds stops working at once."""
    _revoked(request, user, CHANGED_MESSAGE)


def on_authenticator_added(
    sender: Any, request: Any = None, user: Any = None, authenticator: Any = None, **_: Any
) -> None:
    # Recovery codes come with the TOTP authenticator: one revocation, one message.
    if getattr(authenticator, "type", None) != Authenticator.Type.RECOVERY_CODES:
        _revoked(request, user, MFA_MESSAGE)


def connect() -> None:
    social_account_added.connect(on_identity_connected, dispatch_uid="accounts-connected")
    password_reset.connect(on_password_reset, dispatch_uid="accounts-password-reset")
    password_changed.connect(on_password_changed, dispatch_uid="accounts-password-changed")
    authenticator_added.connect(on_authenticator_added, dispatch_uid="accounts-mfa-added")
