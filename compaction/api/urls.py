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
    path(
        "sessions/<int:session_id>/expand/",
        views.SessionExpandApi.as_view(),
        name="session-expand",
    ),
    path(
        "summaries/<int:summary_id>/revert/",
        views.SummaryRevertApi.as_view(),
        name="summary-revert",
    ),
    path(
        "summaries/<int:summary_id>/resummarise/",
        views.SummaryResummariseApi.as_view(),
        name="summary-resummarise",
    ),
    path(
        "summaries/<int:summary_id>/release/",
        views.SummaryReleaseApi.as_view(),
        name="summary-release",
    ),
    path("messages/<int:message_id>/fit/", views.MessageFitApi.as_view(), name="message-fit"),
    path(
        "messages/<int:message_id>/context/",
        views.MessageContextApi.as_view(),
        name="message-context",
    ),
    path("compaction-events/", views.CompactionEventsApi.as_view(), name="compaction-events"),
]
