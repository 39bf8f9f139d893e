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
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse

from accounts import services
from accounts.forms import SignInForm
from chat_platform import oidc
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
