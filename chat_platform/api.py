"""REST plumbing shared by every app: the one error shape of docs/api.md.

Every answer under ``/api/`` is ``{"error": {"code", "message", "details"}}`` when it is an
error: DRF views through ``exception_handler`` (unexpected exceptions included: 500
``internal_error``, logged with their traceback), and everything outside a view (unknown paths,
ids the URL patterns refuse, errors in middleware) through ``ApiErrorShapeMiddleware``. The
OpenAPI schema documents the same errors (``AutoSchema``, ``api_errors``).
"""

import io
from collections.abc import Callable
from typing import Any

import structlog
from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.common import CommonMiddleware
from django.urls import Resolver404, resolve
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import exceptions as drf
from rest_framework import permissions, serializers
from rest_framework.response import Response
from rest_framework.views import set_rollback

from chat_platform import errors
from chat_platform.outage import OUTAGE_ERRORS

log = structlog.get_logger(__name__)

API_PREFIX = "/api/"
# The bases of the two APIs (this one and the OpenAI-compatible one): no slash is appended to a
# path under them by redirecting a request that has a body (``ApiCommonMiddleware``).
_API_BASES = ("/api", "/v1")


def _under_an_api(path: str) -> bool:
    return any(path == base or path.startswith(base + "/") for base in _API_BASES)


def _is_api_path(path: str) -> bool:
    return path == API_PREFIX.rstrip("/") or path.startswith(API_PREFIX)


def _missing_slash(path: str) -> bool:
    """The path names a route once a slash is added (``/api/v1/bots``)."""
    if path.endswith("/"):
        return False
    try:
        resolve(path + "/")
    except Resolver404:
        return False
    return True


def secret_response(body: dict, status: int = 200) -> Response:
    """An answer that carries a secret shown once (a token, an API key): never stored by a
    browser's or a proxy's cache (``Cache-Control: no-store``)."""
    response = Response(body, status=status)
    response["Cache-Control"] = "no-store"
    response["Pragma"] = "no-cache"
    return response


class ChunkedJsonBodyMiddleware:
    """A JSON body under /api/ sent without a ``Content-Length`` (chunked: the ASGI server
    relays it whole): DRF reads a body by that header and took it for empty ("This field is
    required." for every field). It is read here, at most ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (a
    larger one is ``payload_too_large``, as with the header), and given its length."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if (
            request.method in ("POST", "PUT", "PATCH")
            and not request.META.get("CONTENT_LENGTH")
            and request.content_type == "application/json"
            and _is_api_path(request.path)
        ):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            body = request.read(limit + 1) if limit is not None else request.read()
            if limit is not None and len(body) > limit:
                return JsonResponse(
                    {
                        "error": {
                            "code": "payload_too_large",
                            "message": "The request body is too large.",
                            "details": {},
                        }
                    },
                    status=413,
                )
            # As Django's own ``HttpRequest.body`` keeps a body it read: readable again.
            request._body = body  # noqa: SLF001
            request._stream = io.BytesIO(body)  # type: ignore[assignment]  # noqa: SLF001
            request.META["CONTENT_LENGTH"] = str(len(body))
        return self.get_response(request)


class ApiCommonMiddleware(CommonMiddleware):
    """Django's ``CommonMiddleware``, but a request under an API with a method other than
    GET or HEAD is never sent on to the path with a slash: under DEBUG Django raised (a 500),
    else it answered an HTML 301 that a client follows as a GET, without its body. It is a 404
    in the API's shape instead, which names the right path (``ApiErrorShapeMiddleware``)."""

    def should_redirect_with_slash(self, request: HttpRequest) -> bool:
        if request.method not in ("GET", "HEAD") and _under_an_api(request.path_info):
            return False
        return super().should_redirect_with_slash(request)


# OUTAGE_ERRORS (chat_platform.outage): a service the request needs is down or saturated.
# Answered 503 service_unavailable like the services' own ServiceUnavailable, and logged with the
# traceback. The failed request's transaction was rolled back: nothing was changed.

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
    (drf.Throttled, "rate_limited"),
]


def error_response(code: str, message: str, details: Any, status: int) -> Response:
    return Response(
        {"error": {"code": code, "message": message, "details": details or {}}}, status=status
    )


def _request_fields(context: dict[str, Any]) -> dict[str, str]:
    request = context.get("request")
    if request is None:
        return {}
    return {"method": request.method, "path": request.path}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, errors.PlatformError):
        set_rollback()
        response = error_response(exc.code, exc.message, exc.details, exc.http_status)
        if isinstance(exc, errors.RateLimited):
            response["Retry-After"] = str(exc.retry_after)
        return response
    if isinstance(exc, RequestDataTooBig):
        return error_response("payload_too_large", "The request body is too large.", {}, 413)
    if isinstance(exc, OUTAGE_ERRORS):
        set_rollback()
        log.error("api_service_unavailable", exc_info=exc, **_request_fields(context))
        unavailable = errors.ServiceUnavailable()
        return _logged(
            error_response(unavailable.code, unavailable.message, {}, unavailable.http_status)
        )
    if isinstance(exc, Http404):
        exc = drf.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = drf.PermissionDenied()
    if not isinstance(exc, drf.APIException):
        set_rollback()
        log.error("api_internal_error", exc_info=exc, **_request_fields(context))
        return _logged(
            error_response("internal_error", "Something went wrong on the server.", {}, 500)
        )
    set_rollback()
    code = next((c for cls, c in _DRF_CODES if isinstance(exc, cls)), "error")
    if isinstance(exc, drf.ValidationError):
        details = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        message = "The request is not valid."
    elif isinstance(exc, drf.Throttled) and exc.wait is not None:
        details = {"retry_after_seconds": int(exc.wait)}
        message = str(exc.detail)
    else:
        details = {}
        message = str(exc.detail)
    response = error_response(code, message, details, exc.status_code)
    if isinstance(exc, drf.Throttled) and exc.wait is not None:
        response["Retry-After"] = str(int(exc.wait))
    if isinstance(exc, drf.NotAuthenticated | drf.AuthenticationFailed):
        response.status_code = 401
    auth_header = getattr(exc, "auth_header", None)
    if auth_header:
        response["WWW-Authenticate"] = auth_header
    return response


def _logged(response: Response) -> Response:
    # Logged above with its traceback: Django's request logger would add a second line for the
    # same error without one ("Internal Server Error: …").
    response._has_been_logged = True
    return response


# --- outside DRF views ------------------------------------------------------------------------
_STATUS_CODES = {
    400: ("bad_request", "The request is not valid."),
    403: ("permission_denied", "You do not have permission to do this."),
    404: ("not_found", "Not found."),
    405: ("method_not_allowed", "Method not allowed."),
    413: ("payload_too_large", "The request body is too large."),
    500: ("internal_error", "Something went wrong on the server."),
}


class ApiErrorShapeMiddleware:
    """Outermost: an error answer under /api/ that is not JSON becomes the error shape.

    DRF views already answer JSON; this covers what never reaches one, for every method, DEBUG
    or not: paths no URL pattern matches (``/api/v1/nope/``, ``/api/v1/bots/abc/``), a refused
    Host, and exceptions in middleware (Django has logged those with their traceback already).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code >= 400
            and _is_api_path(request.path)
            and not response.get("Content-Type", "").startswith("application/json")
        ):
            code, message = _STATUS_CODES.get(
                response.status_code,
                ("internal_error", "Something went wrong on the server.")
                if response.status_code >= 500
                else ("error", "The request could not be served."),
            )
            if response.status_code == 404 and _missing_slash(request.path_info):
                message = f"No such path: the API's paths end with a slash ({request.path_info}/)."
            replaced = JsonResponse(
                {"error": {"code": code, "message": message, "details": {}}},
                status=response.status_code,
            )
            if response.has_header("Allow"):
                replaced["Allow"] = response["Allow"]
            # Django logged the original (with its traceback): not once more without one.
            replaced._has_been_logged = getattr(  # type: ignore[attr-defined]
                response, "_has_been_logged", False
            )
            return replaced
        return response


# --- OpenAPI ------------------------------------------------------------------------------------
class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField(help_text="Stable error code, e.g. `validation_error`.")
    message = serializers.CharField(help_text="Human-readable explanation.")
    details = serializers.JSONField(
        help_text="Per-field messages for `validation_error`; otherwise context, often `{}`."
    )


class ErrorSerializer(serializers.Serializer):
    """The error shape of every failed /api/ request (docs/api.md)."""

    error = ErrorBodySerializer()


_ERROR_DESCRIPTIONS = {
    400: "`validation_error`: the request is not valid (`details` names the fields).",
    401: "`not_authenticated`: no valid session or token.",
    403: "`permission_denied`: only the owner or staff may change this.",
    404: "`not_found`: no such object, or it belongs to someone else.",
    409: "`compaction_busy`: another compaction of this session did not finish in time.",
    413: "`payload_too_large`: the content (1 MB) or the request body is too large.",
    422: "`context_too_large`: the message does not fit in the bot's context budget.",
    429: "`rate_limited`: too many attempts; `Retry-After` says how many seconds to wait.",
    502: "`model_unavailable`: the model provider did not answer.",
    503: "`service_unavailable`: a service the request needs is down; nothing was changed.",
}


def api_errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """Error responses for ``@extend_schema(responses={...})``, in the shared error shape."""
    return {
        status: OpenApiResponse(ErrorSerializer, description=_ERROR_DESCRIPTIONS[status])
        for status in statuses
    }


class AutoSchema(SpectacularAutoSchema):
    """Every operation documents its errors: views list the ones particular to them
    (``api_errors(409, 503)``); these follow from the operation itself:
    401 unless anyone may call it, 404 when the path names an object, 400 and 413 when it takes
    a body. Text fields that refuse blanks say so (``minLength: 1``)."""

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        statuses = []
        if not all(isinstance(p, permissions.AllowAny) for p in self.view.get_permissions()):
            statuses.append(401)
        if "{" in self.path:
            statuses.append(404)
        if self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None:
            statuses += [400, 413]
        for status, response in api_errors(*statuses).items():
            if str(status) not in responses:
                responses[str(status)] = self._get_response_for_code(
                    response, str(status), direction=direction
                )
        return dict(sorted(responses.items()))

    def _map_serializer_field(self, field: Any, direction: Any, bypass_extensions: bool = False):  # type: ignore[no-untyped-def]
        schema = super()._map_serializer_field(field, direction, bypass_extensions)
        if (
            direction == "request"
            and isinstance(field, serializers.CharField)
            and not field.allow_blank
            and schema.get("type") == "string"
            and "minLength" not in schema
        ):
            schema["minLength"] = 1
        return schema
