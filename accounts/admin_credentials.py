"""The admin's pages for what lets somebody in (docs/security.md, "The admin").

Staff who are not superusers work on ordinary accounts only: the email addresses, sign-in
identities, second factors and API keys of a superuser or of other staff are not shown to them,
and none can be given to such an account, since a reset link mailed to an address, an identity
tied to an account or a key made for it is a way in. A credential is never shown in clear to
anybody: DRF's token admin (the token itself is the key), the sign-in provider tokens, the TOTP
secret and the seed of the recovery codes are not in the admin at all; an API key is made by its
owner (the settings page, the API), never for them.
"""

from typing import Any

import allauth.mfa.admin  # noqa: F401 (registers what is replaced below, before it is)
import rest_framework.authtoken.admin  # noqa: F401
import rest_framework_api_key.admin  # noqa: F401
from allauth.account.admin import EmailAddressAdmin
from allauth.account.models import EmailAddress
from allauth.mfa.models import Authenticator
from allauth.socialaccount.admin import SocialAccountAdmin, SocialAppAdmin
from allauth.socialaccount.models import SocialAccount, SocialApp, SocialToken
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from rest_framework.authtoken.models import TokenProxy
from rest_framework_api_key.models import APIKey

for model in (TokenProxy, SocialToken, APIKey):  # a credential in clear, or never used
    admin.site.unregister(model)
for model in (EmailAddress, SocialAccount, SocialApp, Authenticator):  # registered again below
    admin.site.unregister(model)


def may_manage(acting: Any, account: Any) -> bool:
    """Whether ``acting`` may change what lets ``account`` in: superusers any account, other
    staff only their own and those of people who are neither staff nor superuser."""
    if acting.is_superuser or account is None or account.pk == acting.pk:
        return True
    return not (account.is_staff or account.is_superuser)


def manageable(acting: Any, rows: QuerySet, user_path: str = "user") -> QuerySet:
    """``rows`` (each tied to an account through ``user_path``) that ``acting`` may see here."""
    if acting.is_superuser:
        return rows
    others_with_rights = Q(**{f"{user_path}__is_staff": True}) | Q(
        **{f"{user_path}__is_superuser": True}
    )
    return rows.exclude(others_with_rights & ~Q(**{user_path: acting.pk}))


class OrdinaryAccountsOnly(admin.ModelAdmin):
    """Rows tied to an account (``user``): another staff member's or a superuser's are not
    listed for staff who are not superusers, and none is given to such an account."""

    user_path = "user"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return manageable(request.user, super().get_queryset(request), self.user_path)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not may_manage(request.user, self.account_of(obj)):
            raise PermissionDenied("Only a superuser may change another staff member's account.")
        super().save_model(request, obj, form, change)

    def account_of(self, obj: Any) -> Any:
        return obj.user


@admin.register(EmailAddress)
class GuardedEmailAddressAdmin(OrdinaryAccountsOnly, EmailAddressAdmin):
    pass


@admin.register(SocialAccount)
class GuardedSocialAccountAdmin(OrdinaryAccountsOnly, SocialAccountAdmin):
    pass


@admin.register(SocialApp)
class SuperusersSocialAppAdmin(SocialAppAdmin):
    """A sign-in provider's client secret: superusers' alone (the OpenID provider is normally
    set in the environment, docs/accounts.md)."""

    def has_module_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser


@admin.register(Authenticator)
class AuthenticatorAdmin(OrdinaryAccountsOnly):
    """Which second factors an account has, and deleting one (a person who lost their phone);
    never their secrets. Made only by their owner, on the settings page."""

    list_display = ["user", "type", "created_at", "last_used_at"]
    list_filter = ["type"]
    fields = ["user", "type", "created_at", "last_used_at"]
    readonly_fields = fields
    search_fields = ["user__username"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
