"""REST adapters for attachments (parse, call one service or selector, serialise):

- ``POST /api/v1/sessions/{id}/attachments/`` (multipart, field ``file``) -> 201
  ``{id, name, size, kind, status: "ready", error: ""}``, or for a PDF, whose text is read by a
  task, 202 with ``status: "processing"``; ``GET /api/v1/attachments/{id}/status/`` then says
  ``ready`` or ``failed`` (``error`` names the limit or the problem); then
  ``POST /api/v1/sessions/{id}/messages/`` with ``attachments: [ids]`` sends the ready ones as
  part of the message.
- ``GET /api/v1/attachments/{id}/``: the original file, to its owner only (others: not_found).
- ``GET /api/v1/attachments/{id}/thumbnail/``: an image, inline, for the transcript; the same
  check, and only within the thumbnail limits (docs/attachments.md "Thumbnails").
"""

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from attachments.models import Attachment
from attachments.queries import attachment_get_for_user, attachment_thumbnail_for_user
from attachments.services import attachment_upload, check_upload_size
from bots.queries import session_get_for_user
from chat_platform.api import api_errors
from chat_platform.errors import ValidationFailed

# The multipart envelope around the file (boundaries, headers) on top of the file's own size.
_ENVELOPE_BYTES = 64 * 1024


class AttachmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Attachment
        fields = ["id", "name", "size", "kind", "status", "error"]


class SessionAttachmentsApi(APIView):
    parser_classes = [MultiPartParser]

    @extend_schema(
        operation_id="v1_session_attachment_upload",
        request={
            "multipart/form-data": {
                "type": "object",
                "properties": {"file": {"type": "string", "format": "binary"}},
                "required": ["file"],
            }
        },
        responses={
            201: AttachmentSerializer,
            202: AttachmentSerializer,
            **api_errors(400, 404, 413),
        },
    )
    def post(self, request: Request, session_id: int) -> Response:
        # Access first: another user's chat is not_found whatever the body holds.
        session_get_for_user(user=request.user, session_id=session_id)
        claimed = request.META.get("CONTENT_LENGTH") or ""
        if claimed.isdigit():
            check_upload_size(size=max(0, int(claimed) - _ENVELOPE_BYTES))
        files = request.FILES.getlist("file")
        if len(files) != 1:
            raise ValidationFailed(details={"file": ["Attach exactly one file (field 'file')."]})
        upload = files[0]
        check_upload_size(size=upload.size)
        attachment = attachment_upload(
            user=request.user, session_id=session_id, name=upload.name, data=upload.read()
        )
        code = (
            status.HTTP_202_ACCEPTED
            if attachment.status == Attachment.Status.PROCESSING
            else status.HTTP_201_CREATED
        )
        return Response(AttachmentSerializer(attachment).data, status=code)


class AttachmentStatusApi(APIView):
    @extend_schema(
        operation_id="v1_attachment_status",
        responses={200: AttachmentSerializer, **api_errors(404)},
    )
    def get(self, request: Request, attachment_id: int) -> Response:
        attachment = attachment_get_for_user(
            user=request.user, attachment_id=attachment_id, with_content=False
        )
        return Response(AttachmentSerializer(attachment).data)


class AttachmentThumbnailApi(APIView):
    @extend_schema(
        operation_id="v1_attachment_thumbnail",
        responses={(200, "image/*"): bytes, **api_errors(404)},
    )
    def get(self, request: Request, attachment_id: int) -> HttpResponse:
        attachment = attachment_thumbnail_for_user(user=request.user, attachment_id=attachment_id)
        # The type is the one its signature matched at upload (PNG, JPEG, GIF or WebP: never
        # SVG or HTML), shown inline; nothing in it may run or load anything.
        response = HttpResponse(bytes(attachment.data), content_type=attachment.content_type)
        response["Content-Disposition"] = content_disposition_header(
            as_attachment=False, filename=attachment.name
        )
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Security-Policy"] = "default-src 'none'; sandbox"
        response["Cache-Control"] = "private, max-age=86400"
        response["Content-Length"] = str(attachment.size)
        return response


class AttachmentDownloadApi(APIView):
    @extend_schema(
        operation_id="v1_attachment_download",
        responses={(200, "application/octet-stream"): bytes, **api_errors(404)},
    )
    def get(self, request: Request, attachment_id: int) -> HttpResponse:
        attachment = attachment_get_for_user(user=request.user, attachment_id=attachment_id)
        response = HttpResponse(bytes(attachment.data), content_type=attachment.content_type)
        # Always a download, never rendered on our origin (an uploaded .html or .svg stays a file).
        response["Content-Disposition"] = content_disposition_header(
            as_attachment=True, filename=attachment.name
        )
        response["X-Content-Type-Options"] = "nosniff"
        response["Content-Length"] = str(attachment.size)
        return response
