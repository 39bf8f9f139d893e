"""Memory writes: validation, upsert, read-only snapshots, recall events, after-commit frames."""

from unittest import mock

import pytest

from chat_platform.errors import NotFound, PayloadTooLarge, ValidationFailed
from chat_platform.llm.tokens import count_tokens
from memory import queries, realtime, recall_events, services
from memory.models import MemoryRecord, RecallEvent
from tests.factories import message_add

pytestmark = pytest.mark.django_db

OK = {"name": "locker", "description": "Locker code", "body": "My locker code is 4471."}


def _details(exc_info):
    return exc_info.value.details


@pytest.mark.parametrize(
    ("fields", "details"),
    [
        (
            {"name": "Bad Name"},
            {"name": ["Use 1–80 characters: lowercase letters, digits, '_' and '-'."]},
        ),
        (
            {"name": "ok\n"},
            {"name": ["Use 1–80 characters: lowercase letters, digits, '_' and '-'."]},
        ),
        (
            {"name": "snapshot_1_2"},
            {"name": ["Names starting with 'snapshot_' are reserved for snapshots."]},
        ),
        (
            {"description": "d" * 141},
            {"description": ["Ensure this value has at most 140 characters (it has 141)."]},
        ),
        ({"description": "  \n "}, {"description": ["This field may not be blank."]}),
        ({"body": "   "}, {"body": ["This field may not be blank."]}),
        (
            {"body": "nul \x00 here"},
            {"body": ["Text may not contain NUL characters or unpaired surrogates."]},
        ),
        (
            {"description": "lone \ud800"},
            {"description": ["Text may not contain NUL characters or unpaired surrogates."]},
        ),
        ({"scope": "everyone"}, {"scope": ["Must be one of: session, bot."]}),
        ({"name": 5}, {"name": ["This field is required and must be text."]}),
    ],
)
def test_bad_input_is_a_validation_error_and_nothing_is_stored(chat_session, fields, details):
    for write in (services.record_create, services.record_save):
        with pytest.raises(ValidationFailed) as exc:
            write(session=chat_session, **{**OK, **fields})
        assert _details(exc) == details
    assert MemoryRecord.objects.count() == 0


def test_a_body_over_1_mb_is_payload_too_large(chat_session, settings):
    settings.MESSAGE_MAX_BYTES = 100
    with pytest.raises(PayloadTooLarge) as exc:
        services.record_create(session=chat_session, **{**OK, "body": "é" * 51})
    assert exc.value.http_status == 413
    assert MemoryRecord.objects.count() == 0


def test_create_stores_token_count_and_one_line_description(chat_session):
    record = services.record_create(
        session=chat_session, **{**OK, "description": "  Locker\n  code\tat work "}
    )
    record.refresh_from_db()
    assert (record.kind, record.scope, record.description, record.body) == (
        "info",
        "session",
        "Locker code at work",
        "My locker code is 4471.",
    )
    assert record.token_count == count_tokens("My locker code is 4471.") == 8


def test_create_refuses_a_name_the_session_can_already_read(chat_session):
    services.record_create(session=chat_session, **{**OK, "scope": "bot"})
    for scope in ("session", "bot"):
        with pytest.raises(ValidationFailed) as exc:
            services.record_create(session=chat_session, **{**OK, "scope": scope, "body": "x"})
        assert _details(exc) == {"name": ["A record named 'locker' already exists in this chat."]}
    assert list(MemoryRecord.objects.values_list("body", flat=True)) == [OK["body"]]


def test_save_is_an_upsert_that_keeps_the_scope(chat_session, sibling_session):
    first = services.record_save(session=chat_session, **OK, scope="bot")
    again = services.record_save(
        session=sibling_session, name="locker", description="Locker code (new)", body="It is 5512."
    )
    assert again.pk == first.pk
    again.refresh_from_db()
    assert (again.scope, again.description, again.body, again.token_count) == (
        "bot",
        "Locker code (new)",
        "It is 5512.",
        count_tokens("It is 5512."),
    )
    assert MemoryRecord.objects.count() == 1
    with pytest.raises(ValidationFailed) as exc:
        services.record_save(session=chat_session, **OK, scope="session")
    assert _details(exc) == {"scope": ["'locker' is a bot-scoped record; its scope cannot change."]}


def test_snapshots_are_read_only(chat_session):
    services.snapshot_write(session=chat_session, first_seq=1, last_seq=2, body="[1] user: hi")
    name = "snapshot_1_2"
    for write in (
        lambda: services.record_update(session=chat_session, name=name, body="changed"),
        lambda: services.record_delete(session=chat_session, name=name),
    ):
        with pytest.raises(ValidationFailed) as exc:
            write()
        assert _details(exc) == {"kind": ["Snapshots are read-only."]}
    assert MemoryRecord.objects.get().body == "[1] user: hi"


def test_update_and_delete(chat_session, sibling_session):
    services.record_create(session=chat_session, **OK)
    record = services.record_update(session=chat_session, name="locker", description="Code")
    assert (record.description, record.body) == ("Code", OK["body"])
    with pytest.raises(NotFound):
        services.record_update(session=sibling_session, name="locker", body="stolen")
    with pytest.raises(NotFound):
        services.record_delete(session=sibling_session, name="locker")
    assert MemoryRecord.objects.get().description == "Code"
    services.record_delete(session=chat_session, name="locker")
    assert MemoryRecord.objects.count() == 0


def test_memory_updated_is_sent_after_commit_to_every_chat_that_sees_the_record(
    chat_session, sibling_session, other_bot_session, django_capture_on_commit_callbacks
):
    sent = []
    with mock.patch.object(realtime, "send_frame", lambda sid, frame: sent.append((sid, frame))):
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            services.record_save(session=chat_session, **OK, scope="bot")
        assert sent == []  # nothing before commit
        for callback in callbacks:
            callback()
        assert sorted(sid for sid, _ in sent) == sorted([chat_session.pk, sibling_session.pk])
        frame = dict(sent)[chat_session.pk]
        record = MemoryRecord.objects.get()
        assert frame == {
            "type": "memory.updated",
            "records": [
                {
                    "name": "locker",
                    "kind": "info",
                    "scope": "bot",
                    "description": "Locker code",
                    "first_seq": None,
                    "last_seq": None,
                    "token_count": 8,
                    "created_at": record.created_at.isoformat().replace("+00:00", "Z"),
                }
            ],
        }
        sent.clear()
        with django_capture_on_commit_callbacks(execute=True):
            services.record_create(session=chat_session, **{**OK, "name": "mine"})
        assert [sid for sid, _ in sent] == [chat_session.pk]
        assert [r["name"] for r in sent[0][1]["records"]] == ["mine", "locker"]


def test_memory_updated_frame_is_the_index(chat_session):
    chat_session.bot.memory_index_size = 1
    services.record_save(session=chat_session, **OK)
    services.record_save(session=chat_session, **{**OK, "name": "newer"})
    assert [r["name"] for r in realtime.memory_updated_frame(session=chat_session)["records"]] == [
        "newer"
    ]
    chat_session.bot.memory_index_size = 0
    assert realtime.memory_updated_frame(session=chat_session) == {
        "type": "memory.updated",
        "records": [],
    }


def test_recall_event_write_stores_and_sends_the_recall_frame(
    chat_session, django_capture_on_commit_callbacks
):
    reply = message_add(chat_session, role="assistant", content="", status="streaming")
    sent = []
    with (
        mock.patch.object(realtime, "send_frame", lambda sid, frame: sent.append((sid, frame))),
        django_capture_on_commit_callbacks(execute=True),
    ):
        event = recall_events.recall_event_write(
            session=chat_session,
            message=reply,
            recall_round=1,
            tool="search",
            query="where \x00 live",
            found=["home", "sister"],
            tokens=57,
        )
    event.refresh_from_db()
    assert (event.round, event.tool, event.names, event.query, event.found, event.tokens) == (
        1,
        "search",
        [],
        "where  live",
        ["home", "sister"],
        57,
    )
    assert sent == [
        (
            chat_session.pk,
            {
                "type": "recall",
                "message_id": reply.pk,
                "round": 1,
                "tool": "search",
                "names": [],
                "query": "where  live",
                "found": ["home", "sister"],
            },
        )
    ]
    with pytest.raises(ValueError, match="Unknown recall tool"):
        recall_events.recall_event_write(
            session=chat_session, message=None, recall_round=1, tool="write"
        )
    assert RecallEvent.objects.count() == 1


def test_index_reads_what_services_wrote(chat_session):
    services.record_save(session=chat_session, **OK)
    assert [line.text for line in queries.memory_index_lines(session=chat_session, limit=5)] == [
        "- locker (info): Locker code"
    ]
