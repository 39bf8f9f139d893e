"""Sign-up modes, invitations, approvals, and the credentials an account keeps: every write of
this app (docs/accounts.md)."""

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from rest_framework.authtoken.models import Token

from accounts.models import AccountApproval, Invitation
from chat_platform.errors import NotFound, ValidationFailed
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from openai_api.models import ApiKey

TOKEN_MAX_LENGTH = 100
NOTE_MAX_LENGTH = 200
INVITE_DAYS_MAX = 365


class InvitationRefused(Exception):
    """An invitation that cannot be used: ``reason`` is ``unknown``, ``used`` or ``expired``."""

    MESSAGES = {
        "unknown": "This invitation link is not valid. Ask for a new one.",
        "used": "This invitation link has already been used. Ask for a new one.",
        "expired": "This invitation link has expired. Ask for a new one.",
    }

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(self.MESSAGES[reason])


def signup_mode() -> str:
    return str(settings.ACCOUNT_SIGNUP_MODE)


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def invitation_create(
    *, created_by: Any, note: str = "", days: int | None = None
) -> tuple[Invitation, str]:
    """A new single-use invitation; returns it and its token (never stored, shown once)."""
    token = secrets.token_urlsafe(32)
    now = timezone.now()
    invitation = Invitation(
        token_digest=_digest(token),
        note=note,
        created_by=created_by,
        created_at=now,
        expires_at=now + timedelta(days=days or settings.ACCOUNT_INVITE_DAYS),
    )
    invitation.full_clean()
    invitation.save()
    return invitation, token


def check_invitation_fields(*, note: object, days: object) -> tuple[str, int]:
    """The note and the validity in days of a new invitation, or ``ValidationFailed`` saying
    which field is wrong. ``days`` empty or None: ``ACCOUNT_INVITE_DAYS``."""
    errors: dict[str, list[str]] = {}
    clean_note = ""
    if note is None:
        note = ""
    if not isinstance(note, str):
        errors["note"] = ["Must be text."]
    elif not text_is_storable(note):
        errors["note"] = [UNSTORABLE_MESSAGE]
    elif len(note.strip()) > NOTE_MAX_LENGTH:
        errors["note"] = [f"At most {NOTE_MAX_LENGTH} characters."]
    else:
        clean_note = note.strip()
    clean_days = int(settings.ACCOUNT_INVITE_DAYS)
    if days not in (None, ""):
        text = str(days).strip() if isinstance(days, (str, int)) else ""
        if isinstance(days, bool) or not text.isdigit() or not 1 <= int(text) <= INVITE_DAYS_MAX:
            errors["days"] = [f"A whole number of days from 1 to {INVITE_DAYS_MAX}."]
        else:
            clean_days = int(text)
    if errors:
        raise ValidationFailed(details=errors)
    return clean_note, clean_days


def _staff(user: Any) -> None:
    """Invitations are staff's: anyone else is told nothing exists (``not_found``)."""
    if not (getattr(user, "is_staff", False) and getattr(user, "is_active", False)):
        raise NotFound("Page not found.")


def invitation_make(*, user: Any, note: object, days: object) -> tuple[Invitation, str]:
    """A staff user makes an invitation (the staff page, the ``invite`` command): checked, then
    created; returns it and its token (shown once)."""
    _staff(user)
    clean_note, clean_days = check_invitation_fields(note=note, days=days)
    return invitation_create(created_by=user, note=clean_note, days=clean_days)


def invitation_list(*, user: Any, limit: int = 100) -> list[Invitation]:
    """The newest invitations, for staff (whoever made them)."""
    _staff(user)
    return list(Invitation.objects.select_related("created_by", "used_by").order_by("-pk")[:limit])


def invitation_revoke_one(*, user: Any, invitation_id: object) -> bool:
    """Expire one invitation now (staff). An unknown id is ``not_found``; one already used or
    expired is left as it is (returns False)."""
    _staff(user)
    try:
        pk = int(str(invitation_id))
    except (TypeError, ValueError):
        raise NotFound("Invitation not found.") from None
    if not 1 <= pk <= 2**63 - 1 or not Invitation.objects.filter(pk=pk).exists():
        raise NotFound("Invitation not found.")
    return invitation_revoke(invitation_ids=[pk]) == 1


def invitation_check(*, token: object) -> Invitation:
    """The usable invitation for ``token``, or InvitationRefused saying why not."""
    if (
        not isinstance(token, str)
        or not token
        or len(token) > TOKEN_MAX_LENGTH
        or not text_is_storable(token)
    ):
        raise InvitationRefused("unknown")
    invitation = Invitation.objects.filter(token_digest=_digest(token)).first()
    if invitation is None:
        raise InvitationRefused("unknown")
    if invitation.state != "open":
        raise InvitationRefused(invitation.state)
    return invitation


def invitation_claim(*, token: str, user: Any) -> Invitation:
    """Mark the invitation used by ``user``: a conditional update, so of two sign-ups racing with
    one link exactly one wins. Call inside the transaction that creates the user."""
    invitation = invitation_check(token=token)
    now = timezone.now()
    claimed = Invitation.objects.filter(
        pk=invitation.pk, used_at__isnull=True, expires_at__gt=now
    ).update(used_at=now, used_by=user)
    if claimed != 1:
        invitation.refresh_from_db()
        raise InvitationRefused(invitation.state if invitation.state != "open" else "used")
    invitation.refresh_from_db()
    return invitation


def invitation_revoke(*, invitation_ids: list[int]) -> int:
    """Expire unused invitations now; returns how many."""
    return Invitation.objects.filter(
        pk__in=invitation_ids, used_at__isnull=True, expires_at__gt=timezone.now()
    ).update(expires_at=timezone.now())


def approval_request(*, user: Any) -> AccountApproval:
    """The new account waits for staff: inactive until approved. ``user`` is not yet saved or is
    saved inactive by the caller, in the same transaction."""
    if user.is_active:
        user.is_active = False
        user.save(update_fields=["is_active"])
    return AccountApproval.objects.create(user=user)


def approval_decide(*, approval_ids: list[int], approve: bool, by: Any) -> int:
    """Approve (activate) or reject pending accounts; returns how many were decided. Only pending
    ones change: a decision is never taken twice."""
    status = AccountApproval.Status.APPROVED if approve else AccountApproval.Status.REJECTED
    with transaction.atomic():
        pending = list(
            AccountApproval.objects.select_for_update()
            .filter(pk__in=approval_ids, status=AccountApproval.Status.PENDING)
            .values_list("pk", "user_id")
        )
        if not pending:
            return 0
        AccountApproval.objects.filter(pk__in=[pk for pk, _ in pending]).update(
            status=status, decided_at=timezone.now(), decided_by=by
        )
        if approve:
            get_user_model().objects.filter(pk__in=[uid for _, uid in pending]).update(
                is_active=True
            )
    return len(pending)


def pending_user_for_credentials(*, username: object, password: object) -> Any | None:
    """The pending account these credentials belong to (for the login page to say "waiting for
    approval" instead of "wrong password"); None otherwise."""
    if not isinstance(username, str) or not isinstance(password, str) or not username:
        return None
    if not text_is_storable(username):  # NUL or a lone surrogate: no such account, no query
        return None
    user = (
        get_user_model()
        .objects.filter(
            username=username,
            is_active=False,
            approval__status=AccountApproval.Status.PENDING,
        )
        .first()
    )
    if user is None or not user.check_password(password):
        return None
    return user


# --- credentials and email claims (docs/accounts.md, "Who keeps access") -----------------------


def credentials_revoke(*, user: Any) -> int:
    """Delete the account's DRF token and revoke its API keys (for good); returns how many
    credentials ended. Called when an identity is connected and when a password is reset or
    changed: a credential made before (perhaps by someone else) stops working at once."""
    tokens, _ = Token.objects.filter(user=user).delete()
    keys = ApiKey.objects.filter(user=user, revoked=False).update(revoked=True)
    return tokens + keys


def email_verified_here(*, user: Any, email: str) -> bool:
    """Whether this site stands behind ``user``'s claim to ``email``: allauth recorded the address
    as confirmed, or staff set it (an account made in the admin or a command has no address
    record at all; every sign-up, invitation and SSO account has one)."""
    addresses = EmailAddress.objects.filter(user=user)
    if addresses.filter(email__iexact=email, verified=True).exists():
        return True
    return not addresses.exists() and (user.email or "").casefold() == email.casefold()


def email_claims_release(*, email: str) -> int:
    """Free ``email`` from accounts that claim it without having confirmed it, for a person whose
    identity provider vouches for it (SSO). Their unconfirmed address records go and their
    account address is blanked; their accounts are otherwise untouched. Returns how many
    accounts lost the claim."""
    users = get_user_model().objects.filter(email__iexact=email)
    claimed = {u.pk for u in users if not email_verified_here(user=u, email=email)}
    unconfirmed = EmailAddress.objects.filter(email__iexact=email, verified=False)
    claimed |= set(unconfirmed.values_list("user_id", flat=True))
    with transaction.atomic():
        unconfirmed.delete()
        get_user_model().objects.filter(pk__in=claimed, email__iexact=email).update(email="")
    return len(claimed)
