from django.contrib.auth import views as auth_views
from django.urls import include, path

from accounts import views

# Before allauth's own URLs: /accounts/login/ and /accounts/logout/ stay these views (same
# names, same form); allauth serves the rest (signup, password reset, email, 2fa, oidc).
urlpatterns = [
    path("login/", views.sign_in, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("invitations/", views.invitation_page, name="invitation-page"),
    path("", include("allauth.urls")),
]
