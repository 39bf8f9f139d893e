"""The records API (docs/api.md): every endpoint, exact bodies, access as not_found."""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from chat_platform.asgi import application
from memory import services
from memory.models import MemoryRecord

pytestmark = pytest.mark.django_db


def _url(session, name=None):
    base = f"/api/v1/sessions/{session.pk}/records/"
    return f"{base}{name}/" if name else base


def _iso(value):
    return value.isoformat().replace("+00:00", "Z")


def _item(record, **extra):
    record.refresh_from_db()
    return {
        "name": record.name,
        "kind": record.kind,
        "scope": record.scope,
        "description": record.description,
        "first_seq": record.first_seq,
        "last_seq": record.last_seq,
        "token_count": record.token_count,
        "created_at": _iso(record.created_at),
        **extra,
    }


@pytest.fixture
def records(chat_session):
    snapshot = services.snapshot_write(
        session=chat_session, first_seq=1, last_seq=6, body="[1] user: my sister plays cello."
    )
    services.snapshot_mark_indexed(snapshot=snapshot)
    home = services.record_save(
        session=chat_session,
        name="home",
        description="Where I live",
        body="I live in Porto.",
        scope="bot",
    )
    car = services.record_save(
        session=chat_session, name="car", description="My car", body="A blue Volvo."
    )
    return {"snapshot": snapshot, "home": home, "car": car}


def _not_found():
    return {"error": {"code": "not_found", "message": "Session not found.", "details": {}}}


def test_list_is_newest_first_with_the_contract_fields(owner_client, chat_session, records):
    response = owner_client.get(_url(chat_session))
    assert response.status_code == 200
    assert response.json() == [
        _item(records["car"]),
        _item(records["home"]),
        _item(records["snapshot"]),
    ]
    assert response.json()[2] | {"created_at": None} == {
        "name": "snapshot_1_6",
        "kind": "snapshot",
        "scope": "session",
        "description": "Pre-compaction snapshot of messages 1–6: sister, plays, cello",
        "first_seq": 1,
        "last_seq": 6,
        "token_count": records["snapshot"].token_count,
        "created_at": None,
    }


def test_list_filters_by_kind_and_scope(owner_client, chat_session, records):
    names = lambda r: [i["name"] for i in r.json()]  # noqa: E731
    assert names(owner_client.get(_url(chat_session), {"kind": "snapshot"})) == ["snapshot_1_6"]
    assert names(owner_client.get(_url(chat_session), {"kind": "info"})) == ["car", "home"]
    assert names(owner_client.get(_url(chat_session), {"scope": "bot"})) == ["home"]
    bad = owner_client.get(_url(chat_session), {"kind": "secret"})
    assert (bad.status_code, bad.json()) == (
        400,
        {
            "error": {
                "code": "validation_error",
                "message": "The request is not valid.",
                "details": {"kind": ["Must be one of: snapshot, info."]},
            }
        },
    )


def test_q_searches_ranked_with_excerpts(owner_client, chat_session, records):
    response = owner_client.get(_url(chat_session), {"q": "cello"})
    assert response.status_code == 200
    assert response.json() == [
        # a snapshot whose messages are not indexed is matched as a record: no seqs
        {**_item(records["snapshot"], excerpt="[1] user: my sister plays **cello**."), "seqs": []}
    ]
    assert owner_client.get(_url(chat_session), {"q": "cello", "kind": "info"}).json() == []
    assert owner_client.get(_url(chat_session), {"q": "' OR 'x'='x"}).json() == []
    # blank q is no search at all
    assert len(owner_client.get(_url(chat_session), {"q": "  "}).json()) == 3


def test_get_one_adds_the_body(owner_client, chat_session, records):
    response = owner_client.get(_url(chat_session, "home"))
    assert response.status_code == 200
    assert response.json() == _item(records["home"], body="I live in Porto.")
    missing = owner_client.get(_url(chat_session, "nope"))
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")


def test_bot_scoped_record_is_served_from_the_sibling_chat(owner_client, sibling_session, records):
    response = owner_client.get(_url(sibling_session))
    assert [i["name"] for i in response.json()] == ["home"]
    assert owner_client.get(_url(sibling_session, "home")).json()["body"] == "I live in Porto."
    assert owner_client.get(_url(sibling_session, "car")).status_code == 404


def test_post_creates_an_info_record(owner_client, chat_session, sibling_session):
    response = owner_client.post(
        _url(chat_session),
        {"name": "locker", "description": "Locker code", "body": "It is 4471.", "scope": "bot"},
        format="json",
    )
    assert response.status_code == 201
    record = MemoryRecord.objects.get(name="locker")
    assert response.json() == _item(record, body="It is 4471.")
    assert (record.scope, record.kind, record.session_id, record.user_id, record.bot_id) == (
        "bot",
        "info",
        None,
        chat_session.user_id,
        chat_session.bot_id,
    )
    default = owner_client.post(
        _url(sibling_session), {"name": "n", "description": "d", "body": "b"}, format="json"
    )
    assert (default.status_code, default.json()["scope"]) == (201, "session")
    said = owner_client.post(
        _url(sibling_session),
        {"name": "k", "description": "d", "body": "b", "kind": "info"},
        format="json",
    )
    assert (said.status_code, said.json()["kind"]) == (201, "info")


@pytest.mark.parametrize(
    ("payload", "details"),
    [
        (
            {"name": "Bad Name!"},
            {"name": ["Use 1–80 characters: lowercase letters, digits, '_' and '-'."]},
        ),
        (
            {"description": "x" * 141},
            {"description": ["Ensure this value has at most 140 characters (it has 141)."]},
        ),
        ({"body": "a\x00b"}, {"body": ["Null characters are not allowed."]}),
        (
            {"body": "lone \ud800"},
            {"body": ["Surrogate characters are not allowed: U+D800."]},
        ),
        ({"body": ""}, {"body": ["This field may not be blank."]}),
        ({"scope": "world"}, {"scope": ['"world" is not a valid choice.']}),
        (
            {"name": "snapshot_1_6"},
            {"name": ["Names starting with 'snapshot_' are reserved for snapshots."]},
        ),
        ({"name": "car"}, {"name": ["A record named 'car' already exists in this chat."]}),
        # Made an info record and answered 201 before: the field was dropped, not refused.
        (
            {"kind": "snapshot"},
            {
                "kind": [
                    'Only "info" records can be made here: snapshots are written by '
                    "compaction, read-only."
                ]
            },
        ),
        (
            {"first_seq": 1, "colour": "red"},
            {"colour": ["Unknown field."], "first_seq": ["Unknown field."]},
        ),
    ],
)
def test_post_bad_input_is_400_and_nothing_is_stored(
    owner_client, chat_session, records, payload, details
):
    before = list(MemoryRecord.objects.order_by("pk").values())
    body = {"name": "fresh", "description": "d", "body": "b", **payload}
    response = owner_client.post(
        _url(chat_session), json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "validation_error",
        "message": "The request is not valid.",
        "details": details,
    }
    assert list(MemoryRecord.objects.order_by("pk").values()) == before


def test_post_over_1_mb_is_413(owner_client, chat_session):
    body = {"name": "big", "description": "d", "body": "x" * (1024 * 1024 + 1)}
    response = owner_client.post(_url(chat_session), body, format="json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert MemoryRecord.objects.count() == 0


def test_patch_updates_description_and_body(owner_client, chat_session, records):
    response = owner_client.patch(_url(chat_session, "car"), {"body": "A red Fiat."}, format="json")
    assert response.status_code == 200
    records["car"].refresh_from_db()
    assert response.json() == _item(records["car"], body="A red Fiat.")
    assert (records["car"].description, records["car"].token_count) == ("My car", 4)
    # the name and scope are immutable
    for field, value in (("name", "auto"), ("scope", "bot")):
        refused = owner_client.patch(_url(chat_session, "car"), {field: value}, format="json")
        assert refused.status_code == 400
        assert refused.json()["error"]["details"] == {field: ["Cannot be changed."]}
    bad = owner_client.patch(_url(chat_session, "car"), {"description": "y" * 141}, format="json")
    assert bad.status_code == 400
    records["car"].refresh_from_db()
    assert (records["car"].name, records["car"].description) == ("car", "My car")


def test_snapshots_are_read_only_over_the_api(owner_client, chat_session, records):
    expected = {
        "error": {
            "code": "validation_error",
            "message": "Snapshots are read-only.",
            "details": {"kind": ["Snapshots are read-only."]},
        }
    }
    patch = owner_client.patch(_url(chat_session, "snapshot_1_6"), {"body": "x"}, format="json")
    delete = owner_client.delete(_url(chat_session, "snapshot_1_6"))
    assert (patch.status_code, patch.json()) == (400, expected)
    assert (delete.status_code, delete.json()) == (400, expected)
    assert MemoryRecord.objects.get(name="snapshot_1_6").body == "[1] user: my sister plays cello."


def test_delete_removes_the_record(owner_client, chat_session, records):
    response = owner_client.delete(_url(chat_session, "home"))
    assert response.status_code == 204
    assert not MemoryRecord.objects.filter(name="home").exists()
    again = owner_client.delete(_url(chat_session, "home"))
    assert again.status_code == 404


def test_other_users_session_is_404_and_nothing_changes(other_client, chat_session, records):
    before = list(MemoryRecord.objects.order_by("pk").values())
    attempts = [
        other_client.get(_url(chat_session)),
        other_client.get(_url(chat_session), {"q": "porto"}),
        other_client.post(
            _url(chat_session), {"name": "x", "description": "d", "body": "b"}, format="json"
        ),
        other_client.post(_url(chat_session), {"name": "BAD"}, format="json"),
        other_client.get(_url(chat_session, "home")),
        other_client.patch(_url(chat_session, "home"), {"body": "hacked"}, format="json"),
        other_client.delete(_url(chat_session, "home")),
        other_client.delete(_url(chat_session, "snapshot_1_6")),
    ]
    for response in attempts:
        assert (response.status_code, response.json()) == (404, _not_found())
    assert list(MemoryRecord.objects.order_by("pk").values()) == before


def test_anonymous_is_401(chat_session):
    response = APIClient().get(_url(chat_session))
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"


def test_schema_documents_the_records_endpoints(owner_client):
    schema = owner_client.get("/api/schema/", {"format": "json"}).json()
    records = schema["paths"]["/api/v1/sessions/{session_id}/records/"]
    detail = schema["paths"]["/api/v1/sessions/{session_id}/records/{name}/"]
    assert set(records) >= {"get", "post"} and set(detail) >= {"get", "patch", "delete"}
    assert set(records["post"]["responses"]) == {"201", "400", "401", "404", "413"}
    assert {p["name"] for p in records["get"]["parameters"]} >= {"kind", "scope", "q"}


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inmemory_channel_layer")
async def test_memory_updated_frame_reaches_the_websocket_after_a_create(owner, chat_session):
    token = await database_sync_to_async(lambda: Token.objects.get_or_create(user=owner)[0].key)()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{chat_session.pk}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    assert (await communicator.connect(timeout=5))[0]
    try:
        record = await database_sync_to_async(services.record_create)(
            session=chat_session, name="locker", description="Locker code", body="4471"
        )
        frame = json.loads(await communicator.receive_from(timeout=5))
    finally:
        await communicator.disconnect()
    assert frame == {
        "type": "memory.updated",
        "records": [
            {
                "name": "locker",
                "kind": "info",
                "scope": "session",
                "description": "Locker code",
                "first_seq": None,
                "last_seq": None,
                "token_count": 2,
                "created_at": _iso(record.created_at),
            }
        ],
    }
