"""Every answer under /api/ is the JSON error shape (docs/api.md), and the schema says so."""

import json
import logging

import pytest
from django.db import OperationalError as DatabaseOperationalError
from django.test import Client
from drf_spectacular.generators import SchemaGenerator
from kombu.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError

from bots import queries

METHODS = ["get", "post", "put", "patch", "delete", "options", "head"]


def _error(response) -> dict:
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    body = json.loads(response.content)
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    return body["error"]


@pytest.fixture(params=[False, True], ids=["debug-off", "debug-on"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


@pytest.mark.django_db
@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/nope/",
        "/api/anything",
        "/api/",
        "/api/v1/bots/abc/",
        "/api/v1/sessions/abc/messages/",
        "/api/v1/sessions/1.5/",
        "/api/v1/messages/-1/pin/",
    ],
)
@pytest.mark.parametrize("authenticated", [False, True], ids=["anonymous", "token"])
def test_unknown_paths_and_bad_ids_are_json_404(debug, path, authenticated, owner_client):
    client = owner_client if authenticated else Client()
    for method in METHODS:
        response = getattr(client, method)(path)
        assert response.status_code == 404, (method, response.status_code)
        if method == "head":
            continue
        assert _error(response) == {"code": "not_found", "message": "Not found.", "details": {}}


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/auth/token", "/api/v1/bots", "/api/v1/sessions/1"])
def test_a_path_missing_its_slash_is_a_json_404_that_names_the_right_one(
    debug, path, owner_client, caplog
):
    """Django's slash appending answered POST, PUT and PATCH with a 500 under DEBUG (what
    ``make run`` sets) and everything else with an HTML 301 that drops a request's body."""
    with caplog.at_level(logging.ERROR):
        for method in ("post", "put", "patch", "delete"):
            response = getattr(owner_client, method)(
                path, {"username": "x"}, content_type="application/json"
            )
            assert response.status_code == 404, (method, response.status_code)
            assert _error(response) == {
                "code": "not_found",
                "message": f"No such path: the API's paths end with a slash ({path}/).",
                "details": {},
            }
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
    # A page a browser asks for is still sent on to its address (no body to lose).
    moved = owner_client.get(path)
    assert (moved.status_code, moved["Location"]) == (301, f"{path}/")


@pytest.mark.django_db
def test_the_bare_prefixes_answer_in_their_apis_shapes(owner_client, debug):
    assert _error(owner_client.post("/api"))["code"] == "not_found"
    response = owner_client.post("/v1", {}, content_type="application/json")
    assert response.status_code == 404
    assert json.loads(response.content)["error"]["code"] == "not_found"


@pytest.mark.django_db
def test_wrong_method_is_json_405(owner_client, debug):
    response = owner_client.put("/api/v1/bots/")
    assert response.status_code == 405
    assert _error(response) == {
        "code": "method_not_allowed",
        "message": 'Method "PUT" not allowed.',
        "details": {},
    }


@pytest.mark.django_db
def test_html_is_never_offered_by_the_api(owner_client):
    browser = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
    response = owner_client.get("/api/v1/bots/999999/", HTTP_ACCEPT=browser)
    assert response.status_code == 404
    assert _error(response)["code"] == "not_found"
    response = owner_client.get("/api/v1/bots/", HTTP_ACCEPT="text/html")
    assert response.status_code == 406
    assert _error(response)["code"] == "not_acceptable"


@pytest.mark.django_db
def test_unexpected_exception_in_a_view_is_json_500_with_logged_traceback(
    owner_client, monkeypatch, caplog, debug
):
    def explode(**kwargs):
        raise RuntimeError("boom in the selector")

    monkeypatch.setattr(queries, "bot_list_for_user", explode)
    with caplog.at_level(logging.ERROR):
        response = owner_client.get("/api/v1/bots/")
    assert response.status_code == 500
    assert _error(response) == {
        "code": "internal_error",
        "message": "Something went wrong on the server.",
        "details": {},
    }
    # One line, ours, with the traceback (Django's own traceback-less line is not added).
    records = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(records) == 1
    line = json.loads(logging.getLogger().handlers[0].format(records[0]))
    assert (line["event"], line["level"], line["path"], line["method"]) == (
        "api_internal_error",
        "error",
        "/api/v1/bots/",
        "GET",
    )
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert "RuntimeError: boom in the selector" in line["exception"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    "exc",
    [
        RedisConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused."),
        OperationalError("[Errno 111] Connection refused"),
        DatabaseOperationalError("couldn't get a connection after 10.00 sec"),
    ],
    ids=["redis", "kombu", "database-saturated"],
)
def test_infrastructure_outage_is_503(owner_client, monkeypatch, caplog, exc):
    def down(**kwargs):
        raise exc

    monkeypatch.setattr(queries, "bot_list_for_user", down)
    with caplog.at_level(logging.ERROR):
        response = owner_client.get("/api/v1/bots/")
    assert response.status_code == 503
    assert _error(response) == {
        "code": "service_unavailable",
        "message": "A service this request needs is down; nothing was changed. Try again shortly.",
        "details": {},
    }
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    line = json.loads(logging.getLogger().handlers[0].format(record))
    assert line["event"] == "api_service_unavailable"
    assert type(exc).__name__ in line["exception"]


class ExplodingMiddleware:
    """Test-only: fails outside any view, where DRF's handler never runs."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "explode" in request.path:
            raise RuntimeError("boom in a middleware")
        return self.get_response(request)


@pytest.mark.django_db
def test_exception_outside_a_view_is_json_500_and_logged_with_traceback(settings, caplog, debug):
    settings.MIDDLEWARE = [*settings.MIDDLEWARE, "tests.test_api_errors.ExplodingMiddleware"]
    client = Client(raise_request_exception=False)
    with caplog.at_level(logging.ERROR):
        response = client.post("/api/v1/explode/", {"a": 1})
    assert response.status_code == 500
    assert _error(response) == {
        "code": "internal_error",
        "message": "Something went wrong on the server.",
        "details": {},
    }
    # Django's request logger (a stdlib logger) through our formatter: a JSON line whose
    # traceback is text, not "<traceback object at 0x…>".
    [record] = [r for r in caplog.records if r.name == "django.request"]
    line = json.loads(logging.getLogger().handlers[0].format(record))
    assert (line["event"], line["level"]) == ("Internal Server Error: /api/v1/explode/", "error")
    assert line["exception"].startswith("Traceback (most recent call last):")
    assert "RuntimeError: boom in a middleware" in line["exception"]
    assert "exc_info" not in line
    # Outside /api/ Django's own pages are kept.
    page = client.get("/explode/")
    assert page.status_code == 500
    assert not page["Content-Type"].startswith("application/json")


@pytest.mark.django_db
def test_refused_host_under_api_is_json_400(settings):
    settings.ALLOWED_HOSTS = ["chat.example.com"]
    response = Client().get("/api/v1/bots/", HTTP_HOST="evil.example")
    assert response.status_code == 400
    assert _error(response) == {
        "code": "bad_request",
        "message": "The request is not valid.",
        "details": {},
    }


# --- the schema documents the errors -------------------------------------------------------
@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


def _operations(schema):
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            yield method.upper(), path, operation


def test_every_operation_documents_its_error_responses(schema):
    operations = list(_operations(schema))
    assert len(operations) >= 18
    for method, path, operation in operations:
        codes = {int(c) for c in operation["responses"]}
        errors = {c for c in codes if c >= 400}
        assert errors, (method, path)
        if path != "/api/v1/auth/token/":
            assert 401 in codes, (method, path)
        if "{" in path:
            assert 404 in codes, (method, path)
        if "requestBody" in operation:
            assert {400, 413} <= codes, (method, path)
        for code in errors:
            content = operation["responses"][str(code)]["content"]["application/json"]
            assert content["schema"] == {"$ref": "#/components/schemas/Error"}, (method, path)
            assert operation["responses"][str(code)]["description"], (method, path, code)
    error = schema["components"]["schemas"]["Error"]
    assert error["required"] == ["error"]
    body = schema["components"]["schemas"]["ErrorBody"]
    assert body["required"] == ["code", "details", "message"]


@pytest.mark.parametrize(
    ("method", "path", "expected"),
    [
        ("POST", "/api/v1/auth/token/", {200, 400, 403, 413, 429}),
        ("GET", "/api/v1/bots/", {200, 401}),
        ("POST", "/api/v1/bots/", {201, 400, 401, 413}),
        ("GET", "/api/v1/bots/{bot_id}/", {200, 401, 404}),
        ("PATCH", "/api/v1/bots/{bot_id}/", {200, 400, 401, 403, 404, 413}),
        ("DELETE", "/api/v1/bots/{bot_id}/", {204, 401, 403, 404}),
        ("GET", "/api/v1/sessions/", {200, 401}),
        ("POST", "/api/v1/sessions/", {201, 400, 401, 404, 413}),
        ("GET", "/api/v1/sessions/{session_id}/", {200, 401, 404}),
        ("DELETE", "/api/v1/sessions/{session_id}/", {204, 401, 404}),
        ("GET", "/api/v1/sessions/{session_id}/messages/", {200, 400, 401, 404}),
        (
            "POST",
            "/api/v1/sessions/{session_id}/messages/",
            {201, 202, 400, 401, 404, 413, 422, 429, 502, 503},
        ),
        (
            "POST",
            "/api/v1/sessions/{session_id}/compact/",
            {200, 400, 401, 404, 409, 413, 429, 503},
        ),
        ("GET", "/api/v1/sessions/{session_id}/context/", {200, 401, 404, 503}),
        ("GET", "/api/v1/sessions/{session_id}/summaries/", {200, 401, 404}),
        ("POST", "/api/v1/messages/{message_id}/pin/", {200, 401, 404}),
        ("POST", "/api/v1/messages/{message_id}/unpin/", {200, 401, 404}),
        ("GET", "/api/v1/compaction-events/", {200, 401, 404}),
    ],
)
def test_operation_responses(schema, method, path, expected):
    assert {int(c) for c in schema["paths"][path][method.lower()]["responses"]} == expected


def test_schema_matches_validation(schema):
    components = schema["components"]["schemas"]
    content = components["MessageInput"]["properties"]["content"]
    assert (content["type"], content["minLength"], content["pattern"]) == ("string", 1, r"\S")
    assert components["MessageInput"]["required"] == ["content"]
    # blanks refused -> minLength 1; blanks allowed -> no minLength
    for name in ("BotInput", "PatchedBotInput"):
        props = components[name]["properties"]
        assert props["name"]["minLength"] == 1
        assert props["model"]["minLength"] == 1
        assert "minLength" not in props["system_prompt"]
    assert components["AuthToken"]["properties"]["username"]["minLength"] == 1
    assert "minLength" not in components["SessionInput"]["properties"]["title"]
    assert "minLength" not in components["CompactInput"]["properties"]["focus"]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("content", "details"),
    [
        (5, {"content": ["This field is required and must be text."]}),
        (["a"], {"content": ["This field is required and must be text."]}),
        (None, {"content": ["This field may not be null."]}),
        ("   ", {"content": ["This field may not be blank."]}),
    ],
)
def test_content_errors_unchanged_by_the_schema_type(owner_client, chat_session, content, details):
    response = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/", {"content": content}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert response.json()["error"]["details"] == details


@pytest.mark.django_db
def test_form_content_is_text(owner_client, chat_session, eager_tasks):
    # A form field is text: "0" is the message "0", not the JSON number 0.
    response = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/", {"content": "0"}, format="multipart"
    )
    assert response.status_code == 202
    assert response.json()["user_message"]["content"] == "0"


async def _asgi_post(path: str, chunks: list[bytes]) -> tuple[int, dict]:
    """POST through the ASGI application as a server relays a chunked body: no Content-Length
    header, the body in several messages."""
    from asgiref.testing import ApplicationCommunicator

    from chat_platform.asgi import application

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", b"application/json"),
            (b"transfer-encoding", b"chunked"),
        ],
        "client": ("127.0.0.1", 40000),
        "server": ("testserver", 80),
    }
    communicator = ApplicationCommunicator(application, scope)
    for n, chunk in enumerate(chunks):
        await communicator.send_input(
            {"type": "http.request", "body": chunk, "more_body": n < len(chunks) - 1}
        )
    start = await communicator.receive_output(timeout=20)
    body = await communicator.receive_output(timeout=20)
    return start["status"], json.loads(body["body"])


@pytest.mark.django_db(transaction=True)
async def test_a_chunked_json_body_is_read_not_taken_for_empty(settings):
    """DRF reads no body without a Content-Length: a chunked request (httpx with a generator,
    curl -H 'Transfer-Encoding: chunked') answered 'This field is required.' for every field,
    and a 1.1 MB message 400 instead of 413."""
    from asgiref.sync import sync_to_async

    from tests.factories import UserFactory

    await sync_to_async(UserFactory)(username="chunky")
    body = json.dumps({"username": "chunky", "password": "pw-123456"}).encode()
    status, answer = await _asgi_post("/api/v1/auth/token/", [body[:10], body[10:]])
    assert (status, set(answer)) == (200, {"token"})
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    status, answer = await _asgi_post("/api/v1/auth/token/", [b'{"username": "' + b"x" * 2000])
    assert (status, answer["error"]["code"]) == (413, "payload_too_large")
