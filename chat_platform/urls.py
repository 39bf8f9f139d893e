from csp.constants import UNSAFE_INLINE
from csp.decorators import csp_update
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from bots import pages
from chat_platform.signin import TokenSignInApi, sign_in_throttled
from connections import pages as usage_pages

api_v1 = [
    path("auth/token/", TokenSignInApi.as_view(), name="auth-token"),
    path("", include("bots.api.urls")),
    path("", include("compaction.api.urls")),
    path("", include("memory.api.urls")),
    path("", include("transfer.urls")),
    path("", include("openai_api.api_urls")),
    path("", include("connections.urls")),
]

urlpatterns = [
    path("", pages.chat_home, name="chat"),
    path("chat/new/", pages.chat_new_page, name="chat-new"),
    path("chat/<int:session_id>/", pages.chat_session_page, name="chat-session"),
    path(
        "accounts/login/",
        sign_in_throttled(auth_views.LoginView.as_view(template_name="registration/login.html")),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("bots/", include("bots.bot_urls")),
    path("usage/", usage_pages.usage_page, name="usage"),
    path("usage/all/", usage_pages.usage_all_page, name="usage-all"),
    # The admin's own login, throttled like the others (before admin.site.urls, which has it too).
    path("admin/login/", sign_in_throttled(admin.site.login)),
    path("admin/", admin.site.urls),
    path("api/v1/", include(api_v1)),
    # The OpenAI-compatible API (openai_api): base URL <server>/v1.
    path("v1/", include("openai_api.urls")),
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
