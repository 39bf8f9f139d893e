"""Request bodies are bounded before they are read (chat_platform/body_limit.py): a body over its
path's limit is answered 413 without the application reading it, whether it declares its
length or arrives without one. Django's ASGI handler copied a whole 40 MB body to disk before the
views' own checks refused it, for anyone, signed in or not."""

import asyncio
import json

import pytest

from chat_platform.asgi import application
from chat_platform.body_limit import ENVELOPE_BYTES, body_limit

pytestmark = pytest.mark.django_db(transaction=True)

MB = 1024 * 1024


async def _post(path: str, *, total: int, declared: bool, chunk: int = MB):
    """POST ``total`` bytes in ``chunk``-sized pieces: (status, body, bytes the app took)."""
    headers = [(b"content-type", b"multipart/form-data; boundary=XYZ")]
    if declared:
        headers.append((b"content-length", str(total).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    taken = 0
    sent: list[dict] = []

    async def receive():
        nonlocal taken
        if taken >= total:  # the client waits for its answer
            await asyncio.Event().wait()
        piece = min(chunk, total - taken)
        taken += piece
        return {"type": "http.request", "body": b"x" * piece, "more_body": taken < total}

    async def send(message):
        sent.append(message)

    await application(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], body, taken


@pytest.mark.parametrize("path", ["/api/v1/import/", "/api/v1/sessions/1/attachments/"])
async def test_a_declared_body_over_the_limit_is_refused_unread(settings, path):
    settings.IMPORT_MAX_BYTES = settings.ATTACHMENT_MAX_BYTES = MB
    status, body, taken = await _post(path, total=40 * MB, declared=True)
    limit = MB + ENVELOPE_BYTES
    assert (status, taken) == (413, 0)
    assert json.loads(body) == {
        "error": {
            "code": "payload_too_large",
            "message": f"The request is larger than {limit:,} bytes.",
            "details": {"max_bytes": limit},
        }
    }


async def test_a_body_without_a_length_is_cut_off_at_the_limit(settings):
    settings.IMPORT_MAX_BYTES = MB
    status, body, taken = await _post("/api/v1/import/", total=40 * MB, declared=False)
    assert status == 413
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    assert taken <= MB + ENVELOPE_BYTES + MB  # the limit and the piece that crossed it


async def test_the_openai_api_answers_in_its_own_shape(settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = MB
    status, body, taken = await _post("/v1/chat/completions", total=9 * MB, declared=True)
    assert (status, taken) == (413, 0)
    assert json.loads(body)["error"] == {
        "message": f"The request is larger than {MB + ENVELOPE_BYTES:,} bytes.",
        "type": "invalid_request_error",
        "code": "payload_too_large",
        "param": None,
    }


async def test_a_body_within_the_limit_reaches_the_application(settings):
    settings.IMPORT_MAX_BYTES = MB
    status, body, taken = await _post("/api/v1/import/", total=1000, declared=True)
    assert (status, taken) == (401, 1000)  # read whole, then refused as anonymous by the view
    assert json.loads(body)["error"]["code"] == "not_authenticated"


def test_each_path_has_its_limit(settings):
    settings.IMPORT_MAX_BYTES, settings.ATTACHMENT_MAX_BYTES = 512 * MB, 10 * MB
    assert body_limit("POST", "/api/v1/import/") == 512 * MB + ENVELOPE_BYTES
    assert body_limit("POST", "/api/v1/sessions/12/attachments/") == 10 * MB + ENVELOPE_BYTES
    assert body_limit("POST", "/api/v1/sessions/12/messages/") == 8 * MB + ENVELOPE_BYTES
    assert body_limit("GET", "/api/v1/import/") == 8 * MB + ENVELOPE_BYTES
