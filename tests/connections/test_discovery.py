"""Refresh models: the fake provider's /v1/models, and servers that hang or answer garbage."""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from chat_platform.llm import discovery
from connections.models import Connection
from connections.services import connection_create
from tests.connections.conftest import SECRET_API_KEY

pytestmark = pytest.mark.django_db


class _Odd(BaseHTTPRequestHandler):
    mode = "garbage"
    release = threading.Event()

    def do_GET(self) -> None:
        if self.mode == "hang":
            self.release.wait(5)
        if self.mode == "redirect":
            self.send_response(307)
            self.send_header("Location", "http://169.254.169.254/latest")
            self.end_headers()
            return
        body = {
            "garbage": b"<html>not json</html>",
            "not-a-list": b'{"data": "nope"}',
            "hang": b"{}",
            "windows": b'{"data": [{"id": "big", "context_length": 32768}, {"id": 7},'
            b' {"id": "bad\\u0000id"}, {"id": "small", "max_model_len": 4096}]}',
        }[self.mode]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def odd_server() -> Iterator[tuple[str, type[_Odd]]]:
    handler = type("Handler", (_Odd,), {"release": threading.Event()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    finally:
        handler.release.set()
        server.shutdown()
        server.server_close()


def _connection(staff, base_url, **extra):
    return connection_create(user=staff, name="Odd", kind="openai", base_url=base_url, **extra)


def test_refresh_lists_the_fake_providers_models_with_the_key(staff, staff_client, fake_openai):
    connection = _connection(staff, fake_openai.url, api_key=SECRET_API_KEY)
    response = staff_client.post(f"/api/v1/connections/{connection.pk}/refresh-models/")
    assert response.status_code == 200
    assert response.json() == {"models": [{"id": "fake-model"}]}
    connection.refresh_from_db()
    assert connection.model_list == [{"id": "fake-model"}]
    assert connection.models_refreshed_at is not None
    assert fake_openai.headers == []  # GET /models is not a chat request: nothing served
    # what users see of it: the models
    rows = staff_client.get("/api/v1/connections/").json()
    assert [r["models"] for r in rows if r["name"] == "Odd"] == [[{"id": "fake-model"}]]


def test_context_windows_come_from_the_answer_and_bad_entries_are_skipped(staff, odd_server):
    url, handler = odd_server
    handler.mode = "windows"
    found = discovery.models_list_openai_compatible(base_url=url)
    assert [m.as_dict() for m in found] == [
        {"id": "big", "context_window": 32768},
        {"id": "small", "context_window": 4096},
    ]


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("garbage", "the server's answer to GET /models is not JSON"),
        ("not-a-list", 'the server\'s answer is not a model list (no "data" array)'),
        ("redirect", "the provider answered with a redirect (HTTP 307)"),
    ],
)
def test_garbage_answers_give_a_clear_error(staff, staff_client, odd_server, mode, reason):
    url, handler = odd_server
    handler.mode = mode
    connection = _connection(staff, url)
    response = staff_client.post(f"/api/v1/connections/{connection.pk}/refresh-models/")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert error["details"]["base_url"][0].startswith(reason)
    assert "169.254.169.254" not in response.content.decode()  # a redirect's target is not told
    assert Connection.objects.get(pk=connection.pk).model_list == []


def test_a_server_that_hangs_times_out_with_a_clear_error(
    staff, staff_client, odd_server, monkeypatch
):
    url, handler = odd_server
    handler.mode = "hang"
    monkeypatch.setattr(discovery, "DISCOVERY_TIMEOUT_SECONDS", 0.3)
    connection = _connection(staff, url)
    response = staff_client.post(f"/api/v1/connections/{connection.pk}/refresh-models/")
    handler.release.set()
    assert response.status_code == 400
    assert response.json()["error"]["details"]["base_url"] == [
        "the server did not answer within 0.3 s"
    ]


def test_an_unreachable_server_is_a_clear_error(staff, staff_client):
    connection = _connection(staff, "http://127.0.0.1:9/v1")
    response = staff_client.post(f"/api/v1/connections/{connection.pk}/refresh-models/")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["base_url"] == ["could not reach the server"]


def test_hosted_providers_list_from_litellm(staff):
    connection = connection_create(user=staff, name="Claude", kind="anthropic")
    from connections.services import connection_models_refresh

    refreshed = connection_models_refresh(user=staff, connection_id=connection.pk)
    ids = [m["id"] for m in refreshed.model_list]
    assert ids and all(not i.startswith("anthropic/") for i in ids)
    windows = [m.get("context_window") for m in refreshed.model_list]
    assert any(isinstance(w, int) and w > 0 for w in windows)
