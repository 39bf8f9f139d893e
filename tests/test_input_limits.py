"""Unbounded input is refused with a clear error and nothing stored: JSON nested too deep (REST
bodies and websocket frames, one parse: chat_platform/jsontext.py) and a ``/compact`` focus over
the 500 characters ``POST …/compact/`` allows (bots/command_check.py)."""

import json

import pytest
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from bots.models import Bot, Message
from chat_platform.asgi import application
from chat_platform.jsontext import MAX_JSON_DEPTH, JSONTooDeep, json_depth_check, json_loads
from compaction.models import CompactionEvent, Summary

DEEP = "The JSON is nested more than 64 levels deep."
# A REST body nested too deep, as every endpoint answers it.
DEEP_REFUSAL = {
    "error": {"code": "validation_error", "message": f"JSON parse error - {DEEP}", "details": {}}
}
FOCUS_TOO_LONG = {"focus": ["Ensure this field has no more than 500 characters."]}


def _nested(depth: int, inner: str = "0") -> str:
    return "[" * depth + inner + "]" * depth


# --- the parse ----------------------------------------------------------------------------------


def test_depth_is_counted_outside_strings_only():
    assert MAX_JSON_DEPTH == 64
    assert json_loads(_nested(64)) is not None
    with pytest.raises(JSONTooDeep, match=DEEP):
        json_loads(_nested(65))
    with pytest.raises(JSONTooDeep):
        json_loads('{"a": ' * 65 + "1" + "}" * 65)
    # brackets inside strings, escaped quotes included, are text
    text = json.dumps({"content": "[{" * 5000 + '\\"[[[' + "]" * 10})
    assert json_loads(text) == json.loads(text)
    # siblings are not depth
    assert json_loads("[" + ",".join(["[]"] * 5000) + "]") == [[]] * 5000
    # a depth error is a ValueError, like any other bad JSON
    with pytest.raises(ValueError):
        json_depth_check(_nested(100_000))


def _alternating(depth: int) -> str:
    """Lists and one-key objects in turn, ``depth`` levels: ``[{"k":[{"k":0}]}]``."""
    opening = "".join("[" if i % 2 == 0 else '{"k":' for i in range(depth))
    closing = "".join("]" if i % 2 == 0 else "}" for i in reversed(range(depth)))
    return opening + "0" + closing


def test_json_loads_measures_many_brackets_after_parsing_as_the_walk_does():
    """Bodies with many brackets are parsed, then their containers measured (far cheaper than
    the text walk on a long body): the same answers as ``json_depth_check``, at every edge."""
    many = ",".join(['{"role": "user", "content": "[x]"}'] * 200)
    # inside the outer list: 64 levels in all, then 65
    assert json_loads(f"[{many},{_alternating(63)}]")[0] == {"role": "user", "content": "[x]"}
    with pytest.raises(JSONTooDeep):
        json_loads(f"[{many},{_alternating(64)}]")
    with pytest.raises(JSONTooDeep):
        json_loads(f"[{many},{_nested(64)}]")
    with pytest.raises(JSONTooDeep):  # empty containers are levels too
        json_loads(f"[{many}," + "[" * 64 + "]" * 64 + "]")
    assert json_loads(f"[{many}," + "[" * 63 + "]" * 63 + "]")[-1] is not None
    # past the decoder's own recursion limit: refused the same way, never a RecursionError
    with pytest.raises(JSONTooDeep, match=DEEP):
        json_loads(_nested(100_000))
    with pytest.raises(JSONTooDeep, match=DEEP):
        json_loads(_nested(100_000).encode())
    # unbalanced or mismatched brackets are left to the walk (and then to the decoder)
    with pytest.raises(ValueError):
        json_loads("[" + "{}" * 100 + "}")
    with pytest.raises(ValueError):
        json_loads('["' + "[" * 100)


def test_bytes_are_utf8():
    assert json_loads('{"a": "é"}'.encode()) == {"a": "é"}
    with pytest.raises(ValueError):
        json_loads(b'{"a": "\xff"}')


# --- REST ---------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [1000, 5000, 100_000])
def test_a_deep_rest_body_is_a_validation_error_not_a_500(owner_client, depth):
    body = '{"name": "deep", "system_prompt": ' + _nested(depth, '"x"') + "}"
    response = owner_client.generic("POST", "/api/v1/bots/", body, content_type="application/json")
    assert (response.status_code, response.json()) == (400, DEEP_REFUSAL)
    assert Bot.objects.count() == 0


@pytest.mark.django_db
def test_a_deep_body_to_the_token_endpoint_is_a_validation_error_for_anyone(client):
    """The sign-in endpoint, open to everyone, parses with the API's parsers too: 200,000
    levels were a RecursionError and a 500."""
    response = client.generic(
        "POST", "/api/v1/auth/token/", _nested(200_000), content_type="application/json"
    )
    assert (response.status_code, response.json()) == (400, DEEP_REFUSAL)


@pytest.mark.django_db
def test_a_deep_message_body_stores_nothing(owner_client, chat_session):
    body = '{"content": ' + _nested(1000, '"hi"') + "}"
    response = owner_client.generic(
        "POST",
        f"/api/v1/sessions/{chat_session.pk}/messages/",
        body,
        content_type="application/json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == f"JSON parse error - {DEEP}"
    assert Message.objects.count() == 0


@pytest.mark.django_db
def test_64_levels_are_still_parsed(owner_client):
    body = '{"name": "ok", "ignored": ' + _nested(63) + "}"  # 64 with the outer object
    response = owner_client.generic("POST", "/api/v1/bots/", body, content_type="application/json")
    # Parsed: the body's fields are read, and the one a bot does not have is named.
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["details"] == {"ignored": ["Unknown field."]}


# --- /compact focus over REST -------------------------------------------------------------------


@pytest.mark.django_db
def test_a_compact_command_with_a_focus_over_500_is_refused_like_the_endpoint(
    owner_client, chat_session
):
    endpoint = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/compact/", {"focus": "x" * 501}, format="json"
    )
    assert endpoint.status_code == 400
    expected = {
        "error": {
            "code": "validation_error",
            "message": "The request is not valid.",
            "details": FOCUS_TOO_LONG,
        }
    }
    assert endpoint.json() == expected

    for focus in ("x" * 501, "x" * (1024 * 1024 - 9)):  # the 1 MB focus (content <= 1 MB)
        command = owner_client.post(
            f"/api/v1/sessions/{chat_session.pk}/messages/",
            {"content": f"/compact {focus}"},
            format="json",
        )
        assert command.status_code == 400
        assert command.json() == expected
    assert Message.objects.count() == 0
    assert (Summary.objects.count(), CompactionEvent.objects.count()) == (0, 0)


@pytest.mark.django_db
def test_a_compact_command_with_a_focus_of_500_runs(owner_client, chat_session):
    focus = "x" * 500
    response = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/",
        {"content": f"/compact   {focus}  "},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert response.json()["notice"]["content"] == "Nothing to compact right now."
    assert list(Message.objects.order_by("seq").values_list("kind", flat=True)) == [
        "command",
        "notice",
    ]


@pytest.mark.django_db
def test_an_oversized_compact_command_is_still_payload_too_large(owner_client, chat_session):
    response = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/",
        {"content": "/compact " + "x" * (1024 * 1024)},
        format="json",
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert Message.objects.count() == 0


# --- websocket ----------------------------------------------------------------------------------


async def _connect(session_id: int, token: str) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session_id}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


async def _next_frame(communicator) -> dict:
    return json.loads(await communicator.receive_from(timeout=10))


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inmemory_channel_layer")
async def test_deep_frames_get_an_error_and_the_socket_stays_open(chat_session, owner):
    from channels.db import database_sync_to_async

    token = (await database_sync_to_async(Token.objects.get_or_create)(user=owner))[0].key
    communicator = await _connect(chat_session.pk, token)
    for depth in (1000, 5000, 100_000):
        frame = '{"type": "message.send", "content": ' + _nested(depth, '"hi"') + "}"
        await communicator.send_to(text_data=frame)
        answer = await _next_frame(communicator)
        assert answer == {
            "type": "error",
            "error": {
                "code": "validation_error",
                "message": f"The frame is not valid: {DEEP}",
                "details": {},
            },
        }
    # the same, sent as bytes
    await communicator.send_to(bytes_data=_nested(5000).encode())
    answer = await _next_frame(communicator)
    assert answer["error"]["message"] == f"The frame is not valid: {DEEP}"
    # still open and answering
    await communicator.send_to(text_data=json.dumps({"type": "nope"}))
    answer = await _next_frame(communicator)
    assert answer["error"]["message"] == "Unknown frame type 'nope'."
    assert await database_sync_to_async(Message.objects.count)() == 0
    await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inmemory_channel_layer")
async def test_a_compact_command_with_a_long_focus_over_websocket(chat_session, owner):
    from channels.db import database_sync_to_async

    token = (await database_sync_to_async(Token.objects.get_or_create)(user=owner))[0].key
    communicator = await _connect(chat_session.pk, token)
    await communicator.send_to(
        text_data=json.dumps({"type": "message.send", "content": "/compact " + "y" * 501})
    )
    answer = await _next_frame(communicator)
    assert answer == {
        "type": "error",
        "error": {
            "code": "validation_error",
            "message": "The request is not valid.",
            "details": FOCUS_TOO_LONG,
        },
    }
    assert await database_sync_to_async(Message.objects.count)() == 0
    assert await database_sync_to_async(Summary.objects.count)() == 0
    await communicator.disconnect()
