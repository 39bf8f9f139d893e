from django.urls import path

from bots.api import views

urlpatterns = [
    path("bots/", views.BotListApi.as_view(), name="bot-list"),
    path("bots/<int:bot_id>/", views.BotDetailApi.as_view(), name="bot-detail"),
    path("sessions/", views.SessionListApi.as_view(), name="session-list"),
    path("sessions/<int:session_id>/", views.SessionDetailApi.as_view(), name="session-detail"),
    path(
        "sessions/<int:session_id>/messages/",
        views.SessionMessagesApi.as_view(),
        name="session-messages",
    ),
    path(
        "sessions/<int:session_id>/context/",
        views.SessionContextApi.as_view(),
        name="session-context",
    ),
    path(
        "sessions/<int:session_id>/participants/",
        views.SessionParticipantsApi.as_view(),
        name="session-participants",
    ),
    path(
        "sessions/<int:session_id>/participants/<int:bot_id>/",
        views.SessionParticipantDetailApi.as_view(),
        name="session-participant-detail",
    ),
    path(
        "sessions/<int:session_id>/branches/",
        views.SessionBranchesApi.as_view(),
        name="session-branches",
    ),
    path("messages/<int:message_id>/edit/", views.MessageEditApi.as_view(), name="message-edit"),
    path(
        "messages/<int:message_id>/regenerate/",
        views.MessageRegenerateApi.as_view(),
        name="message-regenerate",
    ),
    path("messages/<int:message_id>/retry/", views.MessageRetryApi.as_view(), name="message-retry"),
    path("messages/<int:message_id>/pin/", views.MessagePinApi.as_view(), name="message-pin"),
    path("messages/<int:message_id>/unpin/", views.MessageUnpinApi.as_view(), name="message-unpin"),
]
