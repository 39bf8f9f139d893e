"""REST adapters of export and import (issue 18, Deliver 3).

- ``GET /api/v1/sessions/{id}/export/?format=markdown|json``: one chat, streamed, as a download.
- ``GET /api/v1/export/``: all of the user's chats as one zip, streamed.
- ``POST /api/v1/import/`` (multipart: ``file``, ``bot``, optional ``progress`` key): the file is
  stored and answered at once, 202 with the import job (``Location``: its status URL); a file
  over ``IMPORT_MAX_BYTES`` (or a request claiming to be) is ``payload_too_large``, a bot the
  user may not use ``not_found``, one import past the user's limit ``rate_limited``.
- ``GET /api/v1/import/jobs/{id}/``: the job: ``status`` ``queued`` | ``running`` | ``done``
  (``result``: ``{format, imported: [{session, title, messages, branches, …}], skipped: [{title,
  session, reason}]}``) | ``failed`` (``error``: ``{code, message, details}``, e.g. a bad file's
  ``validation_error`` naming what was wrong, or ``limit_exceeded``). Another user's is 404.
- ``GET /api/v1/import/progress/?key=``: ``{phase, bytes_read, bytes_total}`` of an import in
  flight, for the page's progress bar, under the key the POST named.

The parse and the writes are a ``heavy``-queue task's, in a limited child process
(``transfer/services/jobs.py``; docs/transfer.md, "Import jobs"): never this web process's.
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
from chat_platform.dbconn import connection_release
from chat_platform.errors import ValidationFailed
from chat_platform.heavy import heavy_request
from connections import usage
from openai_api.keys import request_key_limits
from transfer import progress
from transfer.exports import session_filename, session_markdown_chunks, user_zip_chunks
from transfer.lossless import session_json_chunks
from transfer.queries import import_job_as_dict, import_job_get_for_user
from transfer.services import check_import_size
from transfer.services.jobs import import_job_create

FORMATS = ("json", "markdown")
_END = object()
# What one hop to the request's sync thread produces: the exports yield a piece per message
# (and a zip a piece per entry), and a hop per piece (a thread switch, then an ASGI send) made a
# 10,000-message export thousands of hops: 104-246 s on a loaded machine.
BATCH_BYTES = 64 * 1024


def _batch(chunks: Iterator[Any]) -> Any:
    """The next pieces of ``chunks`` joined, BATCH_BYTES or more unless it ended (``_END``:
    nothing was left). The pieces are all text or all bytes."""
    parts: list[Any] = []
    size = 0
    for chunk in chunks:
        parts.append(chunk)
        size += len(chunk)
        if size >= BATCH_BYTES:
            break
    # The client reads the batch at its own pace: the pool has the connection back meanwhile
    # (the exports read in pages, no cursor spans a batch: ``transfer.lossless.in_pages``).
    connection_release()
    return parts[0][:0].join(parts) if parts else _END


def _async(chunks: Iterator[Any]) -> AsyncIterator[Any]:
    """A sync generator served by an ASGI server without being read whole first (Django
    consumes a sync iterator of a StreamingHttpResponse into a list under ASGI): its pieces are
    produced in the request's sync thread, where its database connection lives, a batch of
    them per hop there (``_batch``)."""

    async def stream() -> AsyncIterator[Any]:
        while True:
            batch = await sync_to_async(_batch, thread_sensitive=True)(chunks)
            if batch is _END:
                return
            yield batch

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
            202: OpenApiResponse(
                description="The import job, queued: {id, status, status_url, file_name, "
                "bytes_total, bytes_read, result, error, created_at, finished_at}; poll "
                "status_url until status is done or failed."
            ),
            **api_errors(400, 401, 404, 413, 429, 503),
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
        # Storing the upload keeps a web thread busy for as long as the file takes to copy: one
        # user holds at most HEAVY_REQUESTS_PER_USER of them (docs/security.md, "Heavy
        # requests"), and as many unfinished jobs. The parse is the heavy task's.
        # What the import sets off (summaries, embeddings) is charged to the user and to the key
        # the POST came through: a spent limit refuses it before anything is stored.
        quota = request_key_limits(request.auth)
        usage.payer_check(user_id=request.user.pk, extra=quota)
        with heavy_request(user_id=request.user.pk, kind="import"):
            job = import_job_create(
                user=request.user,
                bot_id=bot_id,
                upload=upload,
                size=upload.size,
                progress_key=key,
                quota=usage.limits_pairs(quota),
            )
        body = import_job_as_dict(job)
        return Response(
            body, status=status.HTTP_202_ACCEPTED, headers={"Location": body["status_url"]}
        )


class ImportJobApi(APIView):
    @extend_schema(
        operation_id="v1_import_job",
        responses={
            200: OpenApiResponse(
                description="{id, status: queued|running|done|failed, status_url, file_name, "
                "bytes_total, bytes_read, result: {format, imported, skipped} | null, error: "
                "{code, message, details} | null, created_at, finished_at}"
            ),
            **api_errors(401, 404),
        },
    )
    def get(self, request: Request, job_id: int) -> Response:
        job = import_job_get_for_user(user=request.user, job_id=job_id)
        return Response(import_job_as_dict(job))


class ImportProgressApi(APIView):
    @extend_schema(
        operation_id="v1_import_progress",
        parameters=[OpenApiParameter("key", str, required=True)],
        responses={
            200: OpenApiResponse(
                description="{phase: queued|reading|done|failed|unknown, bytes_read, bytes_total}"
            ),
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
