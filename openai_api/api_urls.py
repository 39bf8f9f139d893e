from django.urls import path

from openai_api import api

# Under /api/v1/, beside the other apps' REST routes.
urlpatterns = [
    path("api-keys/", api.ApiKeyListApi.as_view(), name="api-key-list"),
    path("api-keys/<str:prefix>/", api.ApiKeyDetailApi.as_view(), name="api-key-detail"),
]
