"""Invitations (single-use sign-up links) and the approval queue (docs/accounts.md)."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class Invitation(models.Model):
    """A single-use sign-up link. Only the SHA-256 of its token is stored: the link is shown once,
    when it is made."""

    token_digest = models.CharField(max_length=64, unique=True, editable=False)
    note = models.CharField(
        max_length=200, blank=True, help_text="Who the link is for (only a reminder for staff)."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        on_delete=models.SET_NULL,
        related_name="invitations_made",
        editable=False,
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    expires_at = models.DateTimeField()
    used_by = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="invitation_used",
        editable=False,
    )
    used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # Whoever used it, it was used at some time (the user may be deleted later).
            models.CheckConstraint(
                condition=Q(used_by__isnull=True) | Q(used_at__isnull=False),
                name="invitation_used_by_has_used_at",
            ),
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("created_at")),
                name="invitation_expires_after_creation",
            ),
        ]

    def __str__(self) -> str:
        return f"Invitation {self.pk}" + (f" ({self.note})" if self.note else "")

    @property
    def state(self) -> str:
        if self.used_at is not None:
            return "used"
        if self.expires_at <= timezone.now():
            return "expired"
        return "open"


class AccountApproval(models.Model):
    """An account that signed up in ``approval`` mode. While pending the user is inactive, which
    every way in refuses (Django's auth backends, DRF's token and session auth, API keys, the
    websocket handshake): approval is the only thing that activates it."""

    class Status(models.TextChoices):
        PENDING = "pending", "pending"
        APPROVED = "approved", "approved"
        REJECTED = "rejected", "rejected"

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="approval"
    )
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    requested_at = models.DateTimeField(default=timezone.now)
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="approvals_decided",
    )

    class Meta:
        ordering = ["requested_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status="pending", decided_at__isnull=True)
                | (~Q(status="pending") & Q(decided_at__isnull=False)),
                name="approval_decided_iff_not_pending",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.status})"
