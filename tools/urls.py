from django.urls import path

from tools import api

# Under /api/v1/.
urlpatterns = [
    path("tool-servers/", api.ToolServerListApi.as_view(), name="tool-server-list"),
    path(
        "tool-servers/<str:server_id>/",
        api.ToolServerDetailApi.as_view(),
        name="tool-server-detail",
    ),
    path(
        "tool-servers/<str:server_id>/refresh-tools/",
        api.ToolServerRefreshApi.as_view(),
        name="tool-server-refresh-tools",
    ),
]
