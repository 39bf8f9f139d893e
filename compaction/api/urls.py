from django.urls import path

from compaction.api import views

urlpatterns = [
    path(
        "sessions/<int:session_id>/compact/",
        views.SessionCompactApi.as_view(),
        name="session-compact",
    ),
    path(
        "sessions/<int:session_id>/summaries/",
        views.SessionSummariesApi.as_view(),
        name="session-summaries",
    ),
    path("messages/<int:message_id>/fit/", views.MessageFitApi.as_view(), name="message-fit"),
    path(
        "messages/<int:message_id>/context/",
        views.MessageContextApi.as_view(),
        name="message-context",
    ),
    path("compaction-events/", views.CompactionEventsApi.as_view(), name="compaction-events"),
]
