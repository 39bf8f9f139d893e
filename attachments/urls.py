from django.urls import path

from attachments import api

urlpatterns = [
    path(
        "sessions/<int:session_id>/attachments/",
        api.SessionAttachmentsApi.as_view(),
        name="session-attachments",
    ),
    path(
        "attachments/<int:attachment_id>/status/",
        api.AttachmentStatusApi.as_view(),
        name="attachment-status",
    ),
    path(
        "attachments/<int:attachment_id>/thumbnail/",
        api.AttachmentThumbnailApi.as_view(),
        name="attachment-thumbnail",
    ),
    path(
        "attachments/<int:attachment_id>/",
        api.AttachmentDownloadApi.as_view(),
        name="attachment-download",
    ),
]
