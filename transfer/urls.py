from django.urls import path

from transfer import api

urlpatterns = [
    path(
        "sessions/<int:session_id>/export/", api.SessionExportApi.as_view(), name="session-export"
    ),
    path("export/", api.ExportAllApi.as_view(), name="export-all"),
    path("import/", api.ImportApi.as_view(), name="import"),
    path("import/jobs/<int:job_id>/", api.ImportJobApi.as_view(), name="import-job"),
    path("import/progress/", api.ImportProgressApi.as_view(), name="import-progress"),
]
