"""Staff make invitation links and decide the approval queue here."""

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse

from accounts import services
from accounts.models import AccountApproval, Invitation


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    list_display = ["__str__", "state", "created_by", "created_at", "expires_at", "used_by"]
    fields = ["note"]
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change:
            obj.save(update_fields=["note"])
            return
        invitation, token = services.invitation_create(
            created_by=request.user, note=form.cleaned_data.get("note", "")
        )
        obj.pk = invitation.pk
        link = request.build_absolute_uri(reverse("account_signup") + f"?invite={token}")
        expires = f"{invitation.expires_at:%Y-%m-%d %H:%M} UTC"
        self.message_user(
            request,
            f"Invitation link (single use, shown only now; expires {expires}): {link}",
            messages.SUCCESS,
        )

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    @admin.action(description="Revoke the selected unused invitations")
    def revoke(self, request: HttpRequest, queryset: QuerySet[Invitation]) -> None:
        count = services.invitation_revoke(
            invitation_ids=list(queryset.values_list("pk", flat=True))
        )
        self.message_user(request, f"{count} invitation(s) revoked.")


@admin.register(AccountApproval)
class AccountApprovalAdmin(admin.ModelAdmin):
    list_display = ["user", "status", "requested_at", "decided_at", "decided_by"]
    list_filter = ["status"]
    readonly_fields = ["user", "status", "requested_at", "decided_at", "decided_by"]
    actions = ["approve", "reject"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Approve the selected accounts (they can sign in)")
    def approve(self, request: HttpRequest, queryset: QuerySet[AccountApproval]) -> None:
        count = services.approval_decide(
            approval_ids=list(queryset.values_list("pk", flat=True)), approve=True, by=request.user
        )
        self.message_user(request, f"{count} account(s) approved.")

    @admin.action(description="Reject the selected accounts (they stay inactive)")
    def reject(self, request: HttpRequest, queryset: QuerySet[AccountApproval]) -> None:
        count = services.approval_decide(
            approval_ids=list(queryset.values_list("pk", flat=True)), approve=False, by=request.user
        )
        self.message_user(request, f"{count} account(s) rejected.")
