"""REST adapters of export and import (issue 18, Deliver 3).

- ``GET /api/v1/sessions/{id}/export/?format=markdown|json``: one chat, streamed, as a download.
- ``GET /api/v1/export/``: all of the user's chats as one zip, streamed.
- ``POST /api/v1/import/`` (multipart: ``file``, ``bot``, optional ``progress`` key): 201
  ``{format, imported: [{session, title, messages, branches, …}], skipped: [{title, session,
  reason}]}``; a bad file is ``validation_error`` naming what was wrong, a file over
  ``IMPORT_MAX_BYTES`` (or a request claiming to be) ``payload_too_large``.
- ``GET /api/v1/import/progress/?key=``: ``{phase, bytes_read, bytes_total}`` of an import in
  flight, for the page's progress bar (the page polls it while its POST runs).

Progress: the POST itself does the work, in the request, and answers with the result or the
error in the API's one error shape; it writes how far it has read to a cache the page polls. The
upload already sits in this web process's temporary file, so handing it to a worker would mean
copying it through storage both processes share, for no gain a user would see.
"""

from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bots.queries import session_get_for_user
from chat_platform.api import api_errors
from chat_platform.errors import ValidationFailed
from chat_platform.heavy import heavy_request
from transfer import progress
from transfer.exports import session_filename, session_markdown_chunks, user_zip_chunks
from transfer.lossless import session_json_chunks
from transfer.services import chats_import, check_import_size

FORMATS = ("json", "markdown")
_END = object()


def _async(chunks: Iterator[Any]) -> AsyncIterator[Any]:
    """A sync generator served by an ASGI server without being read whole first (Django
    consumes a sync iterator of a StreamingHttpResponse into a list under ASGI): each chunk is
    produced in the request's sync thread, where its database connection lives."""

    async def stream() -> AsyncIterator[Any]:
        while True:
            chunk = await sync_to_async(next, thread_sensitive=True)(chunks, _END)
            if chunk is _END:
                return
            yield chunk

    return stream()


def _download(request: Request, chunks: Iterator[Any], *, name: str, content_type: str) -> Any:
    body: Any = _async(chunks) if isinstance(request._request, ASGIRequest) else chunks
    response = StreamingHttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    response["Cache-Control"] = "no-store"
    return response


class _FormatIsOurs(DefaultContentNegotiation):
    """``?format=`` names the export format here, not one of DRF's renderers (DRF would answer
    404 for ``markdown``)."""

    def select_renderer(self, request: Any, renderers: Any, format_suffix: Any = None) -> Any:
        return renderers[0], renderers[0].media_type


class SessionExportApi(APIView):
    content_negotiation_class = _FormatIsOurs

    @extend_schema(
        operation_id="v1_sessions_export",
        parameters=[OpenApiParameter("format", str, enum=list(FORMATS), required=False)],
        responses={
            200: OpenApiResponse(
                description="A download: the lossless JSON (format chat-platform.session, "
                "version 1), or with format=markdown the transcript as Markdown."
            ),
            **api_errors(400, 401, 404),
        },
    )
    def get(self, request: Request, session_id: int) -> Any:
        session = session_get_for_user(user=request.user, session_id=session_id)
        wanted = request.query_params.get("format") or "json"
        if wanted not in FORMATS:
            raise ValidationFailed(details={"format": [f"Must be one of: {', '.join(FORMATS)}."]})
        if wanted == "markdown":
            return _download(
                request,
                session_markdown_chunks(session),
                name=session_filename(session, "md"),
                content_type="text/markdown; charset=utf-8",
            )
        return _download(
            request,
            session_json_chunks(session),
            name=session_filename(session, "json"),
            content_type="application/json",
        )


class ExportAllApi(APIView):
    @extend_schema(
        operation_id="v1_export_all",
        responses={
            200: OpenApiResponse(
                description="A zip download: every chat of the user, chat-<id>-<title>.json "
                "and .md each."
            ),
            **api_errors(401),
        },
    )
    def get(self, request: Request) -> Any:
        return _download(
            request,
            user_zip_chunks(user=request.user),
            name="chats.zip",
            content_type="application/zip",
        )


class ImportApi(APIView):
    parser_classes = [MultiPartParser]

    @extend_schema(
        operation_id="v1_import",
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {
                    "file": {"type": "string", "format": "binary"},
                    "bot": {"type": "integer"},
                    "progress": {"type": "string"},
                },
                "required": ["file", "bot"],
            }
        },
        responses={
            201: OpenApiResponse(description="{format, imported: [...], skipped: [...]}"),
            **api_errors(400, 401, 404, 413, 429),
        },
    )
    def post(self, request: Request) -> Response:
        claimed = request.META.get("CONTENT_LENGTH") or ""
        check_import_size(size=int(claimed) if claimed.isdigit() else None)
        upload = request.FILES.get("file")
        if upload is None:
            raise ValidationFailed(details={"file": ["Attach the file to import (field 'file')."]})
        bot_id = request.data.get("bot")
        if bot_id in (None, ""):
            raise ValidationFailed(details={"bot": ["Choose the bot these chats continue with."]})
        key = request.data.get("progress") or ""
        if key and not progress.key_is_valid(key):
            raise ValidationFailed(details={"progress": ["1–64 letters, digits, '-' or '_'."]})
        total = upload.size
        user_id = request.user.pk

        def report(done: int, phase: str = "reading") -> None:
            if key:
                progress.progress_write(
                    user_id=user_id, key=key, phase=phase, bytes_read=done, bytes_total=total
                )

        report(0)
        try:
            # An import keeps a web thread busy for as long as the file takes: one user holds at
            # most HEAVY_REQUESTS_PER_USER of them (docs/security.md, "Heavy requests").
            with heavy_request(user_id=user_id, kind="import"):
                result = chats_import(
                    user=request.user, bot_id=bot_id, raw=upload, size=total, on_progress=report
                )
        except BaseException:
            report(0, "failed")
            raise
        report(total or 0, "done")
        return Response(result.as_dict(), status=status.HTTP_201_CREATED)


class ImportProgressApi(APIView):
    @extend_schema(
        operation_id="v1_import_progress",
        parameters=[OpenApiParameter("key", str, required=True)],
        responses={
            200: OpenApiResponse(description="{phase, bytes_read, bytes_total}"),
            **api_errors(400, 401, 404),
        },
    )
    def get(self, request: Request) -> Response:
        key = request.query_params.get("key")
        if not progress.key_is_valid(key):
            raise ValidationFailed(details={"key": ["1–64 letters, digits, '-' or '_'."]})
        assert isinstance(key, str)
        value = progress.progress_read(user_id=request.user.pk, key=key)
        if value is None:
            return Response({"phase": "unknown", "bytes_read": 0, "bytes_total": None})
        return Response(value)
