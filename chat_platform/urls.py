from csp.constants import UNSAFE_INLINE
from csp.decorators import csp_update
from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from accounts import pages as account_pages
from accounts import views as account_views
from accounts.api import TokenSignInApi
from bots import pages
from connections import pages as usage_pages
from openai_api import views as openai_views

api_v1 = [
    path("auth/token/", TokenSignInApi.as_view(), name="auth-token"),
    path("", include("bots.api.urls")),
    path("", include("compaction.api.urls")),
    path("", include("memory.api.urls")),
    path("", include("transfer.urls")),
    path("", include("openai_api.api_urls")),
    path("", include("attachments.urls")),
    path("", include("connections.urls")),
    path("", include("tools.urls")),
]

urlpatterns = [
    path("", pages.chat_home, name="chat"),
    path("chat/new/", pages.chat_new_page, name="chat-new"),
    path("chat/<int:session_id>/", pages.chat_session_page, name="chat-session"),
    # Sign-in, sign-up, password reset, TOTP and SSO (accounts app + django-allauth).
    path("accounts/", include("accounts.urls")),
    path("bots/", include("bots.bot_urls")),
    path("settings/", account_pages.settings_page, name="settings"),
    path("settings/api-keys/", account_pages.api_key_create_page, name="settings-api-key-create"),
    path("settings/profile/", account_pages.profile_update_page, name="settings-profile"),
    path(
        "settings/api-keys/<str:prefix>/revoke/",
        account_pages.api_key_revoke_page,
        name="settings-api-key-revoke",
    ),
    path("usage/", usage_pages.usage_page, name="usage"),
    path("usage/all/", usage_pages.usage_all_page, name="usage-all"),
    # The admin's own login, throttled like the others and through the same flow (TOTP), before
    # admin.site.urls, which has it too.
    path("admin/login/", account_views.admin_login),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    # The OpenAI-compatible API (openai_api): base URL <server>/v1.
    path("v1/", include("openai_api.urls")),
    path("v1", openai_views.not_found_view),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    # Swagger UI under the Content-Security-Policy: the split view serves its start-up script as
    # a file (``?script=``), and its page keeps one inline <style>, allowed here and nowhere else.
    path(
        "api/docs/",
        csp_update({"style-src": [UNSAFE_INLINE]})(
            SpectacularSwaggerSplitView.as_view(url_name="schema")
        ),
        name="swagger-ui",
    ),
]
