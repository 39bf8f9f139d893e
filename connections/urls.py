from django.urls import path

from connections import api

# Under /api/v1/.
urlpatterns = [
    path("connections/", api.ConnectionListApi.as_view(), name="connection-list"),
    path(
        "connections/<str:connection_id>/",
        api.ConnectionDetailApi.as_view(),
        name="connection-detail",
    ),
    path(
        "connections/<str:connection_id>/refresh-models/",
        api.ConnectionRefreshModelsApi.as_view(),
        name="connection-refresh-models",
    ),
]
