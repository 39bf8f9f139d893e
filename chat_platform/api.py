"""REST plumbing shared by every app: the one error shape of CONTRACT §11."""

from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions as drf
from rest_framework.response import Response
from rest_framework.views import set_rollback

from chat_platform import errors

_DRF_CODES: list[tuple[type[Exception], str]] = [
    (drf.NotAuthenticated, "not_authenticated"),
    (drf.AuthenticationFailed, "not_authenticated"),
    (drf.NotFound, "not_found"),
    (drf.PermissionDenied, "permission_denied"),
    (drf.ValidationError, "validation_error"),
    (drf.ParseError, "validation_error"),
    (drf.UnsupportedMediaType, "unsupported_media_type"),
    (drf.MethodNotAllowed, "method_not_allowed"),
    (drf.NotAcceptable, "not_acceptable"),
    (drf.Throttled, "throttled"),
]


def error_response(code: str, message: str, details: Any, status: int) -> Response:
    return Response(
        {"error": {"code": code, "message": message, "details": details or {}}}, status=status
    )


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, errors.PlatformError):
        set_rollback()
        return error_response(exc.code, exc.message, exc.details, exc.http_status)
    if isinstance(exc, RequestDataTooBig):
        return error_response("payload_too_large", "The request body is too large.", {}, 413)
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    if not isinstance(exc, drf.APIException):
        return None
    set_rollback()
    code = next((c for cls, c in _DRF_CODES if isinstance(exc, cls)), "error")
    if isinstance(exc, drf.ValidationError):
        details = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        message = "The request is not valid."
    else:
        details = {}
        message = str(exc.detail)
    response = error_response(code, message, details, exc.status_code)
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        response.status_code = 401
    auth_header = getattr(exc, "auth_header", None)
    if auth_header:
        response["WWW-Authenticate"] = auth_header
    return response
