"""Staff make invitation links and decide the approval queue here; a password staff set ends
the account's API token and keys. Staff who are not superusers change no rights, their own
included, and no account with more rights than an ordinary one (docs/security.md, "The
admin")."""

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import GroupAdmin, UserAdmin
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from accounts import services
from accounts.admin_credentials import may_manage
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


STAFF_SET_MESSAGE = (
    "The password of {user} was changed. The account's API token and API keys were revoked "
    "({count} ended)."
)

# What gives an account rights: set by superusers alone.
RIGHTS_FIELDS = ["is_staff", "is_superuser", "groups", "user_permissions"]

User = get_user_model()
admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(Group)
class RightsGroupAdmin(GroupAdmin):
    """A group's permissions are every member's: set by superusers alone."""

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        return fields if request.user.is_superuser else [*fields, "permissions"]


@admin.register(User)
class AccountAdmin(UserAdmin):
    """Django's user admin, but a password staff set (a lost or leaked one) ends what was made
    with the old one, as the person's own change does (docs/accounts.md, "Who keeps access");
    and only superusers give rights or change the account of another staff member."""

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if not request.user.is_superuser:
            fields += RIGHTS_FIELDS
        return fields

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_change_permission(request, obj) and may_manage(request.user, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and may_manage(request.user, obj)

    def user_change_password(
        self,
        request: HttpRequest,
        id: str,  # noqa: A002 (Django's name for it)
        form_url: str = "",
    ) -> HttpResponse:
        response = super().user_change_password(request, id, form_url)
        if request.method == "POST" and response.status_code == 302:  # the form was saved
            user = self.get_object(request, unquote(id))
            count = services.credentials_revoke(user=user)
            message = STAFF_SET_MESSAGE.format(user=user, count=count)
            self.message_user(request, message, messages.WARNING)
        return response
