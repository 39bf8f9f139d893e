from django.urls import path

from memory.api import views

urlpatterns = [
    path("search/", views.MessageSearchApi.as_view(), name="search"),
    path(
        "sessions/<int:session_id>/records/",
        views.SessionRecordListApi.as_view(),
        name="session-records",
    ),
    path(
        "sessions/<int:session_id>/records/<str:name>/",
        views.SessionRecordDetailApi.as_view(),
        name="session-record-detail",
    ),
]
