"""django-allauth adapters: the sign-up mode, invitations, approvals and the SSO rules.

``ACCOUNT_SIGNUP_MODE`` decides who may use ``/accounts/signup/`` (``is_open_for_signup``); the
account is made in one transaction with its invitation claim or its approval request
(``save_user``), so a refused claim leaves no account behind. SSO sign-ins must carry a verified
email in ``OIDC_ALLOWED_DOMAINS`` (when set); they create accounts only with
``OIDC_CREATE_ACCOUNTS``; in ``approval`` mode those accounts wait like any other. They sign into
an existing account by email only when this site verified its address (``authenticate_by_email``).
"""

import logging
import smtplib
from typing import Any

import jwt
import structlog
from allauth.account.adapter import DefaultAccountAdapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest
from django.shortcuts import render

from accounts import services

logger = logging.getLogger(__name__)
log = structlog.get_logger(__name__)

INVITE_SESSION_KEY = "accounts_invite"


def _refusal(request: HttpRequest, *, title: str, message: str, status: int = 403) -> Any:
    return ImmediateHttpResponse(
        render(
            request, "accounts/refused.html", {"title": title, "message": message}, status=status
        )
    )


def _invite_refused(request: HttpRequest, exc: services.InvitationRefused) -> Any:
    request.session.pop(INVITE_SESSION_KEY, None)
    return _refusal(request, title="Invitation refused", message=str(exc))


class AccountAdapter(DefaultAccountAdapter):
    def send_mail(self, template_prefix: str, email: str, context: dict[str, Any]) -> None:
        """A mail server that is down or refuses the message never fails the page (it answered
        500 after the address was stored): the failure is an ERROR in the log for the operator,
        and a signed-in user is told; an anonymous page (a password reset) says what it says
        for any address, so it never tells whether an account exists."""
        try:
            super().send_mail(template_prefix, email, context)
        except (smtplib.SMTPException, OSError):
            log.exception("account_email_send_failed", template=template_prefix)
            request = getattr(self, "request", None)
            if request is not None:
                request.account_mail_failed = True  # no "sent" message after it (add_message)
            if request is not None and request.user.is_authenticated:
                messages.error(
                    request,
                    "The confirmation email could not be sent: the mail server did not take "
                    "it. Try again later, or ask an administrator.",
                )

    def add_message(
        self,
        request: HttpRequest,
        level: int,
        message_template: str | None = None,
        message_context: dict[str, Any] | None = None,
        extra_tags: str = "",
        message: str | None = None,
    ) -> None:
        if getattr(request, "account_mail_failed", False) and (message_template or "").endswith(
            "email_confirmation_sent.txt"
        ):
            return  # ``send_mail`` said it was not sent
        if message_template == "account/messages/logged_in.txt":
            # The chat a sign-in lands on shows no notices: "Successfully signed in as …" waited
            # for the next page that does, long after. The header says who is signed in.
            return
        super().add_message(request, level, message_template, message_context, extra_tags, message)

    def is_open_for_signup(self, request: HttpRequest) -> bool:
        mode = services.signup_mode()
        if mode in ("open", "approval"):
            return True
        if mode != "invite":
            return False
        # The link's token, kept in the session from the GET that opened the form to its POST.
        token = request.GET.get("invite") or request.session.get(INVITE_SESSION_KEY)
        if not token:
            raise _refusal(
                request,
                title="Sign-up by invitation",
                message=(
                    "Accounts here are by invitation only: open the invitation link you were sent."
                ),
            )
        try:
            services.invitation_check(token=token)
        except services.InvitationRefused as exc:
            raise _invite_refused(request, exc) from None
        request.session[INVITE_SESSION_KEY] = token
        return True

    def save_user(self, request: HttpRequest, user: Any, form: Any, commit: bool = True) -> Any:
        mode = services.signup_mode()
        with transaction.atomic():
            if mode == "approval":
                user.is_active = False
            user = super().save_user(request, user, form, commit=commit)
            if mode == "invite":
                token = request.session.get(INVITE_SESSION_KEY)
                try:
                    services.invitation_claim(token=token, user=user)
                except services.InvitationRefused as exc:
                    # Rolls the new account back with the transaction.
                    raise _invite_refused(request, exc) from None
            elif mode == "approval":
                services.approval_request(user=user)
        request.session.pop(INVITE_SESSION_KEY, None)
        return user


_TOKEN_ERRORS = (
    (jwt.ExpiredSignatureError, "the identity token has expired"),
    (jwt.InvalidAudienceError, "the identity token was issued for another application"),
    (jwt.InvalidIssuerError, "the identity token was issued by another provider"),
    (jwt.ImmatureSignatureError, "the identity token is not valid yet"),
)


def _email_domain_allowed(email: str) -> bool:
    allowed = settings.OIDC_ALLOWED_DOMAINS
    if not allowed:
        return True
    _, at, domain = email.rpartition("@")
    return bool(at) and domain.lower() in allowed


def _provider_verified(sociallogin: Any) -> list[str]:
    return [a.email for a in sociallogin.email_addresses if a.verified and a.email]


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def authenticate_by_email(self, sociallogin: Any) -> tuple[Any, str] | None:
        """An existing account is signed into by the provider's verified email only when this
        site verified that address too (or staff set it): an account someone registered with
        another person's address, never confirmed, is not handed to that person's identity —
        nor that person's chats to its registrant (docs/accounts.md, "Single sign-on")."""
        found = super().authenticate_by_email(sociallogin)
        if found is None:
            return None
        user, email = found
        if services.email_verified_here(user=user, email=email):
            return found
        logger.info("sso email match ignored: the address is unconfirmed here")
        return None

    def pre_social_login(self, request: HttpRequest, sociallogin: Any) -> None:
        """Every SSO sign-in, new account or not: a verified address in an allowed domain. A new
        account takes its address from whoever claimed it here without confirming it."""
        self._check_domain(request, sociallogin)
        if not sociallogin.is_existing and settings.OIDC_CREATE_ACCOUNTS:
            for email in _provider_verified(sociallogin):
                services.email_claims_release(email=email)

    def _check_domain(self, request: HttpRequest, sociallogin: Any) -> None:
        if not settings.OIDC_ALLOWED_DOMAINS:
            return
        verified = _provider_verified(sociallogin)
        if not any(_email_domain_allowed(email) for email in verified):
            shown = ", ".join(verified) or "no verified email address"
            logger.info("sso sign-in refused: domain not allowed", extra={"emails": shown})
            raise _refusal(
                request,
                title="Sign-in refused",
                message=(
                    f"The identity provider vouched for {shown}; this site accepts only "
                    f"verified addresses at {', '.join(settings.OIDC_ALLOWED_DOMAINS)}."
                ),
            )

    def is_open_for_signup(self, request: HttpRequest, sociallogin: Any) -> bool:
        if settings.OIDC_CREATE_ACCOUNTS:
            return True
        raise _refusal(
            request,
            title="No account here",
            message=(
                "You signed in with the identity provider, but there is no account here for "
                "you and this site does not create accounts at first sign-in. Ask an "
                "administrator to create one with your email address."
            ),
        )

    def save_user(self, request: HttpRequest, sociallogin: Any, form: Any = None) -> Any:
        with transaction.atomic():
            if services.signup_mode() == "approval":
                sociallogin.user.is_active = False
            user = super().save_user(request, sociallogin, form)
            if services.signup_mode() == "approval":
                services.approval_request(user=user)
        return user

    def on_authentication_error(
        self,
        request: HttpRequest,
        provider: Any,
        error: Any = None,
        exception: Any = None,
        extra_context: Any = None,
    ) -> None:
        cause = getattr(exception, "__cause__", None)
        reason = "the identity provider's answer could not be verified"
        for kind, text in _TOKEN_ERRORS:
            if isinstance(cause, kind):
                reason = text
                break
        logger.warning(
            "sso sign-in failed",
            extra={"error": str(error), "reason": reason, "exception": repr(exception)},
        )
        if extra_context is not None:
            extra_context["sso_reason"] = reason
