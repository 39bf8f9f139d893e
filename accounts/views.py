"""The login pages: Django's form and the sign-in throttle, then allauth's login flow (which asks
for the TOTP code of an account that has one, and applies email verification)."""

from typing import Any

from allauth.account.internal.flows.login import perform_password_login
from allauth.account.models import Login
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import REDIRECT_FIELD_NAME
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from accounts import services
from accounts.forms import SignInForm
from chat_platform import oidc
from chat_platform.errors import NotFound, ValidationFailed
from chat_platform.signin import sign_in_password_accepted, sign_in_throttled


class SignInView(auth_views.LoginView):
    template_name = "registration/login.html"
    authentication_form = SignInForm

    def form_valid(self, form: Any) -> HttpResponse:
        # The password is right: the throttle gives its slots back even if a TOTP code is asked
        # for next (allauth counts wrong codes with its own "login_failed" limit).
        sign_in_password_accepted(self.request)
        # What allauth's own login form does with a right password (records the password as
        # this session's authentication, which its re-authentication asks for, then runs the
        # login stages). An internal function of allauth: the version is pinned below 66.
        return perform_password_login(
            self.request,
            {"username": form.get_user().get_username()},
            Login(user=form.get_user(), redirect_url=self.get_success_url()),
        )

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context = super().get_context_data(**kwargs)
        context["signup_open"] = services.signup_mode() in ("open", "approval")
        if settings.OIDC_ISSUER:
            context["sso"] = {
                "name": settings.OIDC_NAME,
                "url": reverse("openid_connect_login", kwargs={"provider_id": oidc.PROVIDER_ID}),
            }
        return context


class AdminSignInView(SignInView):
    template_name = "admin/login.html"
    authentication_form = AdminAuthenticationForm


def admin_sign_in(request: HttpRequest) -> HttpResponse:
    """The admin's login page (as ``AdminSite.login``), through the same flow: TOTP included."""
    if request.method == "GET" and admin.site.has_permission(request):
        return redirect(reverse("admin:index", current_app=admin.site.name))
    context = {
        **admin.site.each_context(request),
        "title": "Log in",
        "subtitle": None,
        "app_path": request.get_full_path(),
        "username": request.user.get_username(),
    }
    if REDIRECT_FIELD_NAME not in request.GET and REDIRECT_FIELD_NAME not in request.POST:
        context[REDIRECT_FIELD_NAME] = reverse("admin:index", current_app=admin.site.name)
    return AdminSignInView.as_view(extra_context=context)(request)


sign_in = sign_in_throttled(SignInView.as_view())
admin_login = sign_in_throttled(admin_sign_in)


def invitation_link(request: HttpRequest, token: str) -> str:
    return request.build_absolute_uri(reverse("account_signup") + f"?invite={token}")


@login_required
@require_http_methods(["GET", "POST"])
def invitation_page(request: HttpRequest) -> HttpResponse:
    """``/accounts/invitations/`` (staff): make a single-use sign-up link (shown once, in the
    answer to the POST that made it) and revoke unused ones. Anyone else: 404."""
    context: dict[str, Any] = {"signup_mode": services.signup_mode(), "errors": {}}
    status = 200
    try:
        if request.method == "POST":
            action = request.POST.get("action")
            if action == "create":
                try:
                    invitation, token = services.invitation_make(
                        user=request.user,
                        note=request.POST.get("note", ""),
                        days=request.POST.get("days", ""),
                    )
                except ValidationFailed as exc:
                    context["errors"] = exc.details
                    context["note"] = request.POST.get("note", "")
                    context["days"] = request.POST.get("days", "")
                    status = 400
                else:
                    context["created"] = invitation
                    context["link"] = invitation_link(request, token)
            elif action == "revoke":
                revoked = services.invitation_revoke_one(
                    user=request.user, invitation_id=request.POST.get("invitation")
                )
                context["notice"] = (
                    "Invitation revoked: its link no longer works."
                    if revoked
                    else "That invitation was already used or expired; nothing changed."
                )
            else:
                context["errors"] = {"action": ["Unknown action."]}
                status = 400
        context["invitations"] = services.invitation_list(user=request.user)
    except NotFound:
        raise Http404("Page not found.") from None
    context.setdefault("days", "")
    context["default_days"] = settings.ACCOUNT_INVITE_DAYS
    return render(request, "accounts/invitations.html", context, status=status)
