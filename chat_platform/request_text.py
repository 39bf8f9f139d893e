"""Text in the URL that cannot be stored (NUL, lone surrogates; ``chat_platform.textcheck``) is
refused before any view runs, for every path parameter and, under ``/api/`` and ``/admin/``
(its filters and searches), every query value — a page reads its own, as an invitation link
that says it is not valid: under /api/ a ``validation_error`` naming it (docs/security.md),
never a database error (PostgreSQL text refuses NUL) and never a lookup that cannot match.

One check for every URL pattern, whatever its converter (``<str:prefix>``, ``<str:name>``, …),
so a view added tomorrow is covered without naming it here.
"""

from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable

API_PREFIX = "/api/"
ADMIN_PREFIX = "/admin/"
# The OpenAI-compatible API answers every unknown path itself, in its own error shape.
OPENAI_PREFIX = "/v1/"


def unstorable_url_fields(request: HttpRequest, view_kwargs: dict[str, Any]) -> list[str]:
    """The path parameters (and, under /api/ and /admin/, query parameters) holding unstorable
    text."""
    fields = [
        name
        for name, value in view_kwargs.items()
        if isinstance(value, str) and not text_is_storable(value)
    ]
    if request.path.startswith((API_PREFIX, ADMIN_PREFIX)):
        for name, values in request.GET.lists():
            if not text_is_storable(name) or not all(text_is_storable(v) for v in values):
                fields.append(name if text_is_storable(name) else "query")
    return list(dict.fromkeys(fields))


class UnstorableUrlTextMiddleware:
    """Answers 400 before the view when ``unstorable_url_fields`` finds any: the JSON error shape
    under /api/, a plain 400 for pages."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(
        self,
        request: HttpRequest,
        view_func: Callable[..., Any],
        view_args: tuple[Any, ...],
        view_kwargs: dict[str, Any],
    ) -> HttpResponse | None:
        if request.path.startswith(OPENAI_PREFIX):
            return None
        fields = unstorable_url_fields(request, view_kwargs)
        if not fields:
            return None
        if not request.path.startswith(API_PREFIX):
            return HttpResponseBadRequest(UNSTORABLE_MESSAGE, content_type="text/plain")
        return JsonResponse(
            {
                "error": {
                    "code": "validation_error",
                    "message": "The request is not valid.",
                    "details": {name: [UNSTORABLE_MESSAGE] for name in fields},
                }
            },
            status=400,
        )
